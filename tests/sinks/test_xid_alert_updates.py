"""A later, worse XID on a GPU whose XID alert is open reaches every sink (a real webhook
receiver, the Kafka alert topic on Tansu, a real Alertmanager) and the store, also after
a processor restart."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.kafka import KafkaAlertSink
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from tests.servers import Server
from tests.sinks.conftest import Receiver, tmp_store
from tests.sinks.test_alertmanager import am_alerts, wait_for


def xid_frame(ts: float, codes: tuple[int, ...] = (), node: str = "n1") -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "m", {"gpu_temp_c": 60.0}, None, "ok",
                            codes if i == 3 else ()) for i in range(4))
    return Frame("c", "r1", node, ts, gpus)


def fired(receiver: Receiver) -> list[dict]:
    return [a for body in receiver.bodies for g in body["groups"]  # type: ignore[index]
            for a in g["alerts"]]


def test_xid_64_after_48_is_notified_again_and_stored(receiver: Receiver, kafka: Server,
                                                      tmp_path: Path) -> None:
    topic = f"alerts-{uuid.uuid4().hex[:8]}"
    notifier = Notifier([WebhookSink(receiver.url),
                         KafkaAlertSink(KafkaProducer(kafka.address), topic)],
                        background=False)
    store = tmp_store(tmp_path)
    processor = Processor(store, [XidEvents()], notify=notifier.send)
    t0 = 1_000_000.0
    # The repeated 48 is no news (not notified), but written once refresh_s (60 s) passed.
    for ts, codes in ((t0, (48,)), (t0 + 10, ()), (t0 + 12, (64,)), (t0 + 20, (48,)),
                      (t0 + 90, ())):
        processor.process([xid_frame(ts, codes)])
    notifier.close()
    hooks = fired(receiver)
    assert [(a["state"], a["evidence"]["xid"]) for a in hooks] == [("firing", 48),
                                                                   ("firing", 64)]
    assert "RMA" in hooks[1]["action"] and "48 (" in hooks[1]["message"]
    assert hooks[0]["id"] == hooks[1]["id"]  # one alert, updated
    consumer = KafkaConsumer(kafka.address, topic, f"g-{topic}", session_timeout_ms=6000,
                             heartbeat_interval_ms=2000)
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:
        got += consumer.poll(10, timeout_s=0.5)
    consumer.close()
    assert [json.loads(m.value)["evidence"]["xid"] for m in got] == [48, 64]
    (stored,) = store.alerts()
    assert "RMA" in stored.action and stored.evidence["xid_64_count"] == 1
    assert stored.evidence["xid_48_count"] == 2


def test_after_a_restart_the_open_alert_keeps_its_xids_and_a_new_one_is_notified(
        receiver: Receiver, tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    t0 = 1_000_000.0
    first = Processor(store, [XidEvents()])
    first.process([xid_frame(t0, (48,))])
    notifier = Notifier([WebhookSink(receiver.url)], background=False)
    again = Processor(tmp_store(tmp_path), [XidEvents()], notifier=notifier)  # a restart
    again.process([xid_frame(t0 + 300, (64,))])
    notifier.close()
    (stored,) = again.store.alerts()
    assert stored.evidence["xid_48_count"] == 1 and stored.evidence["xid_64_count"] == 1
    assert "48 (" in stored.message and "64 (" in stored.message and "RMA" in stored.action
    (hook,) = fired(receiver)
    assert hook["state"] == "firing" and hook["evidence"]["xid"] == 64


def test_alertmanager_shows_the_later_worse_xid(am: Server, tmp_path: Path) -> None:
    node = f"node-xid-{time.time_ns()}"
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}", resend_s=60)],
                        background=False)
    processor = Processor(tmp_store(tmp_path), [XidEvents()], notify=notifier.send)
    now = time.time() - 60
    processor.process([xid_frame(now, (48,), node=node)])
    (got,) = wait_for(lambda: am_alerts(am, node))
    assert "RMA" not in got["annotations"]["action"]
    processor.process([xid_frame(now + 12, (64,), node=node)])
    got = wait_for(lambda: [a for a in am_alerts(am, node)
                            if "RMA" in a["annotations"].get("action", "")])
    assert len(got) == 1
    assert "64 (" in got[0]["annotations"]["summary"] and "48 (" in got[0]["annotations"][
        "summary"]
    first = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    assert f"xid_48_first_ts={first}" in got[0]["annotations"]["evidence"]
    notifier.close()


def test_an_older_releases_open_xid_alert_is_taken_over_without_a_new_notification(
        receiver: Receiver, tmp_path: Path) -> None:
    """Upgrading with an XID alert open: its evidence of before (one code and its count)
    carries on, and as nothing got worse the webhook hears nothing."""
    from fleetwatch.pipeline.store.base import Alert

    store = tmp_store(tmp_path)
    t0 = 1_000_000.0
    store.write_alerts([Alert("gpu_xid_critical/c/n1/gpu3/1", "gpu_xid_critical", "critical",
                              "c", "r1", "n1", "gpu3", "firing", t0, t0 + 100, 48.0,
                              "XID 48 on GPU 3", evidence={"xid": 48.0, "count": 12.0,
                                                           "hold_s": 3600.0},
                              action="drain", fired_ts=t0)])
    notifier = Notifier([WebhookSink(receiver.url)], background=False)
    again = Processor(tmp_store(tmp_path), [XidEvents()], notifier=notifier)  # the upgrade
    for ts in (t0 + 160, t0 + 170, t0 + 240):
        again.process([xid_frame(ts, (48,))])
    notifier.close()
    assert fired(receiver) == []
    (stored,) = again.store.alerts()
    assert stored.evidence["xid_48_count"] == 15 and stored.evidence["xid_48_first_ts"] == t0
    assert "48 (Double-bit ECC error) 15x" in stored.message


def test_a_worse_xid_on_an_older_releases_alert_is_notified_after_the_upgrade(
        receiver: Receiver, tmp_path: Path) -> None:
    """Upgrading with an XID 48 alert open, the GPU's first XID after it is a 64 (RMA): the
    alert's first revision under the new release is 2, which is news: the webhook hears it."""
    from fleetwatch.pipeline.store.base import Alert

    store = tmp_store(tmp_path)
    t0 = 1_000_000.0
    store.write_alerts([Alert("gpu_xid_critical/c/n1/gpu3/1", "gpu_xid_critical", "critical",
                              "c", "r1", "n1", "gpu3", "firing", t0, t0 + 100, 48.0,
                              "XID 48 on GPU 3", evidence={"xid": 48.0, "count": 12.0,
                                                           "hold_s": 3600.0},
                              action="drain", fired_ts=t0)])
    notifier = Notifier([WebhookSink(receiver.url)], background=False)
    again = Processor(tmp_store(tmp_path), [XidEvents()], notifier=notifier)  # the upgrade
    again.process([xid_frame(t0 + 160, (64,))])
    notifier.close()
    (sent,) = fired(receiver)
    assert "64" in sent["message"] and "RMA" in sent["action"]


def test_the_last_count_of_a_repeated_xid_is_stored_when_the_data_end(tmp_path: Path) -> None:
    """XID 48 every second for 10 min: updates are written every refresh_s, and the last
    ones when the processor is flushed (a replay's end, a stop), not left 59 s behind."""
    store = tmp_store(tmp_path)
    processor = Processor(store, [XidEvents()])
    t0 = 1_000_000.0
    for k in range(600):
        processor.process([xid_frame(t0 + k, (48,))])
    assert processor.flush() == 1
    (stored,) = store.alerts()
    assert stored.evidence["xid_48_count"] == 600 and stored.updated_ts == t0 + 599
    assert processor.flush() == 0
