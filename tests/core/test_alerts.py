from __future__ import annotations

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models import Finding
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.alert_summary import summary
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.store.base import Alert

REQ = dict(GpuTemperatureLimit.rules)


def frame(ts: float, temps: list[float | None], node: str = "n1", rack: str = "r",
          lost: tuple[int, ...] = ()) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "m", {} if t is None else {"gpu_temp_c": t},
                            state="lost" if i in lost else "ok")
                 for i, t in enumerate(temps))
    return Frame("c", rack, node, ts, gpus)


def step(book: AlertBook, frames: list[Frame], findings: list[Finding]) -> list:
    changes = book.observe(frames, findings)
    book.apply(changes)
    return changes


def drive(book: AlertBook, rule: GpuTemperatureLimit, frames: list[Frame]) -> list:
    changes = []
    for f in frames:
        changes.extend(step(book, [f], rule.update([f])))
    return changes


def xid(ts: float, node: str = "n1", gpu: int = 0, hold_s: float = 300.0) -> Finding:
    return Finding("xid", "c", "r", node, gpu, ts, 79.0, "XID 79", "critical", 0.0, hold_s,
                   {"xid": 79.0}, "drain the node")


def test_pending_then_firing_after_for_duration_then_resolved() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=60), AlertBook(requirements=REQ)
    temps = [70, 86, 88, 90, 91, 92, 80, 70]
    changes = drive(book, rule, [frame(100 + 20 * i, [60, t]) for i, t in enumerate(temps)])
    states = [(a.state, a.updated_ts) for a in changes]
    assert states == [("pending", 120), ("firing", 180), ("resolved", 220)]
    assert {a.id for a in changes} == {changes[0].id}     # one alert, deduplicated
    assert all(a.device == "gpu1" and a.cluster == "c" for a in changes)
    assert changes[1].fired_ts == 180 and changes[1].started_ts == 120
    assert book.open == []


def test_observe_does_not_change_the_book_until_apply() -> None:
    """A failed store write leaves the book as it was: the retried batch gives the same
    transitions, so a resolution is never lost (issue 9)."""
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ)
    drive(book, rule, [frame(100, [90])])
    cool = [frame(120, [60])]
    findings = rule.update(cool)
    first = book.observe(cool, findings)        # the write of these fails: no apply
    assert [a.state for a in first] == ["resolved"]
    assert [a.state for a in book.open] == ["firing"]
    again = book.observe(cool, findings)        # the batch is retried
    assert again == first
    book.apply(again)
    assert book.open == []


def test_a_blip_shorter_than_for_duration_never_fires() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=60), AlertBook(requirements=REQ)
    changes = drive(book, rule, [frame(100 + 20 * i, [t]) for i, t in enumerate([86, 87, 70])])
    assert [a.state for a in changes] == ["pending", "resolved"]
    assert all(a.fired_ts is None for a in changes)


def test_a_silent_node_keeps_its_alert_open() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ)
    drive(book, rule, [frame(100, [90], node="n1")])
    changes = drive(book, rule, [frame(120, [60], node="n2")])  # only another node reports
    assert changes == []
    assert [a.state for a in book.open] == ["firing"]


def test_a_frame_without_the_rules_metric_or_with_the_gpu_lost_does_not_resolve() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ)
    drive(book, rule, [frame(100, [90, 60])])
    assert drive(book, rule, [frame(115, [None, 60])]) == []          # metric missing
    assert drive(book, rule, [frame(130, [60, 60], lost=(0,))]) == []  # GPU lost
    assert [a.state for a in book.open] == ["firing"]
    (resolved,) = drive(book, rule, [frame(145, [60, 60])])
    assert resolved.state == "resolved" and resolved.resolved_ts == 145


def test_batches_with_several_ticks_are_walked_in_time_order() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=30), AlertBook(requirements=REQ)
    frames = [frame(100 + 10 * i, [t]) for i, t in enumerate([90, 90, 90, 90, 60, 90])]
    changes = step(book, frames, rule.update(frames))
    by_id = {a.id: a for a in changes}
    assert len(by_id) == 2  # fired and resolved, then a new one pending
    first, second = sorted(by_id.values(), key=lambda a: a.started_ts)
    assert (first.state, first.fired_ts, first.resolved_ts) == ("resolved", 130, 140)
    assert (second.state, second.started_ts) == ("pending", 150)
    assert [a.state for a in book.open] == ["pending"]


def test_reloaded_alerts_continue_and_dropped_nodes_are_forgotten() -> None:
    rule = GpuTemperatureLimit(85, for_s=0)
    first = AlertBook(requirements=REQ)
    (alert,) = drive(first, rule, [frame(100, [90])])
    second = AlertBook(requirements=REQ)
    second.load([alert])  # e.g. this member now owns the node's partition
    (resolved,) = drive(second, rule, [frame(200, [60])])
    assert resolved.id == alert.id and resolved.state == "resolved"
    first.drop(["n1"])    # its partition went to another member
    assert first.open == []
    assert drive(first, rule, [frame(200, [60])]) == []


