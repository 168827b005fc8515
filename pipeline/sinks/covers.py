"""The open alerts that may mute others (``Covers``), an incident's page with its later
findings joined in, and the order of one batch's sends: the ``Notifier``'s view of
inhibition over its open alerts (the rules are ``pipeline.inhibition``'s)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fleetwatch.pipeline.alert_keys import alert_key, scope_of
from fleetwatch.pipeline.inhibition import (
    GPU_COVER_RULES,
    NODE_COVER_RULES,
    PEER_RULES,
    incident_joined,
    same_incident,
)
from fleetwatch.pipeline.silences import Notice, mute
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence


class Covers:
    """The open alerts that may mute others: node and rack ones (``wide``), and by GPU
    (cluster, node, device) those that may mute an alert of the same GPU."""

    def __init__(self) -> None:
        self.wide: list[Alert] = []
        self.gpu: dict[tuple[str, str, str], list[Alert]] = {}

    def of(self, a: Alert) -> list[Alert]:
        """What may mute ``a``: the wide ones and its own GPU's."""
        return [*self.wide, *self.of_gpu(a)]

    def of_gpu(self, a: Alert) -> list[Alert]:
        """Its own GPU's."""
        return self.gpu.get((a.cluster, a.node, a.device), [])


def covers_of(open_alerts: Iterable[Alert]) -> Covers:
    """The open alerts that may inhibit others (firing, of a node or a rack, or of a
    GPU and a rule of ``SAME_GPU_COVERS``): what ``mute`` needs to see, so that judging
    every open alert is not quadratic."""
    covers = Covers()
    for a in open_alerts:
        if a.rule in PEER_RULES or a.state == "firing" and a.rule in GPU_COVER_RULES:
            covers.gpu.setdefault((a.cluster, a.node, a.device), []).append(a)
        elif a.state == "firing" and (scope_of(a) == "rack" or scope_of(a) == "node"
                                      and a.rule in NODE_COVER_RULES):
            covers.wide.append(a)
    return covers


def joined(a: Alert, covers: Covers, silences: Sequence[Silence],
           acks: Mapping[str, Acknowledgement], now: float) -> Alert:
    """``a`` with the later findings of its incident that it mutes joined in (one
    notified on its own, as the page is not heard, is not repeated in it)."""
    page = f"inhibited:{a.id}"
    for later in covers.of_gpu(a):
        if (later.id != a.id and later.state == "firing" and same_incident(a, later)
                and mute(later, covers.of(later), silences, acks, now) == page):
            a = incident_joined(a, later)
    return a


def replaced_first(notices: list[Notice]) -> list[list[Notice]]:
    """The notices in the sends to make: an alert resolved because another about its
    subject opened in the same batch (a GPU's board replaced: ``pipeline.alerts``) goes
    in a send before it, so that a sink keyed by the subject (Alertmanager's label set)
    hears the end before the new alert, not the end last, as the new alert's."""
    opened = {alert_key(n.alert) for n in notices if n.alert.state != "resolved"}
    first = [n for n in notices if n.alert.state == "resolved" and alert_key(n.alert) in opened]
    if not first:
        return [notices] if notices else []
    return [first, [n for n in notices if not (n.alert.state == "resolved"
                                               and alert_key(n.alert) in opened)]]
