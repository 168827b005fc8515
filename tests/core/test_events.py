"""Events from frames (pure), and the processor storing them with each batch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fleetwatch.codec import encode
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.events import EventTracker, jobs_of
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Event, StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore


def gpu(index: int, state: str = "ok", job: str | None = None, throttle: float | None = 0.0,
        xids: tuple[int, ...] = ()) -> GpuReading:
    metrics = {"gpu_temp_c": 50.0} if throttle is None else {
        "gpu_temp_c": 50.0, "gpu_throttle_reasons": throttle}
    return GpuReading(index, f"GPU-{index}", "H100", metrics, job=job,
                      state=state, xids=xids)  # type: ignore[arg-type]


def frame(ts: float, *gpus: GpuReading, node: str = "node-0", cluster: str = "c") -> Frame:
    return Frame(cluster, "rack-0", node, ts, gpus)


def kinds(events: list[Event]) -> list[tuple[float, str, str, int, str]]:
    """The events but ``gpu_identity`` (each GPU's first frame has one: tested below)."""
    return [(e.ts, e.kind, e.device, e.code, e.value) for e in events
            if e.kind != "gpu_identity"]


def test_every_change_is_one_event_and_nothing_else_is() -> None:
    t = EventTracker()
    assert kinds(t.update([frame(0, gpu(0), gpu(1, job="j1"))])) == [
        (0, "job_start", "gpu1", 0, "j1")]  # a running job is seen starting
    assert t.update([frame(1, gpu(0), gpu(1, job="j1"))]) == []  # nothing changed
    got = t.update([
        frame(2, gpu(0, xids=(79, 79, 48)), gpu(1, job="j1", throttle=0x44)),
        frame(3, gpu(0, state="lost", throttle=None), gpu(1, job="j2", throttle=0x44)),
        frame(4, gpu(1, job=None, throttle=0x44)),  # gpu0 left the frame
        frame(5, gpu(0), gpu(1))])                  # and came back
    assert kinds(got) == [
        (2, "xid", "gpu0", 79, ""), (2.001, "xid", "gpu0", 79, ""), (2, "xid", "gpu0", 48, ""),
        (2, "throttle", "gpu1", 0x44, ""),
        (3, "gpu_state", "gpu0", 0, "lost"),
        (3, "job_end", "gpu1", 0, "j1"), (3, "job_start", "gpu1", 0, "j2"),
        (4, "job_end", "gpu1", 0, "j2"), (4, "gpu_state", "gpu0", 0, "gone"),
        (5, "gpu_state", "gpu0", 0, "ok"), (5, "throttle", "gpu1", 0, "")]
    assert got[3].text == "sw_power_cap,hw_thermal_slowdown"
    assert {(e.cluster, e.rack, e.node) for e in got} == {("c", "rack-0", "node-0")}


def test_nodes_of_two_clusters_and_late_frames_are_kept_apart() -> None:
    t = EventTracker()
    t.update([frame(0, gpu(0, job="a"), cluster="x"), frame(0, gpu(0), cluster="y")])
    got = t.update([frame(1, gpu(0), cluster="x"), frame(1, gpu(0, job="b"), cluster="y"),
                    frame(0.5, gpu(0, job="zz", xids=(13,)), cluster="x")])  # late
    assert [(e.cluster, e.kind, e.value, e.code) for e in got if e.kind != "gpu_identity"] == [
        ("x", "job_end", "a", 0), ("y", "job_start", "b", 0), ("x", "xid", "", 13)]


def test_drop_forgets_a_node_and_undo_replays_the_same_events() -> None:
    t = EventTracker()
    t.update([frame(0, gpu(0, job="a")), frame(0, gpu(0), node="node-1")])
    t.drop(["node-0"])
    assert t.nodes() == [("c", "node-1")]
    assert kinds(t.update([frame(1, gpu(0, job="a"))])) == [(1, "job_start", "gpu0", 0, "a")]
    batch = [frame(2, gpu(0, state="lost", job=None))]
    first = t.update(batch)
    t.undo()  # the store did not take them: the batch comes again
    assert t.update(batch) == first and len(first) == 2


def test_jobs_of_pairs_starts_and_ends_per_gpu() -> None:
    def ev(ts: float, kind: str, device: str, job: str) -> Event:
        return Event(ts, kind, "c", "r", "n", device, value=job)

    assert jobs_of([ev(0, "job_start", "gpu0", "a"), ev(5, "job_end", "gpu0", "a"),
                    ev(0, "job_start", "gpu1", "a"), ev(6, "job_start", "gpu0", "b")]) == [
        ("n", "gpu0", "a", 0, 5), ("n", "gpu1", "a", 0, None), ("n", "gpu0", "b", 6, None)]


class _EventsFailOnce(SqliteStore):
    failed = False

    def write_events(self, events):  # type: ignore[no-untyped-def,override]
        if not _EventsFailOnce.failed:
            _EventsFailOnce.failed = True
            raise StoreError("store away (test)")
        super().write_events(events)


def test_the_processor_stores_events_with_the_batch_before_committing(tmp_path: Path) -> None:
    """A failed event write keeps the batch uncommitted; once the store is back, every event
    is stored once, the XIDs and the lost GPU among them."""
    bus = MemoryBus()
    producer = bus.producer()
    sent = [frame(100.0 + i, gpu(0, job="j1", xids=(79,) if i == 3 else ()),
                  gpu(1, state="lost" if i >= 5 else "ok"))
            for i in range(8)]
    t0 = round(time.time()) - 3600.0  # within the store's retention
    sent = [Frame(f.cluster, f.rack, f.node, t0 + f.ts, f.gpus) for f in sent]
    for f in sent:
        producer.send("frames", encode(f), f.node.encode())
    store = _EventsFailOnce(tmp_path / "store.db")
    processor = Processor(store)
    consumer = bus.consumer("frames", group="g")
    stop = threading.Event()
    thread = threading.Thread(target=processor.run, args=(consumer, stop),
                              kwargs={"max_messages": 8}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while processor.stats.frames < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(10)
    assert _EventsFailOnce.failed and processor.stats.store_errors >= 1
    got = store.events(0, 2e9)
    assert kinds(got) == [(t0 + 100, "job_start", "gpu0", 0, "j1"),
                          (t0 + 103, "xid", "gpu0", 79, ""),
                          (t0 + 105, "gpu_state", "gpu1", 0, "lost")]
    store.close()


def test_each_job_of_a_shared_gpu_starts_and_ends_on_its_own() -> None:
    t = EventTracker()
    got = []
    for ts, job in ((0, "4001"), (1, "4001,4002"), (2, "4002"), (3, None)):
        got += t.update([frame(ts, gpu(0, job=job))])
    assert [(e.ts, e.kind, e.value) for e in got if e.kind.startswith("job")] == [
        (0, "job_start", "4001"), (1, "job_start", "4002"), (2, "job_end", "4001"),
        (3, "job_end", "4002")]
