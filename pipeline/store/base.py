"""The records the store keeps and the ``Store`` protocol every backend implements."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal, NamedTuple, Protocol

from fleetwatch.frame import Frame

MINUTE_MS = 60_000
# Spans longer than this are read from 1-minute means, by every backend.
RAW_SPAN_MS = 6 * 3600 * 1000

AlertState = Literal["pending", "firing", "resolved"]
ACTIVE_STATES: tuple[AlertState, ...] = ("pending", "firing")


class SeriesKey(NamedTuple):
    """A series: one metric of one device. ``device`` is ``gpu3``, ``host`` or a port name."""

    metric: str
    cluster: str
    rack: str
    node: str
    device: str


# (series, timestamp in ms since the epoch, value)
Point = tuple[SeriesKey, int, float]


def gpu_device(index: int) -> str:
    return f"gpu{index}"


def gpu_index(device: str) -> int | None:
    """The GPU index of a ``gpuN`` device name, else None."""
    if device.startswith("gpu") and device[3:].isdigit():
        return int(device[3:])
    return None


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert through its life: pending → firing → resolved.

    ``id`` is stable for the alert's whole life, so writing it again with a
    new state replaces the old row.
    """

    id: str
    rule: str
    severity: str
    cluster: str
    rack: str
    node: str
    device: str
    state: AlertState
    started_ts: float
    updated_ts: float
    value: float
    message: str
    fired_ts: float | None = None
    resolved_ts: float | None = None
    # The values that triggered it (metric or quantity name -> number) and what to do.
    evidence: Mapping[str, float] = field(default_factory=dict)
    action: str = ""
    # The board a GPU alert is about, as its frames named it when the alert opened (what
    # an RMA asks for; empty where the agent could not read it, and for node and rack
    # alerts): a board replaced in the slot later does not rename it.
    uuid: str = ""
    serial: str = ""
    pci_bus_id: str = ""
    # The jobs it is about (job id as the frames name it; a shared GPU's each apart), as
    # its detector knew them: links and job pages read them here, never from the message.
    # Empty for an alert about no job, and for one an older release stored (see
    # ``pipeline.links``).
    jobs: tuple[str, ...] = ()
    # How it ended, where its detector said (``Finding.ends``: an ECC count back down at a
    # reset), apart from the message and action it fired with; "" for the rest, and in a
    # store of an older release (whose resolved alerts hold the ending in their message).
    resolution: str = ""
    # The message as it was when it fired (``message`` is the latest): a postmortem's
    # timeline shows the firing as it was then. "" before it fires, in a store of an older
    # release, and where text is not kept (VictoriaMetrics).
    fired_message: str = ""
    # Whom its jobs belong to (user and team, as the agent read them from the scheduler),
    # empty where the frames named none. ``teams`` is that of the alert as it opened, kept
    # for its life: Alertmanager routes on it (label ``team``), and a label set that changed
    # would be a new alert there.
    users: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()


def board(a: Alert) -> dict[str, str]:
    """The GPU board an alert names, as sinks and views show it: serial, uuid, pci_bus_id
    (each only where known; empty for node and rack alerts)."""
    return {k: v for k, v in (("serial", a.serial), ("uuid", a.uuid),
                              ("pci_bus_id", a.pci_bus_id)) if v}


