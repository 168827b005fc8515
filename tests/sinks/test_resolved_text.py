"""What the on-call reads when an alert ends or comes back from a silence: a resolved
alert says it resolved, since when and what its subject reads now (not the firing text
alone), and an alert notified when its silence ends carries its evidence of now, not of
when it fired. Processor, notifier and store are real (SQLite); the sinks record."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.am_payload import am_annotations
from fleetwatch.pipeline.store.base import Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node
from tests.sinks.test_silence_unchanged import Recorder


def test_a_resolved_alert_says_resolved_since_when_and_the_reading_now() -> None:
    rule, book = GpuTemperatureLimit(85, for_s=0), AlertBook(requirements=dict(
        GpuTemperatureLimit.rules))
    changes = []
    for k, temp in enumerate([95.0, 95.0, 61.0]):
        frames = [node(1_800_000_000.0 + 10 * k, [busy(60), busy(temp)])]
        step = book.observe(frames, rule.update(frames))
        book.apply(step)
        changes += step
    resolved = changes[-1]
    assert resolved.state == "resolved" and resolved.evidence["resolved_gpu_temp_c"] == 61.0
    text = am_annotations(resolved)
    assert text["summary"].startswith("Resolved: gpu1 on n1")
    assert "since 2027-01-15T08:00:20" in text["summary"] and "gpu_temp_c=61" in text["summary"]
    assert "at 95 °C" not in text["summary"]
    assert "it had fired" in text["description"] and "at 95 °C" in text["description"]
    firing = am_annotations(changes[0])
    assert firing["summary"] == "GPU 1 on n1 at 95 °C, limit 85 °C"


def test_an_alert_heard_when_its_silence_ends_carries_its_evidence_of_now(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    sink = Recorder()
    notifier = Notifier([sink], silences=store.silences, acks=store.acks,
                        background=False, reload_s=0)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notifier=notifier)
    t0 = time.time() - 600
    store.write_silences([Silence("s1", (("node", "=", "n1"),), t0 - 10, t0 + 25, "ops")])
    processor.process([node(t0, [busy(60), busy(95)])])   # fires muted
    for k in range(1, 5):                                 # hotter, not yet written again
        processor.process([node(t0 + 10 * k, [busy(60), busy(97)])])
    heard = [n for n in sink.notices if n.notify]
    assert [n.alert.state for n in heard] == ["firing"]
    assert heard[0].alert.message == "GPU 1 on n1 at 97 °C, limit 85 °C"
