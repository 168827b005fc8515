"""A replayed crash (XID 79, then the GPU lost) is stored and listed naming the job that held
the GPU, though the recording's rows of the lost GPU name no job any more."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = 1_795_750_000


def recording() -> str:
    rows = ["timestamp,node,gpu,metric,value,job"]
    for i in range(80):
        ts = T0 + 15 * i
        rows.append(f"{ts},node-004,0,gpu_temp_c,50,4000005")
        if i <= 20:  # GPU 2 falls off the bus at +300 s and reports nothing after
            rows.append(f"{ts},node-004,2,gpu_temp_c,49,4000005")
        if i == 20:
            rows.append(f"{ts},node-004,2,xid,79,4000005")
    return "\n".join(rows) + "\n"


def test_a_replayed_xid_79_and_lost_gpu_name_the_job_in_store_and_cli(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv, db = tmp_path / "crash.csv", tmp_path / "crash.db"
    csv.write_text(recording())
    assert main(["replay", "--store", str(db), str(csv)]) == 0
    stored = SqliteStore(db, read_only=True)
    alerts = {a.rule: a for a in stored.alerts(("pending", "firing", "resolved"))}
    assert alerts["gpu_xid_critical"].message.startswith(
        "GPU 2 on node-004 (job 4000005): XID 79 ")
    assert alerts["gpu_lost"].message.startswith("GPU 2 on node-004 (job 4000005) is lost")
    assert alerts["gpu_lost"].device == "gpu2"  # one alert per slot, as before
    capsys.readouterr()
    assert main(["alerts", "--store", str(db), "--since", "3650d"]) == 0
    listed = capsys.readouterr().out
    assert "GPU 2 on node-004 (job 4000005): XID 79" in listed
    assert "GPU 2 on node-004 (job 4000005) is lost" in listed
