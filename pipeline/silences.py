"""Who hears about an alert: silences, inhibition, acknowledgements, grouping.

Pure functions over alerts. They act on notifications, never on the lifecycle:
a silenced or inhibited alert still goes pending → firing → resolved in the
book and the store, as in Alertmanager; only the notifying sinks stay quiet.

* A silence mutes the alerts that match all its matchers while it is in force
  (``pipeline.silence_matchers``); one heard again once it ends, unless a receiver was
  told of it before and it has not changed since (state, revision, severity), or its
  subject is clear again (held firing only by ``keep_firing_s``: a node rebooted within
  its silence), when it is heard if its finding comes back before it resolves.
* A firing alert that explains another mutes it: a node down its GPUs', a cooling
  failure its thermal symptoms, a cause on one GPU its consequences, one finding of a
  hot GPU the other (``pipeline.inhibition``).
* An acknowledged alert is not notified again until it resolves, and what it explains on
  its GPU stays muted under it meanwhile (an ack is "I have this GPU"; a silence is not:
  it mutes only what it matches).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleetwatch.pipeline.inhibition import covers_while_muted, inhibited_by
from fleetwatch.pipeline.silence_matchers import labels, silenced_by
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence


def visible(text: str) -> str:
    """Text people typed (an acknowledgement's or silence's author and comment), each
    character a terminal would act on (ESC, BEL, CR, a bidi override) written as its escape
    (``\\x1b``): a store of an older release may hold such text, refused now at input."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


@dataclass(frozen=True, slots=True)
class Notice:
    """An alert change with why it is muted ("" if it is not)."""

    alert: Alert
    muted_by: str = ""
    # Notified before in this state and revision, inhibited since, and no longer (its
    # cover resolved): the record sinks hear it, the receivers that heard it are not paged
    # twice for one unchanged alert (``Notifier``).
    heard: bool = False

    @property
    def notify(self) -> bool:
        """Does a notifying sink (Alertmanager, webhook) tell anyone? Firing, and resolved
        ones that had fired, unless ``heard``; pending and never-fired ones stay in the
        record."""
        if self.muted_by or self.heard:
            return False
        a = self.alert
        return a.state == "firing" or (a.state == "resolved" and a.fired_ts is not None)


def mute(alert: Alert, open_alerts: Iterable[Alert], silences: Sequence[Silence],
         acks: Mapping[str, Acknowledgement], at: float | None = None) -> str:
    """Why this change is not notified: ``silence:ID``, ``inhibited:ID``, ``ack:BY``, or "".
    ``at``: the stream's time now (silences are judged then; see ``silenced_by``). A cause
    on the alert's GPU mutes it only if that cause is heard, acknowledged, or muted only by
    a cover on its own GPU (``inhibited_by``, ``covers_while_muted``)."""
    return _mute(alert, list(open_alerts), silences, acks, at, frozenset())


def _mute(alert: Alert, open_alerts: list[Alert], silences: Sequence[Silence],
          acks: Mapping[str, Acknowledgement], at: float | None,
          judging: frozenset[str]) -> str:
    sid = silenced_by(alert, silences, at)
    if sid:
        return f"silence:{sid}"
    inner = judging | {alert.id}

    def heard(cause: Alert) -> bool:  # a cause already being judged (a loop) is not heard
        if cause.id in inner:
            return False
        why = _mute(cause, open_alerts, silences, acks, at, inner)
        # Acknowledged ("I have this"), it still covers what it explains, as Alertmanager's
        # inhibition uses a source whatever mutes it: an ack pages nothing more of its GPU.
        # Muted by its own GPU's heard cover, it still covers (one incident, one page).
        # Silenced, or inhibited by a node, rack or room alert, it covers nothing: a
        # silence mutes what it matches only.
        return not why or why.startswith("ack:") or covers_while_muted(cause, why, open_alerts)

    iid = inhibited_by(alert, open_alerts, heard)
    if iid:
        return f"inhibited:{iid}"
    ack = acks.get(alert.id)
    if ack is not None and alert.state == "firing":
        return f"ack:{ack.by}"
    return ""


def group(alerts: Iterable[Alert], by: Sequence[str] = ("cluster", "rack", "node")
          ) -> dict[tuple[str, ...], list[Alert]]:
    """Alerts grouped by these labels (a rack alert, whose node is "", is its own group)."""
    out: dict[tuple[str, ...], list[Alert]] = defaultdict(list)
    for a in alerts:
        have = labels(a)
        out[tuple(have[k] for k in by)].append(a)
    return dict(out)
