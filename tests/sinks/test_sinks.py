"""Webhook (a real local HTTP server), the Kafka alert topic (real Tansu), the store, and
what happens when a sink is down."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.kafka import KafkaAlertSink
from fleetwatch.pipeline.sinks.store import StoreSink
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Acknowledgement
from tests.servers import Server, free_port
from tests.sinks.conftest import Receiver, fast, frame, tmp_store

HOT = [70, 90, 91, 92, 60]  # at 15 s: pending at +15, firing at +45 (for_s 30), resolved


def run(processor: Processor, temps: list[float], nodes: tuple[str, ...] = ("n1",),
        t0: float = 1_000_000.0) -> None:
    for i, t in enumerate(temps):
        processor.process([frame(t0 + 15 * i, [60, t], node=n) for n in nodes])


def test_webhook_gets_firing_and_resolved_grouped_by_node(receiver: Receiver,
                                                          tmp_path: Path) -> None:
    notifier = Notifier([WebhookSink(receiver.url)], background=False)
    processor = Processor(tmp_store(tmp_path), [GpuTemperatureLimit(85, for_s=30)],
                          notify=notifier.send)
    run(processor, HOT, nodes=("n1", "n2"))
    assert len(receiver.bodies) == 2  # pending is not a notification
    firing, resolved = receiver.bodies
    assert [(g["node"], [a["state"] for a in g["alerts"]]) for g in firing["groups"]] == [
        ("n1", ["firing"]), ("n2", ["firing"])]
    alert = firing["groups"][0]["alerts"][0]
    assert alert["labels"]["device"] == "gpu1" and alert["rule"] == "gpu_temp_high"
    assert alert["value"] == 92 and alert["started_ts"] == 1_000_015.0
    assert alert["started"] == "1970-01-12T13:46:55.000Z"
    assert [a["state"] for g in resolved["groups"] for a in g["alerts"]] == ["resolved"] * 2


def test_a_webhook_answering_503_is_retried_and_counted(tmp_path: Path) -> None:
    receiver = Receiver(answers=[503, 503])
    try:
        notifier = Notifier([WebhookSink(receiver.url)], background=False, backoff=fast)
        processor = Processor(tmp_store(tmp_path), [GpuTemperatureLimit(85, for_s=30)],
                              notify=notifier.send)
        run(processor, HOT[:4])
        assert receiver.requests == 3 and len(receiver.bodies) == 1
        assert notifier.stats.retries == 2 and notifier.stats.failed == 0
    finally:
        receiver.close()


def test_a_sink_that_is_down_does_not_stop_the_processor_or_lose_the_stored_alert(
        tmp_path: Path) -> None:
    down = WebhookSink(f"http://127.0.0.1:{free_port()}/hook", timeout_s=1)
    # On its own thread; not held after the last try (retry_s=0: tests/sinks/test_sink_lanes.py)
    notifier = Notifier([down], attempts=3, backoff=fast, retry_s=0)
    store = tmp_store(tmp_path)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=30)], notify=notifier.send)
    started = time.monotonic()
    run(processor, HOT)
    assert time.monotonic() - started < 1.0       # the processor did not wait on the sink
    notifier.close()
    assert notifier.stats.failed >= 2 and notifier.stats.by_sink == {
        "webhook": notifier.stats.failed}
    assert notifier.stats.retries == 2 * notifier.stats.failed  # bounded: 3 tries each
    assert "unreachable" in notifier.stats.last_error
    (stored,) = store.alerts(("resolved",))
    assert stored.fired_ts == 1_000_045.0 and stored.resolved_ts == 1_000_060.0
    assert processor.stats.frames == len(HOT)


def test_an_acknowledged_alert_is_not_notified_again(receiver: Receiver, tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    notifier = Notifier([WebhookSink(receiver.url)], acks=store.acks, background=False,
                        reload_s=0)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notify=notifier.send,
                          )
    processor.process([frame(100, [95])])
    (alert,) = store.alerts()
    store.write_acks([Acknowledgement(alert.id, 110, "oncall")])
    processor.process([frame(300, [96])])    # a value update past the refresh interval
    processor.process([frame(315, [60])])    # resolution is still told
    states = [a["state"] for b in receiver.bodies for g in b["groups"] for a in g["alerts"]]
    assert states == ["firing", "resolved"]


def test_kafka_alert_topic_carries_every_change_with_evidence(kafka: Server,
                                                              tmp_path: Path) -> None:
    topic = f"alerts-{uuid.uuid4().hex[:8]}"
    sink = KafkaAlertSink(KafkaProducer(kafka.address), topic)
    notifier = Notifier([sink], background=False)
    processor = Processor(tmp_store(tmp_path), [GpuTemperatureLimit(85, for_s=30)],
                          notify=notifier.send)
    run(processor, HOT)
    notifier.close()
    consumer = KafkaConsumer(kafka.address, topic, f"g-{topic}", session_timeout_ms=6000,
                             heartbeat_interval_ms=2000)
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        got += consumer.poll(10, timeout_s=0.5)
    consumer.close()
    changes = [json.loads(m.value) for m in got]
    assert [c["state"] for c in changes] == ["pending", "firing", "resolved"]
    assert {m.key for m in got} == {b"n1"}
    assert changes[1]["labels"]["node"] == "n1" and changes[1]["value"] == 92


def test_store_sink_writes_every_change(tmp_path: Path) -> None:
    other = tmp_store(tmp_path / "other")
    notifier = Notifier([StoreSink(other)], background=False)
    processor = Processor(tmp_store(tmp_path), [GpuTemperatureLimit(85, for_s=30)],
                          notify=notifier.send)
    run(processor, HOT[:4])
    (alert,) = other.alerts()
    assert alert.state == "firing" and alert.fired_ts == 1_000_045.0


def test_a_full_queue_drops_changes_never_a_hand_over_and_counts_them_per_sink() -> None:
    """A sink far behind loses the oldest batches of changes (counted), but the alerts it
    must keep re-sending (adopt) or stop re-sending (forget) reach it, in order."""
    import threading

    from fleetwatch.pipeline.store.base import Alert

    class Slow:
        name, notify_only = "slow", True

        def __init__(self) -> None:
            self.busy, self.go = threading.Event(), threading.Event()
            self.calls: list[tuple[str, object]] = []

        def send(self, changes) -> None:  # noqa: ANN001
            self.busy.set()
            self.go.wait(10)
            self.calls.append(("send", [n.alert.id for n in changes]))

        def adopt(self, alerts) -> None:  # noqa: ANN001
            self.calls.append(("adopt", [n.alert.id for n in alerts]))

        def forget(self, nodes) -> None:  # noqa: ANN001
            self.calls.append(("forget", sorted(nodes)))

        def close(self) -> None:
            pass

    def alert(i: int, node: str = "n1") -> Alert:
        return Alert(f"a{i}", "gpu_temp_high", "critical", "c", "r1", node, "gpu0", "firing",
                     0.0, float(i), 91.0, "hot", fired_ts=0.0)

    sink = Slow()
    notifier = Notifier([sink], queue_max=2, tick_s=0.01)
    notifier.send([alert(0)])
    assert sink.busy.wait(10)             # the thread holds batch 0
    notifier.send([alert(1)])
    notifier.adopt([alert(9, node="n9")])
    notifier.send([alert(2)])
    notifier.forget({"n9"})
    notifier.send([alert(3)])             # the queue holds 2 batches: batch 1 is dropped
    sink.go.set()
    notifier.close()
    assert sink.calls == [("send", ["a0"]), ("adopt", ["a9"]), ("send", ["a2"]),
                          ("forget", ["n9"]), ("send", ["a3"])]
    counts = notifier.stats.sinks["slow"]
    assert (counts.sent, counts.dropped, counts.failed, counts.retries) == (3, 1, 0, 0)