def evidence_value(key: str, value: float, fmt: str = "g") -> str:
    """One evidence value as a person reads it: a time (a key ending ``_ts``, such as an
    XID's first and last sighting, or whose first part does: a rack's
    ``last_frame_ts.<node>``) in UTC, a number in ``fmt``."""
    if key.split(".", 1)[0].endswith("_ts") and value > 0:
        try:
            return datetime.fromtimestamp(value, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (OverflowError, OSError, ValueError):
            pass
    return format(value, fmt)


def board_text(a: Alert) -> str:
    """``serial=1650..., uuid=GPU-..., pci_bus_id=00000000:31:00.0``, or "" if none."""
    return ", ".join(f"{k}={v}" for k, v in board(a).items())


@dataclass(frozen=True, slots=True)
class Annotation:
    """A span of time worth showing beside the data, e.g. a fault the simulator injected.

    ``cluster``: the node's cluster ("": any, as annotations written before they had one
    read back: those stores held one cluster, and hiding them would lose what they showed).
    """

    kind: str
    start_ts: float
    end_ts: float | None
    node: str
    device: str
    text: str
    cluster: str = ""


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to a device at an instant: what failure detection and
    energy attribution read back. Stored by every backend beside the series.

    kind: ``xid`` (``code`` is the XID), ``gpu_state`` (``value`` the new state:
    ok, lost, ...), ``throttle`` (``code`` the new NVML clocks-event bitmask),
    ``job_start`` / ``job_end`` (``value`` the job id), ``node_state``
    (``value``: silent, back), ``gpu_identity`` (``value`` the board's UUID, ``text`` its
    serial, PCI bus id and model: the first frame a processor sees of a GPU, and each
    change) and ``gpu_replaced`` (``value`` the new board's UUID, ``text`` the old and
    new boards: the UUID in a GPU slot changed). ``value`` holds only bounded, enumerable text
    (a state name, a job id); ``text`` holds free text (a kernel log line) and
    is never made a series label.
    """

    ts: float
    kind: str
    cluster: str
    rack: str
    node: str
    device: str          # gpu3, host
    code: int = 0
    value: str = ""
    text: str = ""


@dataclass(frozen=True, slots=True)
class EventGroup:
    """One device's repeats of one event in a range (a GPU's XID 48 once a second): how
    many, the first time, and the newest (``last``: its time, and its text where kept)."""

    last: Event
    count: int
    first_ts: float


def group_key(e: Event) -> tuple[str, str, str, str, str, int, str]:
    """What repeats share: the place, the kind, the code and the value."""
    return (e.cluster, e.rack, e.node, e.device, e.kind, e.code, e.value)


def group_events(events: Iterable[Event]) -> list[EventGroup]:
    """Events as repeat groups, the newest last time first (ties by device, kind, code)."""
    groups: dict[tuple[str, str, str, str, str, int, str], EventGroup] = {}
    for e in events:
        key = group_key(e)
        g = groups.get(key)
        if g is None:
            groups[key] = EventGroup(e, 1, e.ts)
        else:
            groups[key] = EventGroup(e if e.ts >= g.last.ts else g.last, g.count + 1,
                                     min(g.first_ts, e.ts))
    return sorted(groups.values(), key=group_order)


def group_order(g: EventGroup) -> tuple[float, str, str, int, str]:
    return (-g.last.ts, g.last.device, g.last.kind, g.last.code, g.last.value)


@dataclass(frozen=True, slots=True)
class Silence:
    """Mute notifications of the alerts that match every matcher, from ``start_ts`` to
    ``end_ts`` (epoch s, compared with the stream's time: see ``pipeline.silence_matchers``).
    A matcher is ``(label, op, value)`` with op ``=``, ``!=``, ``=~`` or ``!~`` (a full-match
    regular expression), as in Alertmanager; labels: rule, severity, cluster, rack, node,
    device. ``created_ts``: when it was made (it may start later); ``expired_ts``: when
    ``silence expire`` ended or cancelled it; 0 where unknown (records of older versions)
    or not expired. ``planned_end_ts``: the end it was made with, where ``silence expire``
    moved ``end_ts`` (a pending one cancelled keeps ``end_ts == start_ts``: never in
    force); 0 where not moved or unknown."""

    id: str
    matchers: tuple[tuple[str, str, str], ...]
    start_ts: float
    end_ts: float
    created_by: str = ""
    comment: str = ""
    created_ts: float = 0.0
    expired_ts: float = 0.0
    planned_end_ts: float = 0.0


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """Someone owns this alert: it stays open and shown, but is not notified again
    until it resolves."""

    alert_id: str
    ts: float
    by: str
    comment: str = ""


@dataclass(frozen=True, slots=True)
class Notification:
    """What the notifier decided for one alert change at one notifying sink, recorded at
    the time (a postmortem's "who was told what, when"): ``outcome`` ``queued`` (handed to
    the sink, no outcome yet), ``sent`` (the sink confirmed it), ``given_up``, ``failed``
    (``sinks.notified``) or ``muted`` (``muted_by``: ``silence:ID``, ``inhibited:ALERT_ID``,
    ``ack:BY``). ``ts``: the stream's time (the alert's clock), ``sent_ts``: the wall
    clock when it was decided."""

    ts: float
    sent_ts: float
    sink: str
    alert_id: str
    rule: str
    severity: str
    cluster: str
    rack: str
    node: str
    device: str
    state: str
    outcome: str
    muted_by: str = ""


class StoreError(RuntimeError):
    """The store could not take or give data now; the caller may retry."""


class StoreLost(RuntimeError):
    """The store's file is no longer at its path (moved, renamed, deleted or replaced while
    this process wrote it): writing on would send data where nobody reads it. Not retried:
    the processor stops, non-zero, with this message."""


class StoreRejected(ValueError):
    """The store refused data for good (a 4xx answer, a timestamp outside what it
    accepts): sending the same again will fail again. ``reason`` says why in the
    store's words; the processor bisects the batch and dead-letters the culprits."""

    def __init__(self, reason: str, indices: Sequence[int] | None = None,
                 about_frames: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        # Positions (in the batch given to the call) of the frames that were refused,
        # when the store can tell; None: somewhere in the batch (bisect to find them).
        self.indices = None if indices is None else tuple(indices)
        # True (unless the store knows better): the frames themselves are wrong for any
        # store (a time outside what it keeps, a name it cannot carry), so the processor
        # does not judge them either. False, said by the store where it can tell: its own
        # reason (another writer's field type, its series limit): the frames are sound and
        # still judged, so alerts do not depend on it.
        self.about_frames = about_frames


class EventStore(Protocol):
    """Events: what happened to a device at an instant (XIDs, a GPU lost, throttle
    reasons, jobs). What failure detection and per-job energy read."""

    def write_events(self, events: Sequence[Event]) -> None:
        """Store events; idempotent: an event written again (same time to the ms, kind,
        place, code and value) is kept once."""

    def events(self, start_ts: float, end_ts: float, node: str | None = None,
               kinds: Sequence[str] | None = None, device: str | None = None,
               except_xids: Collection[int] = ()) -> list[Event]:
        """Events in [start, end), oldest first, optionally of one node, device or kinds;
        XID events of the codes in ``except_xids`` are left out in the query (a job's
        XID storm can be millions). A backend that cannot keep ``text`` says so and
        returns it empty."""


class AlertStore(Protocol):
    """Alerts through their life, keyed by (cluster, id)."""

    def write_alerts(self, alerts: Sequence[Alert]) -> None: ...

    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]: ...