def test_a_latched_event_holds_then_resolves_and_a_repeat_extends_it() -> None:
    book = AlertBook(requirements={"xid": ()})
    (fired,) = step(book, [frame(100, [60])], [xid(100)])
    assert fired.state == "firing" and fired.evidence["xid"] == 79 and fired.action
    for ts in (115, 300, 390):  # frames without a new XID: held
        assert step(book, [frame(ts, [60])], []) == []
    step(book, [frame(395, [60])], [xid(395)])  # seen again: one alert, held longer
    assert step(book, [frame(690, [60])], []) == []
    (resolved,) = step(book, [frame(700, [60])], [])
    assert resolved.id == fired.id and resolved.resolved_ts == 700


def test_rack_and_node_findings_have_their_own_identity() -> None:
    book = AlertBook(requirements={"rack_cooling": ("gpu_temp_c",), "node_silent": ()})
    rack = [Finding("rack_cooling", "c", r, "", None, 100, 5.0, f"{r} warming", scope="rack")
            for r in ("r1", "r2")]
    node = Finding("node_silent", "c", "r1", "n9", None, 100, 60.0, "silent", scope="node")
    frames = [frame(100, [60], node="n1", rack="r1"), frame(100, [60], node="n2", rack="r2")]
    changes = step(book, frames, [*rack, node])
    assert sorted((a.node, a.device) for a in changes) == [
        ("", "rack:r1"), ("", "rack:r2"), ("n9", "host")]
    # r1 reports without the finding: its rack alert resolves; n9 sent nothing: stays.
    changes = step(book, [frame(115, [60], node="n1", rack="r1")], [])
    assert [(a.device, a.state) for a in changes] == [("rack:r1", "resolved")]
    assert sorted(a.device for a in book.open) == ["host", "rack:r2"]


def test_value_updates_are_written_at_most_once_per_refresh() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ, refresh_s=60)
    changes = drive(book, rule, [frame(100 + 15 * i, [90 + i]) for i in range(9)])
    assert [a.updated_ts for a in changes] == [100, 160, 220]
    assert book.open[0].value == 98 and book.open[0].updated_ts == 220


def test_transitions_count_state_changes_not_value_refreshes() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=30), AlertBook(requirements=REQ, refresh_s=60)
    counted = []
    for i, t in enumerate([90, 91, 92, 93, 94, 95, 96, 97, 98, 70]):  # 20 s apart
        f = frame(100 + 20 * i, [t])
        changes = book.observe([f], rule.update([f]))
        counted.append((len(changes), book.transitions(changes)))
        book.apply(changes)
    # pending at 100; firing at 140; its value re-written at 200 and 260; resolved at 280.
    assert [c for c in counted if c[0]] == [(1, 1), (1, 1), (1, 0), (1, 0), (1, 1)]


def test_hysteresis_keeps_one_alert_for_a_gpu_hovering_at_the_limit() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0, hysteresis_c=3), AlertBook(requirements=REQ)
    changes = drive(book, rule, [frame(100 + 20 * i, [t]) for i, t in
                                 enumerate([86, 84, 85, 83, 86, 81])])
    assert len({a.id for a in changes}) == 1
    assert changes[-1].state == "resolved" and changes[-1].resolved_ts == 200


def test_a_failed_alert_write_loses_no_resolution_when_the_batch_is_processed_again(
        tmp_path) -> None:
    """Issue 9: with a store refusing alert writes (503), the alert must not stay firing."""
    from fleetwatch.pipeline.processor import Processor
    from fleetwatch.pipeline.store.base import StoreError
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    class Flaky(SqliteStore):
        fail = False

        def write_alerts(self, alerts):  # noqa: ANN001, ANN202
            if self.fail:
                raise StoreError("503 from the alert write")
            return super().write_alerts(alerts)

    store = Flaky(tmp_path / "s.db")
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)])
    processor.process([frame(100, [90])])
    store.fail = True
    import pytest

    cool = [frame(120, [60])]
    with pytest.raises(StoreError):
        processor.process(cool)
    # Alerts do not wait for the store: resolved (and sent) at once, stored on the retry.
    assert processor.alerts.open == [] and [a.state for a in store.alerts()] == ["firing"]
    store.fail = False
    processor.process(cool)                                          # the batch, retried
    (stored,) = store.alerts(("resolved",))
    assert stored.resolved_ts == 120 and processor.alerts.open == []


def test_a_late_frame_does_not_move_an_alert_back_in_time() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ)
    drive(book, rule, [frame(100, [90]), frame(130, [91])])
    assert drive(book, rule, [frame(115, [60])]) == []       # older than the alert's last update
    assert [a.state for a in book.open] == ["firing"]


def test_alert_identity_includes_the_cluster() -> None:
    rule = GpuTemperatureLimit(85, for_s=0)
    book = AlertBook()
    hot = [frame(100, [90]), Frame("c2", "r", "n1", 100, frame(100, [90]).gpus)]
    drive(book, rule, hot)
    assert sorted(a.cluster for a in book.open) == ["c", "c2"]
    (resolved,) = drive(book, rule, [frame(120, [60])])  # only cluster c's n1 cooled
    assert resolved.cluster == "c" and [a.cluster for a in book.open] == ["c2"]


