"""One hot GPU, one page: ``gpu_hot_vs_peers_critical`` (far hotter than its peers) and
``gpu_temp_critical`` (at its slowdown temperature) are two findings of one incident.
Whichever fires first is the page; the later one is muted (still stored) and shown in it."""

from __future__ import annotations

import dataclasses

from fleetwatch.pipeline.inhibition import inhibited_by
from fleetwatch.pipeline.silences import Notice, mute
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.scoring_noise import notified
from tests.recording_sink import Recording

PEER, LIMIT = "gpu_hot_vs_peers_critical", "gpu_temp_critical"
EVIDENCE = {PEER: {"gpu_temp_c": 84.0, "peer_temp_c": 66.0, "excess_c": 14.0},
            LIMIT: {"gpu_temp_c": 91.0, "slowdown_temp_c": 90.0}}
MESSAGE = {PEER: "GPU 0 on n1 at 84 °C, 18 °C above its peers",
           LIMIT: "GPU 0 on n1 at 91 °C, at its slowdown temperature 90 °C"}


def firing(rule: str, fired: float, device: str = "gpu0") -> Alert:
    return Alert(f"{rule}/c/n1/{device}/{fired:g}", rule, "critical", "c", "r1", "n1", device,
                 "firing", fired - 30, fired, 1.0, MESSAGE[rule], fired_ts=fired,
                 evidence=EVIDENCE[rule])


def resolved(a: Alert, at: float) -> Alert:
    return dataclasses.replace(a, state="resolved", updated_ts=at, resolved_ts=at)


def pages(notices: list[Notice]) -> set[str]:
    """The alerts a person was paged for: notified while firing."""
    return {n.alert.id for n in notices if n.notify and n.alert.state == "firing"}


def test_peer_critical_then_limit_critical_is_one_page_updated_with_both() -> None:
    sink = Recording()
    notifier = Notifier([sink], background=False)
    peer, limit = firing(PEER, 1000.0), firing(LIMIT, 1300.0)
    notifier.send([peer])
    notifier.send([limit])
    assert pages(sink.sent) == {peer.id}
    assert [(n.alert.rule, n.muted_by) for n in sink.sent] == [
        (PEER, ""), (LIMIT, f"inhibited:{peer.id}"), (PEER, "")]
    shown = sink.sent[-1].alert   # the page, updated: the limit reached is in it
    assert MESSAGE[LIMIT] in shown.message and shown.message.startswith(MESSAGE[PEER])
    assert shown.evidence["slowdown_temp_c"] == 90.0
    assert shown.evidence["gpu_temp_c"] == 84.0
    assert shown.evidence[f"{LIMIT}.gpu_temp_c"] == 91.0
    assert shown.severity == "critical"


def test_limit_critical_then_peer_critical_is_one_page() -> None:
    sink = Recording()
    notifier = Notifier([sink], background=False)
    limit, peer = firing(LIMIT, 1000.0), firing(PEER, 1300.0)
    notifier.send([limit])
    notifier.send([peer])
    assert pages(sink.sent) == {limit.id}
    assert sink.sent[-1].alert.rule == LIMIT
    assert MESSAGE[PEER] in sink.sent[-1].alert.message


def test_both_in_one_batch_are_one_page() -> None:
    sink = Recording()
    notifier = Notifier([sink], background=False)
    peer, limit = firing(PEER, 1000.0), firing(LIMIT, 1000.0)
    notifier.send([peer, limit])
    assert len(pages(sink.sent)) == 1


def test_hot_only_by_its_limit_pages_once() -> None:
    """Peers as hot as it (no peer alert): the absolute limit alone pages, once."""
    sink = Recording()
    notifier = Notifier([sink], background=False)
    limit = firing(LIMIT, 1000.0)
    notifier.send([limit])
    notifier.send([dataclasses.replace(limit, updated_ts=1100.0)])
    assert pages(sink.sent) == {limit.id}
    assert len(sink.sent) == 1 and sink.sent[0].alert.message == MESSAGE[LIMIT]


def test_the_later_finding_is_paged_when_the_page_ends_first() -> None:
    """The peers cool down while the GPU stays at its limit: the page resolves, and the
    limit, muted till then, is paged with its reading now."""
    sink = Recording()
    notifier = Notifier([sink], background=False)
    peer, limit = firing(PEER, 1000.0), firing(LIMIT, 1300.0)
    notifier.send([peer])
    notifier.send([limit])
    del sink.sent[:]
    notifier.send([resolved(peer, 1600.0)])
    assert [(n.alert.rule, n.alert.state, n.muted_by) for n in sink.sent] == [
        (PEER, "resolved", ""), (LIMIT, "firing", "")]


def test_other_gpus_and_pending_alerts_are_not_covered() -> None:
    peer = firing(PEER, 1000.0)
    assert mute(firing(LIMIT, 1300.0, device="gpu1"), [peer], [], {}) == ""
    assert mute(firing(LIMIT, 1300.0), [dataclasses.replace(peer, state="pending")],
                [], {}) == ""
    # a family's critical still mutes its warning, whatever the order
    assert mute(dataclasses.replace(firing(LIMIT, 900.0), rule="gpu_hot_vs_peers"),
                [firing(LIMIT, 1000.0)], [], {}) == f"inhibited:{firing(LIMIT, 1000.0).id}"


