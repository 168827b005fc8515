"""`fleetwatch alerts` on a narrow terminal and in a storm: lines fit the terminal's width,
the id `ack` needs is at the start of a line of its own, and a line per rule sums the storm
up before the alerts. Piped, the previous release's lines, which scripts parse."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
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
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # capsys's stand-in terminal
    assert main(["alerts", "--store", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(out) if line.startswith("FIRING"))
    assert any(line.startswith("16 node_silent (critical) firing") for line in out[:first])
    assert all(len(line) <= 50 for line in out if not line.startswith("    id ")), out
    assert sum(line.startswith("    id node_silent/sim/") for line in out) == 16
    assert main(["alerts", "--short", "--store", str(db)]) == 0
    short = capsys.readouterr().out.splitlines()
    assert len(short) < len(out) / 2 and sum("    id " in line for line in short) == 16


def test_piped_lines_are_the_previous_releases() -> None:
    """The id ends the heading line, nothing is wrapped, whatever width is asked."""
    hot = alert("gpu_hot_vs_peers_critical", "firing", "critical", NOW - 600, fired=NOW - 570)
    text = lines([hot], [], {}, NOW, width=50, piped=True)
    assert text[0] == ("FIRING   critical gpu_hot_vs_peers_critical  c1/r2/node-007/gpu3  "
                       "firing since 2027-01-15 07:50:30 (9 min; pending from 07:50:00)  "
                       f"id {hot.id}")
    assert not any(line.startswith("    id ") for line in text)
    assert "    evidence: peer_median_c=66.5, temp_c=81" in text
    assert lines([hot], [], {}, NOW, short=True, piped=True) == text[:1]


def _storm_store(tmp_path: Path) -> Path:
    db = tmp_path / "f.db"
    store = SqliteStore(db)
    store.write_alerts([_silent(i) for i in range(16, 20)])
    store.close()
    return db


def test_piped_output_keeps_the_old_format_even_with_columns_exported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    db = _storm_store(tmp_path)
    monkeypatch.setenv("COLUMNS", "50")  # exported by shells, watch, CI: not a terminal
    assert main(["alerts", "--store", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("4 firing, 0 pending alerts in ")
    heads = [line for line in out[1:] if not line.startswith("    ")]
    assert [h.split()[-1] for h in heads] == [f"node_silent/sim/node-{i:03d}/host/1"
                                              for i in range(16, 20)]
    assert sum("node_silent" in line for line in out) == 4  # `grep -c` counts alerts
    assert any(len(line) > 50 for line in out)


def _run(db: Path, tty: bool) -> str:
    """`fleetwatch alerts` in a child process, its stdout a pty or a pipe."""
    env = {**os.environ, "COLUMNS": "60"}
    cmd = [sys.executable, "-m", "fleetwatch", "alerts", "--store", str(db)]
    if not tty:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True,
                              timeout=60).stdout
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(cmd, env=env, stdout=child_fd, stderr=subprocess.DEVNULL)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_terminal_gets_the_new_layout_and_a_pipe_the_old(tmp_path: Path) -> None:
    db = _storm_store(tmp_path)
    piped = _run(db, tty=False).splitlines()
    ids = [line.split()[-1] for line in piped[1:] if line.startswith("FIRING")]
    assert ids == [f"node_silent/sim/node-{i:03d}/host/1" for i in range(16, 20)]
    assert not any(line.startswith("4 node_silent") for line in piped)
    shown = _run(db, tty=True).splitlines()
    assert any(line.startswith("4 node_silent (critical) firing on 4 nodes") for line in shown)
    assert sum(line.startswith("    id node_silent/sim/") for line in shown) == 4
    assert all(len(line) <= 60 for line in shown if not line.startswith("    id ")), shown
