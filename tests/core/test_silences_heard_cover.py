"""A cause mutes another alert of its GPU only while it is heard or acknowledged: a silence
mutes what it matches, never another rule's page (an ack keeps its cover: "I have this"),
and in a warm room a cause
that Alertmanager's room rule mutes covers nothing (so a GPU hotter than its peers pages)."""

from __future__ import annotations

from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.silences import mute
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from tests.recording_sink import Recording

PEER, LIMIT = "gpu_hot_vs_peers_critical", "gpu_temp_critical"


def firing(rule: str, fired: float, severity: str = "critical",
           evidence: dict[str, float] | None = None) -> Alert:
    return Alert(f"{rule}/c/n1/gpu0/{fired:g}", rule, severity, "c", "r1", "n1", "gpu0",
                 "firing", fired - 30, fired, 1.0, f"{rule} on n1 gpu0", fired_ts=fired,
                 evidence=evidence or {})


def notified(batches: list[list[Alert]], silences: tuple[Silence, ...] = (),
             acks: tuple[Acknowledgement, ...] = ()) -> list[str]:
    """The rules of the firing alerts a notifying sink was told of."""
    sink = Recording()
    notifier = Notifier([sink], silences=lambda: list(silences), acks=lambda: list(acks),
                        background=False, reload_s=0.0)
    for batch in batches:
        notifier.send(batch)
    return [n.alert.rule for n in sink.sent if n.notify and n.alert.state == "firing"]


def silence(*matchers: str) -> Silence:
    return Silence("s1", tuple(parse_matcher(m) for m in matchers), 0.0, 1e10, "ops", "known")


def test_a_silenced_peer_page_does_not_mute_the_gpu_reaching_its_limit() -> None:
    peer, limit = firing(PEER, 1000.0), firing(LIMIT, 1300.0)
    assert notified([[peer], [limit]], (silence(f"rule={PEER}", "node=n1"),)) == [LIMIT]


def test_an_acknowledged_peer_page_still_mutes_the_gpu_reaching_its_limit() -> None:
    """An ack is "I have this GPU": the limit, the same incident, pages nobody under it."""
    peer, limit = firing(PEER, 1000.0), firing(LIMIT, 1300.0)
    ack = Acknowledgement(peer.id, 1100.0, "alice")
    assert notified([[peer], [limit]], acks=(ack,)) == []
    assert mute(limit, [peer, limit], [], {peer.id: ack}) == f"inhibited:{peer.id}"


def test_a_silenced_limit_does_not_mute_a_gpu_hotter_than_its_peers() -> None:
    quiet = (silence(f"rule={LIMIT}"),)
    limit = firing(LIMIT, 1000.0)
    assert notified([[limit], [firing("gpu_hot_vs_peers", 1200.0, "warning")]], quiet) == [
        "gpu_hot_vs_peers"]
    assert notified([[limit], [firing(PEER, 1300.0)]], quiet) == [PEER]


def test_a_silenced_hardware_slowdown_does_not_mute_the_straggler() -> None:
    hw = firing("gpu_hw_slowdown", 1000.0, evidence={"throttle_reasons": 8.0})
    straggler = firing("gpu_straggler", 1200.0, "warning")
    assert notified([[hw], [straggler]], (silence("rule=gpu_hw_slowdown"),)) == [
        "gpu_straggler"]
    assert notified([[hw], [straggler]]) == ["gpu_hw_slowdown"]  # heard: it covers


def test_an_acknowledgement_added_later_keeps_the_covered_alert_muted() -> None:
    sink = Recording()
    acks: list[Acknowledgement] = []
    notifier = Notifier([sink], acks=lambda: list(acks), background=False, reload_s=0.0)
    peer, limit = firing(PEER, 1000.0), firing(LIMIT, 1300.0)
    notifier.send([peer])
    notifier.send([limit])
    assert [(n.alert.rule, n.muted_by) for n in sink.sent if n.alert.rule == LIMIT] == [
        (LIMIT, f"inhibited:{peer.id}")]
    acks.append(Acknowledgement(peer.id, 1400.0, "alice"))
    notifier.send([], now=1400.0)
    assert [(n.alert.rule, n.muted_by) for n in sink.sent][-1] == (PEER, "ack:alice")
    assert {n.alert.rule for n in sink.sent if n.notify} == {PEER}  # (updated with LIMIT)


def test_in_a_warm_room_the_limit_does_not_cover_the_peer_page() -> None:
    room = Alert("room_inlet_hot/c/*/1", "room_inlet_hot", "critical", "c", "*", "", "rack:*",
                 "firing", 900.0, 950.0, 33.0, "room", fired_ts=950.0)
    limit, peer = firing(LIMIT, 1000.0), firing(PEER, 1300.0)
    assert mute(peer, [room, limit], [], {}) == ""
    assert mute(peer, [limit], [], {}) == f"inhibited:{limit.id}"  # no room: one page
    # the limit is heard by fleetwatch once the GPU reads hotter than its peers; both page
    assert sorted(notified([[room], [limit], [peer]])) == sorted([LIMIT, PEER, "room_inlet_hot"])


def test_a_loop_of_first_covers_mutes_one_and_hears_the_other() -> None:
    peer, limit = firing(PEER, 1000.0), firing(LIMIT, 1000.0)  # a tie: by id
    got = {a.rule: mute(a, [peer, limit], [], {}) for a in (peer, limit)}
    assert got == {PEER: "", LIMIT: f"inhibited:{peer.id}"}