def stored(rule: str, fired: float, end: float | None = None) -> list[Alert]:
    a = firing(rule, fired)
    pend = dataclasses.replace(a, state="pending", updated_ts=fired - 30, fired_ts=None)
    return [pend, a] + ([resolved(a, end)] if end is not None else [])


def test_noise_counts_one_notified_alert_in_either_order() -> None:
    assert len(notified(stored(PEER, 1000.0) + stored(LIMIT, 1300.0))) == 1
    assert len(notified(stored(LIMIT, 1000.0) + stored(PEER, 1300.0))) == 1
    assert notified(stored(LIMIT, 1000.0)) == {firing(LIMIT, 1000.0).id}
    # both still recorded: two alerts, one of them heard
    both = stored(PEER, 1000.0) + stored(LIMIT, 1300.0)
    assert len({a.id for a in both}) == 2


def test_the_notifier_applies_every_same_gpu_cover() -> None:
    """A firing critical mutes its GPU's warning of its family in the processor's notifier
    too, not only in the replay's noise figures."""
    sink = Recording()
    notifier = Notifier([sink], background=False)
    limit = firing(LIMIT, 1000.0)
    high = dataclasses.replace(firing(LIMIT, 1200.0), rule="gpu_temp_high",
                               id="gpu_temp_high/c/n1/gpu0/1200", severity="warning")
    notifier.send([limit])
    notifier.send([high])
    assert [(n.alert.rule, n.muted_by) for n in sink.sent] == [
        (LIMIT, ""), ("gpu_temp_high", f"inhibited:{limit.id}")]


class Adopting(Recording):
    def __init__(self) -> None:
        super().__init__()
        self.adopted: list[Notice] = []

    def adopt(self, notices: list[Notice]) -> None:
        self.adopted.extend(notices)


def test_a_restart_keeps_one_page_with_both_in_it() -> None:
    """A processor that takes both open alerts over re-sends the page as it was shown, and
    knows the later one is muted."""
    sink = Adopting()
    notifier = Notifier([sink], background=False)
    peer, limit = firing(PEER, 1000.0), firing(LIMIT, 1300.0)
    notifier.adopt([limit, peer])
    assert [(n.alert.rule, n.muted_by) for n in sink.adopted] == [
        (LIMIT, f"inhibited:{peer.id}"), (PEER, "")]
    assert MESSAGE[LIMIT] in sink.adopted[1].alert.message


def warning(rule: str, fired: float) -> Alert:
    return dataclasses.replace(firing(LIMIT, fired), rule=rule, severity="warning",
                               id=f"{rule}/c/n1/gpu0/{fired:g}", message=f"{rule} on gpu0")


def test_a_finding_muted_by_its_incident_page_still_covers_its_warning() -> None:
    """The peer page mutes the limit (one incident); the limit, muted only by a cover on
    its own GPU, still covers the warning it explains: covers chain on one GPU."""
    peer, limit, high = firing(PEER, 1000.0), firing(LIMIT, 1030.0), warning("gpu_temp_high",
                                                                              1060.0)
    both = [peer, limit, high]
    assert mute(limit, both, [], {}) == f"inhibited:{peer.id}"
    assert mute(high, both, [], {}) == f"inhibited:{limit.id}"
    assert inhibited_by(high, both) == limit.id


def test_a_cause_silenced_covers_nothing_even_in_a_chain_and_one_acknowledged_still_does(
        ) -> None:
    """A person's silence of the limit mutes the limit only: the warning it would explain
    is notified on its own (a silence never mutes another rule's page). An acknowledgement
    says "I have this GPU": the acknowledged limit keeps muting what it explains on it."""
    peer, limit, high = firing(PEER, 1000.0), firing(LIMIT, 1030.0), warning("gpu_temp_high",
                                                                              1060.0)
    both = [peer, limit, high]
    quiet = Silence("s1", (("rule", "=", LIMIT),), 0.0, 1e10)
    assert mute(high, both, [quiet], {}) == ""
    acked = {limit.id: Acknowledgement(limit.id, 1040.0, "ana")}
    assert mute(high, both, [], acked) == f"inhibited:{limit.id}"
    # the page silenced: the limit is heard again, and covers the warning itself
    page_quiet = Silence("s2", (("rule", "=", PEER),), 0.0, 1e10)
    assert mute(limit, both, [page_quiet], {}) == ""
    assert mute(high, both, [page_quiet], {}) == f"inhibited:{limit.id}"


def test_one_gpu_at_95_c_with_its_four_alerts_is_one_page() -> None:
    """Far above its peers and past its limit: the peer critical fires first, then the
    peer warning, the limit and the temperature warning; a sink is paged once."""
    sink = Recording()
    notifier = Notifier([sink], background=False)
    peer, peer_warn = firing(PEER, 1000.0), warning("gpu_hot_vs_peers", 1000.0)
    limit, high = firing(LIMIT, 1030.0), warning("gpu_temp_high", 1060.0)
    notifier.send([peer, peer_warn])
    notifier.send([limit])
    notifier.send([high])
    notifier.send([dataclasses.replace(a, updated_ts=1200.0) for a in (peer, limit, high)])
    assert pages(sink.sent) == {peer.id}
    muted = {n.alert.rule: n.muted_by for n in sink.sent if n.muted_by}
    assert muted == {"gpu_hot_vs_peers": f"inhibited:{peer.id}",
                     LIMIT: f"inhibited:{peer.id}", "gpu_temp_high": f"inhibited:{limit.id}"}