def test_keep_firing_makes_a_gpu_crossing_its_limit_every_sample_one_alert() -> None:
    """A series sampled every 5 minutes that crosses the limit at every other sample (as a
    recorded machine temperature does): without keep_firing_s each crossing is a new page."""
    temps = [90, 80, 91, 79, 92, 80, 70, 70, 70]
    frames = [frame(1000 + 300 * i, [t]) for i, t in enumerate(temps)]
    flapping = drive(AlertBook(requirements=REQ), GpuTemperatureLimit(85, for_s=0), frames)
    assert [a.state for a in flapping].count("firing") == 3
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ, keep_firing_s=600)
    changes = drive(book, rule, frames)
    assert len({a.id for a in changes}) == 1
    assert changes[0].state == "firing" and {a.state for a in changes} == {"firing", "resolved"}
    # Clear from 2500 (80, then 70, 70, ...): resolved once clear for 600 s, at 3100.
    (resolved,) = [a for a in changes if a.state == "resolved"]
    assert resolved.resolved_ts == 1000 + 300 * 7 and resolved.fired_ts == 1000
    assert book.open == []


def test_keep_firing_clear_time_restarts_when_the_finding_returns() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ, keep_firing_s=60)
    temps = [90, 80, 80, 90, 80, 80, 80, 80]          # every 20 s
    changes = drive(book, rule, [frame(100 + 20 * i, [t]) for i, t in enumerate(temps)])
    assert len({a.id for a in changes}) == 1
    # Clear at 120 and 140, hot again at 160, clear from 180: resolved at 240, not 180.
    assert [(a.state, a.updated_ts) for a in changes if a.state != "firing"] == [
        ("resolved", 240)]


def test_keep_firing_counts_only_samples_that_judged_the_gpu() -> None:
    """A frame without the GPU's temperature (or the GPU lost) is not a clear sample."""
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ, keep_firing_s=60)
    drive(book, rule, [frame(100, [90]), frame(120, [80])])
    assert drive(book, rule, [frame(500, [None]), frame(520, [80], lost=(0,))]) == []
    assert [a.state for a in book.open] == ["firing"]
    (resolved,) = drive(book, rule, [frame(540, [80])])
    assert resolved.resolved_ts == 540  # clear since 120 (judged), 420 s ago


def test_keep_firing_does_not_hold_a_pending_alert_or_delay_a_clear_before_firing() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=60), AlertBook(requirements=REQ, keep_firing_s=600)
    changes = drive(book, rule, [frame(100, [90]), frame(120, [80])])
    assert [(a.state, a.updated_ts) for a in changes] == [("pending", 100), ("resolved", 120)]


def test_keep_firing_survives_a_failed_write_and_a_retried_batch() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=REQ, keep_firing_s=60)
    drive(book, rule, [frame(100, [90]), frame(120, [80])])       # clear since 120
    late = [frame(190, [80])]
    findings = rule.update(late)
    first = book.observe(late, findings)                           # not applied: write failed
    assert [a.state for a in first] == ["resolved"]
    assert book.observe(late, findings) == first                   # the retry: the same


def test_keep_firing_must_not_be_negative() -> None:
    import pytest

    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="keep_firing_s"):
            AlertBook(keep_firing_s=bad)


def alert(rule: str, node: str, device: str, severity: str = "warning",
          state: str = "firing", fired: float = 100.0) -> Alert:
    return Alert(f"{rule}/{node}/{device}", rule, severity, "c", "r1", node, device, state,  # type: ignore[arg-type]
                 fired - 60, fired, 1.0, "m", fired_ts=fired)


def test_the_terminal_summary_names_rules_by_subject_worst_first() -> None:
    alerts = [alert("gpu_hot_vs_peers", "node-001", "gpu3", fired=10),
              alert("gpu_thermal_throttle", "node-001", "gpu3", fired=20),
              alert("gpu_temp_limit", "node-001", "gpu3", "critical", fired=30),
              alert("gpu_xid", "node-002", "gpu0", "info", fired=5),
              alert("node_silent", "node-004", "host", "critical", fired=40),
              alert("node_cooling", "", "rack:r7", "critical", fired=50),
              alert("gpu_straggler", "node-003", "gpu1", state="pending")]
    # One subject's three alerts are one entry, its critical rule first; the pending
    # alert is not firing; what does not fit is counted, not dropped silently.
    assert summary(alerts) == ("node-001 gpu3: gpu_temp_limit, gpu_hot_vs_peers, "
                               "gpu_thermal_throttle; node-004 host: node_silent; +2 more")
    assert summary(alerts, subjects=4).endswith("rack r7: node_cooling; node-002 gpu0: gpu_xid")
    assert summary([alerts[-1]]) == ""
    many = [alert(f"gpu_rule_{i}", "node-001", "gpu3") for i in range(5)]
    assert summary(many) == "node-001 gpu3: gpu_rule_0, gpu_rule_1, gpu_rule_2 +2"
