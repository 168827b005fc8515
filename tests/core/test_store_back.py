"""A store away without frames in hand (InfluxDB's database missing: reads fail) is not
said to be back until something is stored, and the loop backs off meanwhile (it said
"store and bus are back" twice a second)."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import Running


class Missing(SqliteStore):
    """A store whose reads fail as InfluxDB's do while its database is missing."""

    def latest(self, metric, since_ms):  # type: ignore[override]
        raise StoreError("database not found: fleetwatch (test)")


def test_a_store_away_is_not_said_back_until_something_is_stored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bus = MemoryBus()
    processor = Processor(Missing(tmp_path / "s.db"), [NodeSilence(DetectorsConfig())])
    caplog.set_level(logging.INFO, "fleetwatch.pipeline.processor")
    with Running(bus, processor):  # no frame: the partition's stored nodes are read
        time.sleep(5)
    lines = [r.getMessage() for r in caplog.records]
    away = [line for line in lines if line.startswith("store unavailable")]
    assert len(away) >= 2
    assert not [line for line in lines if "back" in line], lines
    delays = [float(m) for line in away for m in re.findall(r"again in ([\d.]+)s", line)]
    assert delays[-1] > delays[0] * 2  # backing off, not twice a second
