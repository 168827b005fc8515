"""Anomaly detection: rules, peer comparison and learned models.

Every detector is a ``Detector``: it sees batches of frames and says what is
wrong now as ``Finding``s. Detectors never touch the bus or the store; the
processor feeds them and the alert lifecycle in ``fleetwatch.pipeline.alerts``
turns findings into alerts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from fleetwatch.frame import Frame

Scope = Literal["gpu", "node", "rack"]
Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True, slots=True)
class Finding:
    """A condition that holds now for one subject.

    The subject is a GPU (``scope`` gpu, ``gpu`` its index), a node (``scope``
    node, ``gpu`` None) or a rack (``scope`` rack, ``node`` "", ``gpu`` None).
    """

    rule: str
    cluster: str
    rack: str
    node: str
    gpu: int | None
    ts: float
    value: float
    message: str
    severity: str = "warning"
    # How long the condition must hold before the alert fires.
    for_s: float = 0.0
    # Latched events (an XID, an ECC jump): the condition counts as holding this
    # long after its last sighting, so one event is one alert, not a blip.
    hold_s: float = 0.0
    # The values that triggered it (name -> number) and what the operator should do.
    evidence: Mapping[str, float] = field(default_factory=dict)
    action: str = ""
    scope: Scope = "gpu"
    # The GPU board (UUID) the finding is about, where its detector tells boards apart
    # (XIDs): an open alert that names another board (the slot's board was replaced)
    # ends, and a new one about this board opens, so that it is notified as new.
    board: str = ""
    # When the condition began as far as the detector's data shows, where that is before
    # ``ts`` (a rack found warmer than its peers from samples that began to warm earlier):
    # the alert opens as started then.
    since: float | None = None
    # ``since`` is also when the alert would have fired, had a processor watched then (a node
    # silent since before a takeover: its limit passed then): a new alert fires as of it, not
    # at its detection. False: it fires when found (a replay's lost GPU, found later).
    fired_since: bool = False
    # The jobs it is about (``job_ids``): carried by the alert (``Alert.jobs``).
    jobs: tuple[str, ...] = ()
    # The finding says how its condition ended (an ECC count back down at a reset): its
    # message and action become the open alert's ``resolution``; the firing message and
    # action (the job, what the on-call was told to do) stay.
    ends: bool = False
    # The detector no longer judges the subject at all (a node not heard of for
    # ``node_silence.FORGET_S``): its open alert resolves now, with this finding's message
    # and action as its ``resolution`` (not "back"); no alert opens where none is open.
    # With ``FORGOTTEN`` in its evidence, every open alert of its node (scope node: the
    # node's and its GPUs', of any rule) or of its rack (scope rack) resolves with it.
    resolves: bool = False
    # Whom its jobs belong to, as the frames name them (``GpuReading.info`` user and team,
    # from the scheduler): carried by the alert (``Alert.users``, ``Alert.teams``); empty
    # where unknown.
    users: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()


def job_ids(job: str | None) -> tuple[str, ...]:
    """A GPU reading's job as job ids: a shared GPU's jobs come comma-joined
    (``collectors.jobs``), each apart here; () for none."""
    return tuple(j for j in job.split(",") if j) if job else ()


# Evidence key: a number a detector changes when its open alert must be written and
# notified again (another XID code joined an XID alert): at once if ``RANK`` rose, else at
# most once per refresh_s; see pipeline/alerts.py.
REVISION = "revision"
# Evidence key: a ``resolves`` finding that says its node (or rack) is forgotten for good
# (``node_silence.FORGET_S``): not its own alert alone, but every open alert of that
# subject resolves with it (an XID or a heat alert latched as an autoscaler removed it
# would stay open for ever, no frame coming to judge it).
FORGOTTEN = "forgotten"
# Evidence key: how many times the alert's event was seen (an XID alert's XIDs): a change
# is written at once the first time it repeats, else at most every few seconds
# (``alerts.REPEAT_REFRESH_S``), not notified.
REPEATS = "count"
# Evidence key: how drastic the alert's suggested action is (an XID's rank in the table).
RANK = "rank"
# Evidence key: how long the alert stays firing once judged clear, where its rule knows
# better than ``alerts.keep_firing_s`` (a lost GPU that answers again is back: 0).
KEEP_FIRING = "keep_firing_s"


class OpenAlert(Protocol):
    """What a detector may read of an open alert it takes over (``adopt``): the store's
    ``Alert`` has these, and models do not import the store."""

    @property
    def rule(self) -> str: ...
    @property
    def cluster(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def started_ts(self) -> float: ...
    @property
    def updated_ts(self) -> float: ...
    @property
    def evidence(self) -> Mapping[str, float]: ...


class Detector(Protocol):
    """A detector: batches of frames in, findings out. Pure logic plus its own state.

    ``rules`` maps every rule name the detector emits to the metrics it needs to
    judge a subject. The alert lifecycle resolves an alert of a rule only on a
    frame in which the detector could judge that subject (the GPU is present
    with every metric the rule needs) and found nothing: a detector that did not
    evaluate a GPU is not saying "OK". An empty tuple: any frame of the subject
    will do (latched event rules rely on ``hold_s`` instead).

    A detector that judges against "now" (``NodeSilence``) may declare
    ``uses_wall = True``: the processor then calls ``update(frames, wall=...)`` with
    its own clock for frames from a bus, and ``wall=None`` in a replay or a
    simulation, which are judged on stream time alone. It may also have
    ``behind(nodes)``: the processor calls it before each ``update`` and ``tick`` with
    the nodes ((cluster, node) -> partition) whose partitions still hold frames not read
    yet (catching up a backlog), empty when every partition has been read to its end.
    """

    name: str
    rules: Mapping[str, tuple[str, ...]]

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        """Findings that hold at the time of these frames (all from one batch)."""
