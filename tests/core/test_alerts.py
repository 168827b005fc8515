from __future__ import annotations

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.alerts import AlertBook


def frame(ts: float, temps: list[float], node: str = "n1") -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "m", {"gpu_temp_c": t}) for i, t in enumerate(temps))
    return Frame("c", "r", node, ts, gpus)


def drive(book: AlertBook, rule: GpuTemperatureLimit, frames: list[Frame]) -> list:
    changes = []
    for f in frames:
        step = book.observe([f], rule.update([f]))
        book.apply(step)  # as the processor does once the store has them
        changes.extend(step)
    return changes


def test_pending_then_firing_after_for_duration_then_resolved() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=60), AlertBook()
    temps = [70, 86, 88, 90, 91, 92, 80, 70]
    changes = drive(book, rule, [frame(100 + 20 * i, [60, t]) for i, t in enumerate(temps)])
    states = [(a.state, a.updated_ts) for a in changes]
    assert states[0] == ("pending", 120)
    assert ("firing", 180) in states                       # 60 s after it started
    assert states[-1] == ("resolved", 220)
    assert {a.id for a in changes} == {changes[0].id}     # one alert, deduplicated
    assert all(a.device == "gpu1" for a in changes)
    assert book.open == []


def test_a_blip_shorter_than_for_duration_never_fires() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=60), AlertBook()
    changes = drive(book, rule, [frame(100 + 20 * i, [t]) for i, t in enumerate([86, 87, 70])])
    assert [a.state for a in changes] == ["pending", "pending", "resolved"]
    assert all(a.fired_ts is None for a in changes)


def test_a_silent_node_keeps_its_alert_open() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook()
    drive(book, rule, [frame(100, [90], node="n1")])
    changes = drive(book, rule, [frame(120, [60], node="n2")])  # only another node reports
    assert changes == []
    assert [a.state for a in book.open] == ["firing"]


def test_batches_with_several_ticks_are_walked_in_time_order() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=30), AlertBook()
    frames = [frame(100 + 10 * i, [t]) for i, t in enumerate([90, 90, 90, 90, 60, 90])]
    changes = book.observe(frames, rule.update(frames))
    by_id = {a.id: a for a in changes}
    assert len(by_id) == 2  # fired and resolved, then a new one pending
    first, second = sorted(by_id.values(), key=lambda a: a.started_ts)
    assert (first.state, first.fired_ts, first.resolved_ts) == ("resolved", 130, 140)
    assert (second.state, second.started_ts) == ("pending", 150)


def test_reloaded_alerts_continue() -> None:
    rule = GpuTemperatureLimit(85, for_s=0)
    first = AlertBook()
    (alert,) = drive(first, rule, [frame(100, [90])])
    second = AlertBook(active=[alert])  # e.g. a processor restart
    (resolved,) = drive(second, rule, [frame(200, [60])])
    assert resolved.id == alert.id and resolved.state == "resolved"


def test_hysteresis_keeps_one_alert_for_a_gpu_hovering_at_the_limit() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0, hysteresis_c=3), AlertBook()
    changes = drive(book, rule, [frame(100 + 20 * i, [t]) for i, t in
                                 enumerate([86, 84, 85, 83, 86, 81])])
    assert len({a.id for a in changes}) == 1
    assert changes[-1].state == "resolved" and changes[-1].resolved_ts == 200


def test_observe_leaves_the_book_unchanged_until_the_changes_are_applied() -> None:
    """A failed alert write must not lose a transition: observe again, same answer."""
    rule = GpuTemperatureLimit(85, for_s=0)
    book = AlertBook()
    drive(book, rule, [frame(100, [90])])
    (firing,) = book.open
    cool = [frame(120, [60])]
    (resolved,) = book.observe(cool, rule.update(cool))  # the write of this one fails
    assert resolved.state == "resolved" and book.open == [firing]
    again = book.observe(cool, rule.update(cool))         # retried later
    assert again == [resolved]
    book.apply(again)
    assert book.open == []


def test_load_and_drop_follow_the_nodes_a_processor_owns() -> None:
    rule = GpuTemperatureLimit(85, for_s=0)
    old = AlertBook()
    drive(old, rule, [frame(100, [90], node="n1"), frame(100, [90], node="n2")])
    moved = [a for a in old.open if a.node == "n2"]
    old.drop({"n2"})                    # n2's partition was revoked
    assert {a.node for a in old.open} == {"n1"}
    new = AlertBook()
    new.load(moved)                     # ... and assigned here
    new.load(moved)                     # loading twice keeps one
    assert new.open == moved
    assert drive(new, rule, [frame(120, [91], node="n2")])[0].id == moved[0].id  # no duplicate


def test_alert_identity_includes_the_cluster() -> None:
    rule = GpuTemperatureLimit(85, for_s=0)
    book = AlertBook()
    hot = [frame(100, [90]), Frame("c2", "r", "n1", 100, frame(100, [90]).gpus)]
    drive(book, rule, hot)
    assert sorted(a.cluster for a in book.open) == ["c", "c2"]
    (resolved,) = drive(book, rule, [frame(120, [60])])  # only cluster c's n1 cooled
    assert resolved.cluster == "c" and [a.cluster for a in book.open] == ["c2"]
