"""Replay of one series (``timestamp,value``, NAB's layout and most single-sensor exports):
what it measures named by ``--metric`` or by its header, whose it is, and its mistakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.recorded import Series, frames, read_files
from fleetwatch.replay import ReplayError
from tests.core.test_replay import HEADER, hot_series, run, write


def series_text(temps: list[int], t0: int = 1_700_000_000, column: str = "value") -> str:
    return f"timestamp,{column}\n" + "".join(f"{t0 + 15 * i},{t}\n" for i, t in enumerate(temps))


def test_one_series_with_its_metric_named_replays_like_the_long_layout(tmp_path: Path) -> None:
    temps = [70, 88, 90, 91, 92, 93, 94, 60]
    path = write(tmp_path / "rack7-n3.csv", series_text(temps))
    changes, summary = run([path], series=Series("gpu_temp_c"))
    long_text = hot_series().replace(",n1,", ",rack7-n3,")
    long_changes, _ = run([write(tmp_path / "long.csv", long_text)])
    assert changes == long_changes and [c["state"] for c in changes] == [
        "pending", "firing", "resolved"]
    assert changes[1]["labels"]["node"] == "rack7-n3"      # the file's name, as nothing said
    assert any("one series of gpu_temp_c (8 samples), read as rack7-n3 GPU 0" in n
               for n in summary.notes)


def test_one_series_headed_by_its_metric_needs_no_option(tmp_path: Path) -> None:
    text = series_text([30000], column="DCGM_FI_DEV_FB_USED").replace("timestamp", "Time")
    path = write(tmp_path / "s.csv", text)
    first = frames(read_files([path], series=Series(node="n9", gpu=5)))[0]
    g = first[0].gpus[0]
    assert first[0].node == "n9" and g.index == 5
    assert g.metrics == {"gpu_fb_used_bytes": 30000 * 2**20}   # DCGM's MiB in our bytes
    text = "ts,host_cpu_util_pct\n1700000015,\n1700000000,7\n"    # unsorted; a gap, not a 0
    host = frames(read_files([write(tmp_path / "h.csv", text)]))
    assert len(host) == 1 and host[0][0].gpus == ()
    assert host[0][0].host.metrics == {"host_cpu_util_pct": 7}


@pytest.mark.parametrize("text, series, why", [
    (series_text([70]), None, r"does not say what it measures; name the metric with --metric"),
    (series_text([70]), Series("gpu_tmp_c"), r"unknown metric 'gpu_tmp_c'"),
    (series_text([70], column="gpu_temp_c"), Series("gpu_power_w"),
     r"the header says 'gpu_temp_c' and --metric says 'gpu_power_w'"),
    (series_text([400]), Series("gpu_temp_c"), r"line 2: gpu_temp_c = 400 is outside"),
    (HEADER + "1700000000,n1,0,gpu_temp_c,60\n", Series("gpu_temp_c"),
     r"--metric, --node and --gpu are for one-series files"),
])
def test_one_series_mistakes_are_named(tmp_path: Path, text: str, series: Series | None,
                                       why: str) -> None:
    with pytest.raises(ReplayError, match=why):
        read_files([write(tmp_path / "x.csv", text)], series=series)


def test_the_cli_takes_a_one_series_file_and_says_what_to_add(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "machine.csv", series_text([70, 96, 97, 98, 99, 99, 99, 99, 99]))
    assert main(["replay", str(path)]) != 0
    assert "--metric gpu_temp_c" in capsys.readouterr().err
    assert main(["replay", "--metric", "gpu_temp_c", "--node", "m1", str(path)]) == 0
    out, err = capsys.readouterr()
    fired = [json.loads(line) for line in out.splitlines()]
    assert any(c["state"] == "firing" and c["labels"]["node"] == "m1" for c in fired)
    assert "one series of gpu_temp_c (9 samples), read as m1 GPU 0" in err
