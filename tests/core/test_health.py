from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.codec import encode
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.health import ProcessorCollector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore


def test_processor_health_metrics(tmp_path: Path) -> None:
    bus = MemoryBus()
    producer = bus.producer()
    sim = FleetSim(SimParams(nodes=2, gpus=1), 1_763_800_000.0)
    sim.step()
    for f in sim.frames():
        producer.send("t", encode(f))
    producer.send("t", b"\xc1")  # never valid MessagePack
    consumer = bus.consumer("t", "g")
    processor = Processor(SqliteStore(tmp_path / "s.db"))
    processor.handle(consumer.poll(2))  # one message left behind: lag 1
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, consumer))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(generate_latest(registry).decode())
               for s in fam.samples}
    assert samples[("fleetwatch_processor_frames_total", ())] == 2
    assert samples[("fleetwatch_processor_samples_total", ())] == 2 * (36 + 5)
    assert samples[("fleetwatch_processor_consumer_lag", ())] == 1
    assert samples[("fleetwatch_processor_paused", ())] == 0
    processor.handle(consumer.poll(10))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(generate_latest(registry).decode())
               for s in fam.samples}
    assert samples[("fleetwatch_processor_dead_letters_total", (("field", "frame"),))] == 1
    assert samples[("fleetwatch_processor_consumer_lag", ())] == 0


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(generate_latest(registry).decode())
            for s in fam.samples}


def test_alert_sink_and_event_counters_are_scraped(tmp_path: Path) -> None:
    """What an operator watches to know alerts get out: per sink, sent, failed, dropped and
    retried batches; and how many events (XIDs, job changes) the processor stored."""
    from fleetwatch.frame import Frame, GpuReading
    from fleetwatch.models.rules import GpuTemperatureLimit
    from fleetwatch.pipeline.sinks import Notifier
    from fleetwatch.pipeline.sinks.webhook import WebhookSink
    from fleetwatch.retry import Backoff
    from tests.sinks.conftest import Receiver

    hook = Receiver(answers=[503])  # busy once: one retry, then delivered
    notifier = Notifier([WebhookSink(hook.url)], background=False,
                        backoff=lambda: Backoff(0.01, 0.02))
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notifier=notifier)
    consumer = MemoryBus().consumer("t", "g")
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, consumer, notifier))

    def node(ts: float, temp: float, xids: tuple[int, ...] = ()) -> Frame:
        return Frame("c", "r", "n1", ts, (GpuReading(0, "GPU-0", "H100", {"gpu_temp_c": temp},
                                                     job="job-1", xids=xids),))
    try:
        processor.process([node(1_763_800_000.0, 95.0, xids=(79,))])
        processor.process([node(1_763_800_010.0, 96.0, xids=(79, 79))])
        got = _scrape(registry)
    finally:
        notifier.close()
        hook.close()
        store.close()
    assert got[("fleetwatch_alert_sink_sent_total", (("sink", "webhook"),))] == 1
    assert got[("fleetwatch_alert_sink_retries_total", (("sink", "webhook"),))] == 1
    assert got[("fleetwatch_alert_sink_failed_total", (("sink", "webhook"),))] == 0
    assert got[("fleetwatch_alert_sink_dropped_total", (("sink", "webhook"),))] == 0
    assert got[("fleetwatch_processor_events_total", (("kind", "xid"),))] == 3
    assert got[("fleetwatch_processor_events_total", (("kind", "job_start"),))] == 1
    assert got[("fleetwatch_processor_event_nodes", ())] == 1
    assert len(hook.bodies) == 1  # the firing alert, once


def test_alertmanager_silence_mirroring_failures_are_scraped(tmp_path: Path) -> None:
    """An Alertmanager that cannot take fleetwatch's silences leaves pages unmuted: the
    operator sees it as a counter, not only in a log line."""
    from fleetwatch.pipeline.sinks import Notifier
    from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
    from fleetwatch.pipeline.store.base import Silence

    dead = AlertmanagerSink("http://127.0.0.1:9", timeout_s=0.5)  # port 9: nothing answers
    notifier = Notifier([dead], background=False)
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, [], notifier=notifier)
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, MemoryBus().consumer("t", "g"), notifier))
    try:
        dead.mutes([Silence("s1", (("node", "=", "n1"),), 0.0, 4e9, "ana")], {})
        got = _scrape(registry)
    finally:
        notifier.close()
        store.close()
    assert got[("fleetwatch_alert_sink_silence_errors_total", (("sink", "alertmanager"),))] == 1


