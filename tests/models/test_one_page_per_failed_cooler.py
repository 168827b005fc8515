"""One failed cooler, one page: ``gpu_warming_at_steady_power`` (the die climbing at steady
power, on the cooler's first faulty sample) is a third finding of the incident that
``gpu_hot_vs_peers_critical`` and ``gpu_temp_critical`` find minutes later. Whichever of the
three fires first is the page; the later ones are muted (still stored) and shown in it.
Before, the warming alert paged, then the peer or limit alert of the same GPU paged again."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from fleetwatch.pipeline.inhibition import inhibited_by
from fleetwatch.pipeline.silences import Notice, mute
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Alert
from tests.recording_sink import Recording

WARM, PEER, LIMIT = "gpu_warming_at_steady_power", "gpu_hot_vs_peers_critical", "gpu_temp_critical"
EVIDENCE = {WARM: {"temp_c": 71.0, "climb_c": 9.0, "explained_c": 1.0, "power_w": 400.0},
            PEER: {"gpu_temp_c": 84.0, "peer_temp_c": 66.0, "excess_c": 14.0},
            LIMIT: {"gpu_temp_c": 91.0, "slowdown_temp_c": 90.0}}


def firing(rule: str, fired: float, device: str = "gpu0", severity: str = "critical") -> Alert:
    return Alert(f"{rule}/c/n1/{device}/{fired:g}", rule, severity, "c", "r1", "n1", device,
                 "firing", fired - 30, fired, 1.0, f"{rule} on n1 {device}", fired_ts=fired,
                 evidence=EVIDENCE.get(rule, {}))


def pages(notices: list[Notice]) -> set[str]:
    """The alerts a person was paged for: notified while firing, not muted."""
    return {n.alert.id for n in notices
            if n.notify and n.alert.state == "firing" and not n.muted_by}


@pytest.mark.parametrize("order", list(itertools.permutations((WARM, PEER, LIMIT))),
                         ids="-then-".join)
def test_a_failed_cooler_is_one_page_whichever_finding_fires_first(
        order: tuple[str, ...]) -> None:
    sink = Recording()
    notifier = Notifier([sink], background=False)
    alerts = [firing(rule, 1000.0 + 60 * k) for k, rule in enumerate(order)]
    for a in alerts:
        notifier.send([a])
    assert pages(sink.sent) == {alerts[0].id}
    # the later findings are shown in the page (its last notice), not paged on their own
    shown = sink.sent[-1].alert
    assert shown.id == alerts[0].id
    assert all(f"now also {a.rule}" in shown.message for a in alerts[1:])


@pytest.mark.parametrize("other", [PEER, LIMIT])
def test_the_first_fired_covers_the_other_in_either_order(other: str) -> None:
    warm, later = firing(WARM, 1000.0), firing(other, 1300.0)
    assert inhibited_by(later, [warm, later]) == warm.id
    assert inhibited_by(warm, [warm, later]) == ""
    first, warm_later = firing(other, 1000.0), firing(WARM, 1300.0)
    assert inhibited_by(warm_later, [first, warm_later]) == first.id
    assert inhibited_by(first, [first, warm_later]) == ""


def test_the_limit_muted_by_the_warming_page_still_covers_its_warnings() -> None:
    """Covers chain on one GPU: the limit, muted only by the warming page, still mutes the
    temperature warning it explains, so the GPU reaching its limit pages nothing more."""
    warm, limit = firing(WARM, 1000.0), firing(LIMIT, 1200.0)
    high = firing("gpu_temp_high", 1260.0, severity="warning")
    both = [warm, limit, high]
    assert mute(limit, both, [], {}) == f"inhibited:{warm.id}"
    assert mute(high, both, [], {}) == f"inhibited:{limit.id}"


def test_another_gpu_a_pending_alert_and_a_warm_room_are_not_covered() -> None:
    warm = firing(WARM, 1000.0)
    assert mute(firing(LIMIT, 1300.0, device="gpu1"), [warm], [], {}) == ""
    assert mute(firing(PEER, 1300.0), [dataclasses.replace(warm, state="pending")],
                [], {}) == ""
    # A warm room mutes the warming alert in Alertmanager (which cannot tell a GPU hotter
    # than its peers): there it is no page, so it covers nothing and the peer alert pages.
    room = Alert("room_inlet_hot/c/*/1", "room_inlet_hot", "critical", "c", "*", "",
                 "rack:*", "firing", 700.0, 1000.0, 33.0, "room", fired_ts=800.0)
    peer = firing(PEER, 1300.0)
    assert mute(peer, [room, warm, peer], [], {}) == ""


def test_when_the_warming_page_ends_first_the_next_finding_pages_with_the_last_in_it() -> None:
    """The warming alert resolves while the GPU stays hot: the peer alert, muted till then,
    is paged (a GPU still far above its peers is news), with the limit joined to it, not
    paged on its own."""
    sink = Recording()
    notifier = Notifier([sink], background=False)
    warm, peer, limit = firing(WARM, 1000.0), firing(PEER, 1060.0), firing(LIMIT, 1120.0)
    for a in (warm, peer, limit):
        notifier.send([a])
    del sink.sent[:]
    notifier.send([dataclasses.replace(warm, state="resolved", updated_ts=3000.0,
                                       resolved_ts=3000.0)])
    assert [(n.alert.rule, n.alert.state, n.muted_by) for n in sink.sent] == [
        (WARM, "resolved", ""), (PEER, "firing", ""), (LIMIT, "firing", f"inhibited:{peer.id}")]
    assert f"now also {LIMIT}" in sink.sent[1].alert.message
