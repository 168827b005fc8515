"""A rack's power back: its nodes' ``node_silent`` alerts, muted under its ``rack_silent``
from their start, are not paged firing as the rack alert resolves. Nodes come back a few
seconds apart (the rack resolves once enough of them are back): one un-muted then is held
``RECOVERY_HOLD_S`` on the stream's clock and paged only if it still fires after; one that
resolves meanwhile (or in the batch its rack resolves) is never posted at all, as it was
never posted firing. A node that stays down after its rack is back is still paged."""

from __future__ import annotations

from dataclasses import replace

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.news import RECOVERY_HOLD_S
from fleetwatch.pipeline.store.base import Alert


class Pager:
    name, notify_only = "pager", True

    def __init__(self) -> None:
        self.pages: list[tuple[str, str]] = []

    def send(self, changes: list[Notice]) -> None:
        self.pages += [(n.alert.node or n.alert.rack, n.alert.state)
                       for n in changes if n.notify]

    def close(self) -> None:
        pass


T = 1000.0
RACK = Alert("rack_silent/c//rack:r1/1000", "rack_silent", "critical", "c", "r1", "",
             "rack:r1", "firing", T, T, 3.0, "Rack r1: 3 of its 3 nodes", fired_ts=T)


def _node(name: str) -> Alert:
    return Alert(f"node_silent/c/{name}/host/1000", "node_silent", "critical", "c", "r1",
                 name, "host", "firing", T, T, 60.0, f"{name} has sent nothing",
                 fired_ts=T)


def _end(a: Alert, ts: float) -> Alert:
    return replace(a, state="resolved", updated_ts=ts, resolved_ts=ts)


def _down() -> tuple[Notifier, Pager, list[Alert]]:
    pager = Pager()
    notifier = Notifier([pager], background=False)
    nodes = [_node(n) for n in ("a1", "a2", "a3")]
    notifier.send([RACK, *nodes], now=T)
    assert pager.pages == [("r1", "firing")]  # one page: the rack
    return notifier, pager, nodes


def test_nodes_back_seconds_after_their_rack_are_not_paged() -> None:
    notifier, pager, (a1, a2, a3) = _down()
    notifier.send([_end(RACK, T + 60), _end(a2, T + 60)], now=T + 60)
    notifier.send([_end(a1, T + 61), _end(a3, T + 61)], now=T + 61)
    notifier.send([], now=T + 61 + RECOVERY_HOLD_S + 5)
    assert pager.pages == [("r1", "firing"), ("r1", "resolved")]


def test_a_node_still_down_after_its_rack_is_back_is_paged_once_the_hold_passed() -> None:
    notifier, pager, (a1, a2, a3) = _down()
    notifier.send([_end(RACK, T + 60), _end(a2, T + 60), _end(a3, T + 60)], now=T + 60)
    notifier.send([], now=T + 60 + RECOVERY_HOLD_S / 2)
    assert pager.pages == [("r1", "firing"), ("r1", "resolved")]
    notifier.send([], now=T + 61 + RECOVERY_HOLD_S)
    assert pager.pages[2:] == [("a1", "firing")]
    notifier.send([], now=T + 70 + RECOVERY_HOLD_S)
    notifier.send([_end(a1, T + 200)], now=T + 200)
    assert pager.pages[2:] == [("a1", "firing"), ("a1", "resolved")]
