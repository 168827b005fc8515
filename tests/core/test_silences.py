from __future__ import annotations

import dataclasses

import pytest

from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.silences import Notice, group, mute
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.recording_sink import Recording


def alert(rule: str = "gpu_temp_high", node: str = "n1", device: str = "gpu0",
          rack: str = "r1", state: str = "firing", ts: float = 1000.0) -> Alert:
    return Alert(f"{rule}/c/{node}/{device}/1", rule, "critical", "c", rack, node, device,
                 state, 900.0, ts, 90.0, "hot", fired_ts=950.0)  # type: ignore[arg-type]


def test_a_silence_mutes_matching_alerts_only_within_its_time_range() -> None:
    s = Silence("s1", (parse_matcher("node=n1"), parse_matcher("rule=~gpu_.*")), 500, 1500)
    assert mute(alert(), [], [s], {}) == "silence:s1"
    assert mute(alert(node="n2"), [], [s], {}) == ""
    assert mute(alert(rule="xid"), [], [s], {}) == ""
    assert mute(alert(ts=1500), [], [s], {}) == ""     # over at its end
    neg = Silence("s2", (parse_matcher("severity!=critical"),), 0, 1e10)
    assert mute(alert(), [], [neg], {}) == ""


def test_bad_matchers_are_refused_with_the_accepted_forms() -> None:
    with pytest.raises(ValueError, match="LABEL=VALUE"):
        parse_matcher("colour=red")
    with pytest.raises(ValueError, match="regular expression"):
        parse_matcher("node=~(")


def test_gpu_alerts_under_a_silent_node_or_a_rack_alert_are_inhibited() -> None:
    silent = alert("node_silent", device="host")
    rack = alert("rack_cooling", node="", device="rack:r1")
    assert mute(alert(), [silent], [], {}) == f"inhibited:{silent.id}"
    assert mute(alert(node="n2"), [silent], [], {}) == ""
    assert mute(alert(node="n7"), [rack], [], {}) == f"inhibited:{rack.id}"
    assert mute(alert(node="n7", rack="r2"), [rack], [], {}) == ""
    assert mute(alert(), [alert("node_silent", device="host", state="pending")], [], {}) == ""
    assert mute(silent, [silent, rack], [], {}) == ""  # the cause itself is paged
    cooling = alert("node_cooling", device="host")  # the node's fans: one alert, not eight
    assert mute(alert(), [cooling], [], {}) == f"inhibited:{cooling.id}"
    assert mute(alert(node="n2"), [cooling], [], {}) == ""


def test_an_acknowledged_alert_is_not_notified_again_until_it_resolves() -> None:
    a = alert()
    acks = {a.id: Acknowledgement(a.id, 1000, "oncall")}
    assert mute(a, [], [], acks) == "ack:oncall"
    resolved = alert(state="resolved")
    assert Notice(resolved, mute(resolved, [], [], acks)).notify


def test_pending_and_never_fired_alerts_are_not_notified() -> None:
    import dataclasses
    a = alert(state="pending")
    assert not Notice(dataclasses.replace(a, fired_ts=None)).notify
    assert not Notice(dataclasses.replace(a, state="resolved", fired_ts=None)).notify
    assert Notice(alert()).notify


def test_grouping_by_node_and_rack() -> None:
    groups = group([alert(), alert(device="gpu1"), alert(node="n2"),
                    alert("rack_cooling", node="", device="rack:r1")])
    assert sorted((k, len(v)) for k, v in groups.items()) == [
        (("c", "r1", ""), 1), (("c", "r1", "n1"), 2), (("c", "r1", "n2"), 1)]