class Store(EventStore, AlertStore, Protocol):
    """Where frames (series), events, alerts and annotations live. A store whose
    ``write`` may be called from several threads at once says how many with a class
    attribute ``concurrent_writes`` (read with a default of 1: one at a time)."""

    def write(self, frames: Sequence[Frame]) -> int:
        """Write every metric of these frames; idempotent on (series, timestamp).

        Returns the number of points (one metric of one device at one instant)
        written. Raises ``StoreError`` when the store cannot take them now, and
        ``StoreRejected`` when it will never take some of them; with
        ``indices`` set, nothing of the batch was written and the frames at
        those positions are the ones refused (write the others again).
        """

    def write_annotations(self, annotations: Sequence[Annotation]) -> None: ...

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        """The newest point of every series of ``metric`` newer than ``since_ms``."""

    def newest_ms(self, metric: str, since_ms: int, until_ms: int,
                  cluster: str | None = None) -> int | None:
        """The time of the newest point of ``metric`` in [since, until], any series (of
        ``cluster`` where given), or None: one indexed or server-side read, whatever the
        window holds (a page opened while the fleet is silent asks it)."""

    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None, cluster: str | None = None) -> list[Point]:
        """Points in [start, end), raw for short spans and 1-minute means for long ones;
        of one node, device or cluster where given (node names repeat across clusters:
        a node is only one machine within its cluster)."""

    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]: ...

    def write_silences(self, silences: Sequence[Silence]) -> None:
        """Add or replace (by id) silences. Expire one by writing it with an earlier end.
        The matchers come back exactly or the silence is refused (``StoreRejected``) or,
        if damaged, not returned; a backend that cannot keep a comment says so and returns
        it empty (VictoriaMetrics: ``lpsilences``)."""

    def silences(self, active_at: float | None = None) -> list[Silence]:
        """Every silence, or those in force at ``active_at`` (epoch s)."""

    def write_acks(self, acks: Sequence[Acknowledgement]) -> None:
        """Add or replace (by alert id) acknowledgements."""

    def acks(self) -> list[Acknowledgement]: ...

    def maintain(self, now_ms: int) -> None:
        """Roll up closed minutes and drop data past retention."""

    def close(self) -> None: ...
