"""A resolved alert keeps what it fired with: the DBE alert's "GPU 1 on node-003 (job
4000004): new double-bit ECC errors" and "Drain the node..." were overwritten by the reset
text that ended it, so the job and the action the on-call was given were lost from the
record (postmortem D10). How it ended is its own field, ``resolution``."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from fleetwatch.alert_view import lines, record
from fleetwatch.models import Finding
from fleetwatch.models.gpu_errors import GpuErrors
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame
from tests.models.helpers import busy, node

FIRING = "GPU 0 on n1 (job 4000004): new double-bit (uncorrectable) ECC errors"
DRAIN = "Drain the node, reset the GPU and run diagnostics"


def dbe(ts: float, ends: bool = False) -> Finding:
    if ends:
        return Finding("gpu_ecc_dbe", "c1", "r1", "n1", 0, ts, 1.0, "GPU 0 on n1 was reset",
                       "critical", 0.0, 0.0, {}, "Nothing more for these errors", ends=True)
    return Finding("gpu_ecc_dbe", "c1", "r1", "n1", 0, ts, 1.0, FIRING, "critical", 0.0,
                   0.0, {}, DRAIN, jobs=("4000004",))


def step(book: AlertBook, ts: float, *found: Finding) -> list:
    changes = book.observe([frame("n1", ts)], list(found))
    book.apply(changes)
    return changes


def test_the_firing_message_and_action_stay_and_the_ending_is_its_own_field(
        tmp_path: Path) -> None:
    book = AlertBook(requirements={"gpu_ecc_dbe": ()})
    step(book, 100.0, dbe(100.0))
    step(book, 110.0, dbe(110.0, ends=True))
    (resolved,) = step(book, 120.0)
    assert (resolved.state, resolved.message, resolved.action, resolved.jobs) == (
        "resolved", FIRING, DRAIN, ("4000004",))
    assert resolved.resolution == ("GPU 0 on n1 was reset. Nothing more for these errors")
    # Stored, read back, shown by `fleetwatch alerts --since` and its JSON.
    store = SqliteStore(tmp_path / "s.db")
    store.write_alerts([resolved])
    (back,) = store.alerts(("resolved",))
    assert (back.message, back.action, back.resolution) == (
        FIRING, DRAIN, resolved.resolution)
    text = "\n".join(lines([back], [], {}, 200.0))
    assert FIRING in text and f"action: {DRAIN}" in text
    assert f"resolution: {resolved.resolution}" in text
    assert record(back, [], [], {})["resolution"] == resolved.resolution


def test_a_store_of_an_older_release_is_read_with_no_resolution(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    book = AlertBook(requirements={"gpu_ecc_dbe": ()})
    (opened,) = step(book, 100.0, dbe(100.0))
    store.write_alerts([dataclasses.replace(opened, state="resolved", resolved_ts=120.0)])
    store.close()
    with sqlite3.connect(path) as conn:  # the table as an older release made it
        conn.execute("ALTER TABLE alert_states DROP COLUMN resolution")
    (back,) = SqliteStore(path).alerts(("resolved",))
    assert (back.message, back.resolution) == (FIRING, "")


def test_the_dbe_reset_finding_says_it_ends_the_alert() -> None:
    d = GpuErrors()
    d.update([node(0, [busy(60, gpu_ecc_dbe_volatile_total=0.0,
                            gpu_ecc_dbe_aggregate_total=3.0)])])
    (fired,) = d.update([node(10, [busy(60, gpu_ecc_dbe_volatile_total=1.0,
                                        gpu_ecc_dbe_aggregate_total=4.0)])])
    (reset,) = d.update([node(30, [busy(60, gpu_ecc_dbe_volatile_total=0.0,
                                        gpu_ecc_dbe_aggregate_total=4.0)])])
    assert (fired.ends, reset.ends) == (False, True)


def test_the_dashboards_alert_table_shows_the_resolution_beside_the_firing_text() -> None:
    from fleetwatch.dashboards import alert_tables
    from tests.dashboards.test_alert_table import rows
    from tests.dashboards.test_data import text_of

    book = AlertBook(requirements={"gpu_ecc_dbe": ()})
    step(book, 100.0, dbe(100.0))
    step(book, 110.0, dbe(110.0, ends=True))
    (resolved,) = step(book, 120.0)
    (row,) = rows(alert_tables.alert_table([resolved], 200.0, "t"))
    shown = text_of(row)
    assert FIRING in shown and DRAIN in shown
    assert f"resolution: {resolved.resolution}" in shown