def test_silences_and_acks_persist_in_the_sqlite_store(tmp_path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    s = Silence("s1", (("node", "=", "n1"), ("rule", "=~", "gpu_.*")), 100, 200, "ops", "swap")
    store.write_silences([s])
    store.write_acks([Acknowledgement("a1", 150, "oncall", "on it")])
    again = SqliteStore(tmp_path / "s.db", read_only=True)
    assert again.silences() == [s]
    assert again.silences(active_at=150) == [s] and again.silences(active_at=200) == []
    assert again.acks() == [Acknowledgement("a1", 150, "oncall", "on it")]
    store.write_silences([Silence("s1", s.matchers, 100, 120)])  # expired early
    assert again.silences(active_at=150) == []


def test_an_alert_inhibited_while_it_fired_is_notified_when_the_inhibition_ends() -> None:
    """An XID alert is latched: it has no change of its own until it resolves, an hour on.
    Fired while its node was still reported silent, it must be paged once the node alert
    resolves, not never."""
    from fleetwatch.pipeline.sinks import Notifier

    sink = Recording()
    notifier = Notifier([sink], background=False)
    silent = alert("node_silent", device="host", ts=1000.0)
    xid = alert("xid", ts=1010.0)
    other = alert("gpu_temp_high", node="n2", ts=1010.0)  # another node: never inhibited
    notifier.send([silent])
    notifier.send([xid, other])
    assert [(n.alert.rule, n.muted_by) for n in sink.sent[1:]] == [
        ("xid", f"inhibited:{silent.id}"), ("gpu_temp_high", "")]
    back = dataclasses.replace(silent, state="resolved", updated_ts=1300.0, resolved_ts=1300.0)
    del sink.sent[:]
    notifier.send([back])
    assert [(n.alert.rule, n.alert.state, n.muted_by) for n in sink.sent] == [
        ("node_silent", "resolved", ""), ("xid", "firing", "")]
    assert all(n.notify for n in sink.sent)
    del sink.sent[:]
    notifier.send([xid])  # its own next change: already notified, not again
    assert sink.sent == []


def test_a_rack_alert_inhibits_the_node_cooling_of_its_rack_not_a_silent_node() -> None:
    """One rack cooler failing is one page: its nodes' node_cooling is what it explains. A
    silent node is not (the rack's air does not stop a node's agent), nor another rack's."""
    rack = alert("rack_cooling", node="", device="rack:r1")
    cooling = alert("node_cooling", node="n3", device="host")
    assert mute(cooling, [rack], [], {}) == f"inhibited:{rack.id}"
    assert mute(alert("node_cooling", node="n3", device="host", rack="r2"), [rack], [], {}) == ""
    assert mute(alert("node_silent", node="n3", device="host"), [rack], [], {}) == ""
    pending = dataclasses.replace(rack, state="pending")
    assert mute(cooling, [pending], [], {}) == ""
    other = dataclasses.replace(rack, cluster="c2")
    assert mute(cooling, [other], [], {}) == ""
    # A node_cooling alert muted by its rack still covers its own GPUs' alerts.
    assert mute(alert(node="n3"), [rack, cooling], [], {}) != ""


def test_node_cooling_inhibited_by_its_rack_is_paged_when_the_rack_alert_resolves() -> None:
    from fleetwatch.pipeline.sinks import Notifier

    sink = Recording()
    notifier = Notifier([sink], background=False)
    rack = alert("rack_cooling", node="", device="rack:r1", ts=1000.0)
    cooling = alert("node_cooling", node="n3", device="host", ts=1010.0)
    notifier.send([rack])
    notifier.send([cooling])
    assert [(n.alert.rule, n.muted_by, n.notify) for n in sink.sent] == [
        ("rack_cooling", "", True), ("node_cooling", f"inhibited:{rack.id}", False)]
    del sink.sent[:]
    notifier.send([dataclasses.replace(rack, state="resolved", updated_ts=1300.0,
                                       resolved_ts=1300.0)])
    assert [(n.alert.rule, n.alert.state, n.notify) for n in sink.sent] == [
        ("rack_cooling", "resolved", True), ("node_cooling", "firing", True)]


def _xid(rule: str, *codes: int, state: str = "firing") -> Alert:
    ev = {"xid": float(codes[0]), "count": float(len(codes))}
    for c in codes:
        ev.update({f"xid_{c}_count": 1.0, f"xid_{c}_first_ts": 900.0, f"xid_{c}_last_ts": 900.0})
    return dataclasses.replace(alert(rule, state=state), evidence=ev)


def test_on_one_gpu_the_critical_of_a_family_inhibits_its_warning() -> None:
    """One hot GPU: the critical pages, the same GPU's warning of the same family is muted
    while the critical fires (another GPU's is not, a pending critical mutes nothing)."""
    for cause, effect in (("gpu_hot_vs_peers_critical", "gpu_hot_vs_peers"),
                          ("gpu_temp_critical", "gpu_temp_high"),
                          ("gpu_temp_critical", "gpu_temp_rising"),
                          ("gpu_temp_high", "gpu_temp_rising"),
                          ("gpu_mem_temp_critical", "gpu_mem_temp_high"),
                          ("gpu_hw_slowdown", "gpu_sw_thermal_slowdown"),
                          ("gpu_hw_slowdown", "gpu_straggler"),
                          ("gpu_hw_slowdown", "gpu_power_low_vs_peers"),
                          ("gpu_nvlink_down", "gpu_nvlink_errors")):
        c = alert(cause)
        assert mute(alert(effect), [c], [], {}) == f"inhibited:{c.id}", (cause, effect)
        assert mute(alert(effect, device="gpu1"), [c], [], {}) == ""
        assert mute(alert(effect), [alert(cause, state="pending")], [], {}) == ""
        assert mute(c, [alert(effect)], [], {}) == ""  # never the other way


def test_an_event_and_its_consequence_on_one_gpu_are_one_notification() -> None:
    """XID 79 covers the lost GPU; XID 48 covers its DBE counter, the XIDs 63/94 and the
    row remap it causes; a link down covers the XID 74 that reports it: by codes."""
    x79, x48 = _xid("gpu_xid_critical", 79), _xid("gpu_xid_critical", 48)
    assert mute(alert("gpu_lost"), [x79], [], {}) == f"inhibited:{x79.id}"
    assert mute(alert("gpu_lost"), [x48], [], {}) == ""
    for effect in (alert("gpu_ecc_dbe"), alert("gpu_row_remap_pending"),
                   _xid("gpu_xid_warning", 63, 94)):
        assert mute(effect, [x48], [], {}) == f"inhibited:{x48.id}", effect.rule
        assert mute(effect, [x79], [], {}) == ""
    assert mute(_xid("gpu_xid_warning", 63, 31), [x48], [], {}) == ""  # 31 is news
    down = alert("gpu_nvlink_down")
    assert mute(_xid("gpu_xid_critical", 74), [down], [], {}) == f"inhibited:{down.id}"
    assert mute(_xid("gpu_xid_critical", 74, 79), [down], [], {}) == ""


def test_a_thermal_throttle_is_muted_under_the_critical_temperature_not_a_power_brake() -> None:
    """The driver slowing a GPU at its slowdown temperature is that temperature's doing: one
    page (gpu_temp_critical). A power brake is another cause, and is heard."""
    crit = alert("gpu_temp_critical")

    def throttle(rule: str, *reasons: int) -> Alert:
        return dataclasses.replace(alert(rule), evidence={"throttle_reasons": float(sum(reasons))})

    thermal = throttle("gpu_hw_slowdown", 0x8, 0x40, 0x20)
    assert mute(thermal, [crit], [], {}) == f"inhibited:{crit.id}"
    assert mute(throttle("gpu_sw_thermal_slowdown", 0x20), [crit], [], {}) == (
        f"inhibited:{crit.id}")
    assert mute(throttle("gpu_hw_slowdown", 0x8, 0x80), [crit], [], {}) == ""
    assert mute(throttle("gpu_hw_slowdown", 0x8, 0x40, 0x80), [crit], [], {}) == ""
    assert mute(thermal, [alert("gpu_temp_critical", state="pending")], [], {}) == ""


def test_a_warm_room_mutes_the_gpu_thermal_alerts_it_explains_not_a_gpu_hotter_than_peers(
        ) -> None:
    """A room above ASHRAE's envelope is one alert for the cluster: a GPU at its slowdown
    temperature because the air is warm is not paged, one hotter than its peers is."""
    room = alert("room_inlet_hot", node="", device="rack:*", rack="*")
    hot = alert("gpu_temp_critical", node="n7", rack="r2")
    assert mute(hot, [room], [], {}) == f"inhibited:{room.id}"
    assert mute(alert("gpu_hw_slowdown", node="n7"), [room], [], {}) == f"inhibited:{room.id}"
    # Hotter than its peers at similar power (the peer rule's alert open, even pending).
    peer = alert("gpu_hot_vs_peers", node="n7", rack="r2", state="pending")
    assert mute(hot, [room, peer], [], {}) == ""
    assert mute(hot, [peer, room], [], {}) == ""
    assert mute(peer, [room], [], {}) == ""  # the peer rule itself always pages
    assert mute(alert("gpu_temp_critical", node="n8"), [room, peer], [], {}) \
        == f"inhibited:{room.id}"  # another GPU's peer alert says nothing of this one
    # A power brake is the node's power, not the room.
    brake = dataclasses.replace(alert("gpu_hw_slowdown"), evidence={"throttle_reasons": 128.0})
    assert mute(brake, [room], [], {}) == ""
    assert mute(alert("gpu_xid_critical"), [room], [], {}) == ""  # not thermal
    assert mute(hot, [dataclasses.replace(room, state="pending")], [], {}) == ""
    assert mute(hot, [dataclasses.replace(room, cluster="other")], [], {}) == ""


def test_a_gpu_muted_by_the_room_is_paged_once_it_reads_hotter_than_its_peers() -> None:
    from fleetwatch.pipeline.sinks import Notifier

    sink = Recording()
    notifier = Notifier([sink], background=False)
    room = alert("room_inlet_hot", node="", device="rack:*", rack="*", ts=1000.0)
    hot = alert("gpu_temp_critical", ts=1010.0)
    notifier.send([room])
    notifier.send([hot])
    assert [(n.alert.rule, n.muted_by) for n in sink.sent] == [
        ("room_inlet_hot", ""), ("gpu_temp_critical", f"inhibited:{room.id}")]
    del sink.sent[:]
    notifier.send([alert("gpu_hot_vs_peers", state="pending", ts=1040.0)])
    # the critical is muted in Alertmanager by the room: it covers nothing while the room
    # fires (inhibition.ROOM_MUTES_IN_AM), so the peer warning is heard on its own
    assert [(n.alert.rule, n.alert.state, n.muted_by) for n in sink.sent] == [
        ("gpu_hot_vs_peers", "pending", ""),
        ("gpu_temp_critical", "firing", "")]
