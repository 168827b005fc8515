"""`fleetwatch alerts` on a narrow terminal and in a storm: lines fit the terminal's width,
the id `ack` needs is at the start of a line of its own, and a line per rule sums the storm
up before the alerts."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.alert_view import lines, rule_summary
from fleetwatch.cli import main
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_alerts_cli import NOW, alert


def _silent(i: int) -> Alert:
    node = f"node-{i:03d}"
    return Alert(f"node_silent/sim/{node}/host/1", "node_silent", "critical", "sim",
                 f"rack-{i // 4:02d}", node, "host", "firing", NOW - 120, NOW - 60, 70.0,
                 f"{node} has sent nothing for 70 s (it reports every 5 s)", fired_ts=NOW - 120,
                 evidence={"silent_s": 70.0, "interval_s": 5.0},
                 action="Check the node: is it up, is its agent running?")


def test_lines_fit_the_width_and_the_id_has_a_line_of_its_own() -> None:
    hot = alert("gpu_hot_vs_peers_critical", "firing", "critical", NOW - 600, fired=NOW - 570)
    text = lines([hot], [], {}, NOW, width=50)
    assert f"    id {hot.id}" in text
    assert all(len(line) <= 50 for line in text if not line.startswith("    id ")), text
    assert text[0].startswith("FIRING   critical gpu_hot_vs_peers_critical")
    # No width (a pipe): one line per field, as before, for grep.
    assert len(lines([hot], [], {}, NOW)) < len(text)


def test_a_storm_is_summed_up_per_rule() -> None:
    storm = [_silent(i) for i in range(16, 32)] + [
        alert("gpu_temp_high", "firing", "warning", NOW - 600, fired=NOW - 570)]
    said = rule_summary(storm)
    assert said[0] == ("16 node_silent (critical) firing on 16 nodes in 4 racks of sim: "
                       "node-016 … node-031")
    assert said[1].startswith("1 gpu_temp_high (warning) firing on node-007")


def test_the_cli_fits_columns_and_sums_up_first(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "f.db"
    store = SqliteStore(db)
    store.write_alerts([_silent(i) for i in range(16, 32)])
    store.close()
    monkeypatch.setenv("COLUMNS", "50")
    assert main(["alerts", "--store", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(out) if line.startswith("FIRING"))
    assert any(line.startswith("16 node_silent (critical) firing") for line in out[:first])
    assert all(len(line) <= 50 for line in out if not line.startswith("    id ")), out
    assert sum(line.startswith("    id node_silent/sim/") for line in out) == 16
    assert main(["alerts", "--short", "--store", str(db)]) == 0
    short = capsys.readouterr().out.splitlines()
    assert len(short) < len(out) / 2 and sum("    id " in line for line in short) == 16
