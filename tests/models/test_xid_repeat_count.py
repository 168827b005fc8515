"""An XID alert's repeat count ("nothing to do unless it repeats") reaches the store
promptly: the first repeat is written at once, later counts at most every
``alerts.REPEAT_REFRESH_S`` (not once a minute, not once per frame), and the last count of
a burst is written within that time after the burst, while the alert is latched."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.alerts import REFRESH_S, REPEAT_REFRESH_S, AlertBook
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore


def frame(ts: float, xid: bool) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "m", {"gpu_temp_c": 60.0}, None, "ok",
                            (13,) if xid and i == 1 else ()) for i in range(2))
    return Frame("c", "r1", "n1", ts, gpus)


# An XID 13 every 3 s, six in all (the incident's storm), then frames without one.
T0 = 1_000_000.0
STORM = [frame(T0 + 3 * k, True) for k in range(6)] + [
    frame(T0 + 15 + 3 * k, False) for k in range(1, 11)]


def written_counts() -> list[tuple[float, float]]:
    """(time, count) of each write of the XID alert, driving the lifecycle frame by frame."""
    model, book, out = XidEvents(), AlertBook(), []
    for f in STORM:
        changes = book.observe([f], model.update([f]))
        book.apply(changes)
        out += [(a.updated_ts - T0, a.evidence["count"]) for a in changes
                if a.rule == "gpu_xid_info" or a.rule.startswith("gpu_xid")]
    return out


def test_the_first_repeat_is_written_at_once_and_the_burst_end_soon_after() -> None:
    assert REPEAT_REFRESH_S < REFRESH_S
    got = written_counts()
    assert got[0] == (0.0, 1.0)
    assert (3.0, 2.0) in got                       # it repeats: written at once
    last_t, last = got[-1]
    assert last == 6.0 and last_t <= 15 + REPEAT_REFRESH_S
    assert len(got) <= 1 + 1 + (15 + REPEAT_REFRESH_S) // REPEAT_REFRESH_S  # not per frame


def test_the_store_holds_the_count_within_seconds_of_the_xids(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    processor = Processor(store, [XidEvents()])
    t0 = float(int(time.time())) - 600
    for f in STORM:
        processor.process([frame(f.ts - T0 + t0, any(g.xids for g in f.gpus))])
        if f.ts - T0 == 3.0:
            (alert,) = store.alerts()
            assert alert.evidence["count"] == 2.0   # the repeat, in the store at once
    (alert,) = store.alerts()
    assert alert.evidence["count"] == 6.0 and alert.evidence["xid_13_last_ts"] == t0 + 15
    store.close()
