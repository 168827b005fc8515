"""At a takeover, the nodes that have sent nothing yet are named only after a grace.

Right after an assignment nothing has been polled: naming every node of the partitions
taken over then read as "these nodes are silent" during an incident. ``Ownership`` now
waits two of the fleet's intervals (on the frames' clock or the processor's) and names
only the nodes that still sent nothing.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.takeover_quiet import UNKNOWN_GRACE_S
from tests.core.test_processor_hardening import frame

T0 = time.time() - 600
STEP = 5.0
LOGGER = "fleetwatch.pipeline.ownership"


def owner(tmp_path: Path) -> tuple[Ownership, list[list[str]], list[float]]:
    store = SqliteStore(tmp_path / "s.db")
    store.write([frame(n, T0 - STEP) for n in ("a", "b", "c")])  # the store knows three
    told: list[list[str]] = []
    o = Ownership(store, AlertBook(), on_expected=[lambda e: told.append([x[2] for x in e])])
    o.locate = lambda key: ("t", 0)
    now = [1000.0]
    o.monotonic = lambda: now[0]
    o.assigned([("t", 0)])
    return o, told, now


def quiet_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "sent nothing yet" in r.getMessage()]


def test_nodes_that_send_within_the_grace_are_never_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    o, told, _ = owner(tmp_path)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        o.build([frame("a", T0), frame("a", T0 + STEP)], None)
        assert told == [["b", "c"]]          # the silence detector is told at once
        assert quiet_lines(caplog) == []     # the log is not: nothing polled from b, c yet
        o.build([frame("b", T0 + STEP)], None)
        assert quiet_lines(caplog) == []
        o.build([frame("a", T0 + 3 * STEP)], None)  # two intervals later on the frames' clock
    assert quiet_lines(caplog) == [
        "1 node(s) of the partitions taken over have sent nothing yet: c1/c"]


def test_with_no_more_frames_the_line_comes_after_the_grace_on_the_clock(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    o, told, now = owner(tmp_path)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        o.build([frame("a", T0)], None)      # one frame, then nothing more polled
        assert told == [["b", "c"]] and quiet_lines(caplog) == []
        now[0] += UNKNOWN_GRACE_S - 1
        o.build([], None)
        assert quiet_lines(caplog) == []
        now[0] += 2
        o.build([], None)
        o.build([], None)                    # said once
    assert quiet_lines(caplog) == [
        "2 node(s) of the partitions taken over have sent nothing yet: c1/b, c1/c"]
