"""`fleetwatch alerts` says staleness per cluster: one cluster's data that stopped an hour
ago is not hidden by another cluster of the same store that is live."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore


def _alert(cluster: str, fired: float) -> Alert:
    return Alert(f"gpu_temp_high/{cluster}/node-001/gpu1/{int(fired)}", "gpu_temp_high",
                 "warning", cluster, "r1", "node-001", "gpu1", "firing", fired - 30, fired,
                 88.0, "GPU 1 on node-001 at 88 °C", fired_ts=fired)


def _two_clusters(db: Path, west_age_s: float = 5) -> float:
    """east: data up to an hour ago, west: up to ``west_age_s`` ago; each a firing alert.
    Returns when east's data ended."""
    now = time.time()
    s = SqliteStore(db)
    gpu = GpuReading(0, "GPU-0", "NVIDIA H100 80GB HBM3", {"gpu_temp_c": 60.0})
    east_end = now - 3600
    s.write([Frame("east", "r1", "node-001", east_end - k * 60, (gpu,), HostReading())
             for k in range(5)])
    s.write([Frame("west", "r1", "node-001", now - west_age_s - k * 60, (gpu,), HostReading())
             for k in range(5)])
    s.write_alerts([_alert("east", east_end - 1800), _alert("west", now - 600)])
    s.close()
    return east_end


def test_a_cluster_chosen_is_stale_though_another_is_live(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "two.db"
    _two_clusters(db)
    assert main(["alerts", "--cluster", "east", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "no data since" in out and "(60 min ago)" in out
    assert "firing at the end of the data" in out and "firing since" not in out
    assert main(["alerts", "--cluster", "west", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "no data since" not in out and "no new data" not in out
    assert "firing since" in out


def test_with_no_cluster_chosen_the_stopped_one_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "two.db"
    east_end = _two_clusters(db)
    assert main(["alerts", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "east: no data since" in out and "west: no" not in out
    heading = {line.split()[3].split("/")[0]: line for line in out.splitlines()
               if line.startswith("FIRING")}
    assert "at the end of the data" in heading["east"]
    assert "firing since" in heading["west"]
    assert main(["alerts", "--json", "--store", str(db)]) == 0
    got = capsys.readouterr()
    recs = {r["cluster"]: r for r in map(json.loads, got.out.splitlines())}
    assert recs["east"]["data_stale"] is True
    assert recs["east"]["data_newest_ts"] == pytest.approx(east_end, abs=0.01)
    assert recs["west"]["data_stale"] is False
    assert recs["west"]["data_newest_ts"] > east_end + 3000
    assert "east: no new data" in got.err and "west:" not in got.err


def test_a_lagging_cluster_is_named_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "two.db"
    _two_clusters(db, west_age_s=150)  # west stopped 2.5 min ago: lagging, not ended
    assert main(["alerts", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "east: no data since" in out and "west: no new data for 2 min" in out


def _one_stopped_no_alert_there(db: Path, with_alert: bool) -> None:
    """east: data up to an hour ago and no alert; west: live, a firing alert or none."""
    _two_clusters(db)
    s = SqliteStore(db)
    s.write_alerts([dataclasses.replace(a, state="resolved", resolved_ts=time.time() - 60)
                    for a in s.alerts() if a.cluster == "east" or not with_alert])
    s.close()


@pytest.mark.parametrize("with_alert", [True, False])
def test_a_stopped_cluster_with_no_open_alert_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], with_alert: bool) -> None:
    """Staleness was worked out only for the clusters of open alerts: "no open alerts"
    (or west's alert alone) said nothing of east, whose data stopped an hour ago."""
    db = tmp_path / "two.db"
    _one_stopped_no_alert_there(db, with_alert)
    assert main(["alerts", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    if not with_alert:
        assert out.startswith(f"no open alerts in {db}\n")
    assert "east: no new data for 60 min" in out and "west:" not in out
    assert ("FIRING" in out) == with_alert and "east/" not in out
    assert main(["alerts", "--json", "--store", str(db)]) == 0
    got = capsys.readouterr()
    assert [json.loads(x)["cluster"] for x in got.out.splitlines()] == (
        ["west"] if with_alert else [])
    assert "WARNING: east: no new data for 60 min" in got.err and "west:" not in got.err
    assert main(["alerts", "--cluster", "west", "--store", str(db)]) == 0
    assert "east" not in capsys.readouterr().out


def test_a_configuration_that_names_its_clusters_hears_only_of_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A store shared with another deployment: a cluster stopped there is not this one's
    news where the configuration names this deployment's clusters (here west alone)."""
    db = tmp_path / "two.db"
    _one_stopped_no_alert_there(db, False)
    monkeypatch.setenv("FLEETWATCH_ALERTS_CLUSTERS", "west")
    assert main(["alerts", "--store", str(db)]) == 0
    assert capsys.readouterr().out == f"no open alerts in {db}\n"
    monkeypatch.setenv("FLEETWATCH_ALERTS_CLUSTERS", "west,east")
    assert main(["alerts", "--store", str(db)]) == 0
    assert "east: no new data for 60 min" in capsys.readouterr().out