def test_alert_changes_count_transitions_and_refreshes_are_counted_apart(tmp_path: Path) -> None:
    """A GPU hot for 10 minutes: its alert goes pending, fires and resolves (3 changes);
    the once-a-minute re-writes of its value while it fires are alert writes, not changes."""
    from fleetwatch.frame import Frame, GpuReading
    from fleetwatch.models.rules import GpuTemperatureLimit

    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=30)])
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, MemoryBus().consumer("t", "g")))
    t0 = 1_763_800_000.0
    try:
        for k in range(60):  # one frame each 10 s; its value moves a little all the time
            temp = 95.0 + k % 3 if k < 60 - 3 else 60.0
            processor.process([Frame("c", "r", "n1", t0 + 10 * k,
                                     (GpuReading(0, "GPU-0", "H100", {"gpu_temp_c": temp}),))])
        got = _scrape(registry)
        alerts = store.alerts(("pending", "firing", "resolved"))
    finally:
        store.close()
    assert [(a.state, a.fired_ts is not None) for a in alerts] == [("resolved", True)]
    assert got[("fleetwatch_processor_alert_changes_total", ())] == 3
    # Firing for ~9 minutes: a refresh a minute on top of the 3 changes.
    assert 3 + 7 <= got[("fleetwatch_processor_alert_writes_total", ())] <= 3 + 10


def test_a_sink_that_is_down_shows_its_held_changes_at_once_not_after_the_retry_window(
        tmp_path: Path) -> None:
    """An Alertmanager or webhook outage is visible to Prometheus while the changes are held
    (``FleetwatchAlertSinkDown`` reads these), not only when they are given up after
    alerts.sink_retry_s (10 min by default), which is all the counters say."""
    from fleetwatch.pipeline.sinks import Notifier
    from fleetwatch.pipeline.sinks.webhook import WebhookSink
    from tests.sinks.conftest import Receiver, fast, until
    from tests.sinks.test_sink_lanes import alert

    hook = Receiver()
    notifier = Notifier([WebhookSink(hook.url, timeout_s=5)], attempts=1, backoff=fast)
    store = SqliteStore(tmp_path / "s.db")
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(Processor(store), MemoryBus().consumer("t", "g"),
                                         notifier))
    key = (("sink", "webhook"),)
    try:
        got = _scrape(registry)
        assert got[("fleetwatch_alert_sink_up", key)] == 1.0
        assert got[("fleetwatch_alert_sink_held_changes", key)] == 0.0
        assert got[("fleetwatch_alert_sink_oldest_held_seconds", key)] == 0.0
        hook.code = 500                                  # the receiver fails
        notifier.send([alert("x")])
        notifier.send([alert("y")])
        assert until(lambda: _scrape(registry)[
            ("fleetwatch_alert_sink_held_changes", key)] == 2.0)
        first = _scrape(registry)
        assert until(lambda: _scrape(registry)[
            ("fleetwatch_alert_sink_oldest_held_seconds", key)] > first[
            ("fleetwatch_alert_sink_oldest_held_seconds", key)] > 0.0)
        got = _scrape(registry)
        assert got[("fleetwatch_alert_sink_up", key)] == 0.0
        assert got[("fleetwatch_alert_sink_failed_total", key)] == 0  # nothing given up yet
        hook.code = 200                                  # back: both delivered
        assert until(lambda: len(hook.bodies) == 1)
        assert until(lambda: _scrape(registry)[("fleetwatch_alert_sink_up", key)] == 1.0)
        got = _scrape(registry)
        assert got[("fleetwatch_alert_sink_held_changes", key)] == 0.0
        assert got[("fleetwatch_alert_sink_oldest_held_seconds", key)] == 0.0
    finally:
        notifier.close()
        hook.close()
        store.close()
