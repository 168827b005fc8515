"""GPU-hours under fault alerts, attributed to the jobs and users that held those GPUs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.fault_hours import ANY, by_user, fault_hours
from fleetwatch.pipeline.store.base import Alert, Event
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore

H = 3600.0


def _alert(rule: str, node: str, device: str, fired: float, resolved: float | None,
           severity: str = "critical", rack: str = "r1") -> Alert:
    state = "resolved" if resolved is not None else "firing"
    return Alert(f"{rule}/c/{node}/{device}/{fired}", rule, severity, "c", rack, node, device,
                 state, fired - 60, resolved or fired, 1.0, "",  # type: ignore[arg-type]
                 fired_ts=fired, resolved_ts=resolved)


JOBS = [("n1", "gpu0", "j1", 0.0, 4 * H), ("n1", "gpu1", "j1", 0.0, 4 * H),
        ("n2", "gpu0", "j2", 2 * H, None)]
OWNERS = {"j1": ("ana", "llm"), "j2": ("bo", "vision")}
RACKS = {"n1": "r1", "n2": "r2"}


def test_each_rule_and_each_gpu_second_once_in_all() -> None:
    alerts = [_alert("gpu_temp_high", "n1", "gpu0", H, 2 * H, "warning"),
              _alert("gpu_temp_critical", "n1", "gpu0", 1.5 * H, 2 * H),   # inside the first
              _alert("job_hung", "n1", "host", 3 * H, None),               # both GPUs, 1 h
              _alert("rack_cooling", "", "rack:r2", H, 3 * H, rack="r2"),  # j2 from 2 h
              _alert("gpu_straggler", "n2", "gpu0", 2 * H, 3 * H, "info")]  # not a fault
    lines = fault_hours(alerts, JOBS, OWNERS, RACKS, 0.0, 5 * H)
    got = {(f.job, f.rule): (round(f.gpu_hours, 3), f.gpus) for f in lines}
    assert got == {("j1", ANY): (3.0, 2),                 # 1 h on gpu0 + 1 h each hung
                   ("j1", "gpu_temp_high"): (1.0, 1), ("j1", "gpu_temp_critical"): (0.5, 1),
                   ("j1", "job_hung"): (2.0, 2),
                   ("j2", ANY): (1.0, 1), ("j2", "rack_cooling"): (1.0, 1)}
    assert lines[0].rule == ANY and lines[0].job == "j1" and lines[0].user == "ana"
    assert by_user(lines)[:2] == [("ana", ANY, 3.0), ("bo", ANY, 1.0)]


def test_the_window_clips_and_an_open_alert_runs_to_its_end() -> None:
    alerts = [_alert("job_hung", "n1", "host", 3 * H, None)]
    (total, hung) = fault_hours(alerts, JOBS, OWNERS, RACKS, 3.5 * H, 10 * H)
    assert total.gpu_hours == hung.gpu_hours == pytest.approx(1.0)  # 0.5 h on two GPUs


def test_the_command_reads_jobs_users_and_alerts_from_the_store(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = (time.time() // H - 5) * H
    db = tmp_path / "f.db"
    s = SqliteStore(db)
    s.write_events([Event(t0, "job_start", "c", "r1", "n1", "gpu0", value="j1"),
                    Event(t0, "job_start", "c", "r1", "n1", "gpu1", value="j1"),
                    Event(t0 + 4 * H, "job_end", "c", "r1", "n1", "gpu0", value="j1"),
                    Event(t0 + 4 * H, "job_end", "c", "r1", "n1", "gpu1", value="j1")])
    s.write_energy([EnergyRow(int(t0), "c", "r1", "n1", "gpu0", "j1", "ana", "llm",
                              1.0, 0, 3600, 0, 0, 0)], [])
    s.write_alerts([_alert("job_hung", "n1", "host", t0 + 3 * H, t0 + 3.5 * H)])
    s.close()
    assert main(["timeline", "--store", str(db), "--since", "6h", "--fault-hours",
                 "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(r["by"], r.get("job"), r["user"], r["rule"], r["gpu_hours"]) for r in rows} == {
        ("job", "j1", "ana", ANY, 1.0), ("job", "j1", "ana", "job_hung", 1.0),
        ("user", None, "ana", ANY, 1.0), ("user", None, "ana", "job_hung", 1.0)}
    assert main(["timeline", "--store", str(db), "--since", "6h", "--fault-hours"]) == 0
    assert "job j1" in capsys.readouterr().out
