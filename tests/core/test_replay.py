from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.recorded import Series, frames, read_files
from fleetwatch.replay import ReplayError, replay

HEADER = "timestamp,node,gpu,metric,value\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def hot_series(t0: int = 1_700_000_000, cool_s: int = 0) -> str:
    """Hot from +15 s, cool from +105 s, then ``cool_s`` more seconds of cool samples."""
    temps = [70, 88, 90, 91, 92, 93, 94, 60] + [60] * (cool_s // 15)
    rows = [f"{t0 + 15 * i},n1,0,gpu_temp_c,{t}" for i, t in enumerate(temps)]
    rows.reverse()  # unsorted on purpose
    return HEADER + "\n".join(rows) + "\n"


def run(paths: list[Path], **kw) -> tuple[list[dict], object]:
    out = io.StringIO()
    summary = replay(paths, [GpuTemperatureLimit(85, for_s=60)], out, **kw)
    return [json.loads(line) for line in out.getvalue().splitlines()], summary


def test_long_csv_unsorted_gives_pending_firing_resolved(tmp_path: Path) -> None:
    changes, summary = run([write(tmp_path / "a.csv", hot_series())])
    assert [(c["state"], c["updated_ts"]) for c in changes] == [
        ("pending", 1_700_000_015), ("firing", 1_700_000_075), ("resolved", 1_700_000_105)]
    assert changes[1]["labels"]["node"] == "n1" and changes[1]["labels"]["device"] == "gpu0"
    assert summary.frames == 8 and summary.firing == 1 and summary.transitions == 3


def test_iso_times_and_a_repeated_sample_keeps_the_last(tmp_path: Path) -> None:
    text = HEADER + ("2023-11-14T22:13:20Z,n1,0,gpu_temp_c,95\n"
                     "2023-11-14 22:13:20+00:00,n1,0,gpu_temp_c,60\n"   # same instant, later row
                     "2023-11-15T06:13:35+08:00,n1,0,gpu_temp_c,61\n")
    (first, second) = frames(read_files([write(tmp_path / "a.csv", text)]))
    assert first[0].ts == 1_700_000_000 and first[0].gpus[0].metrics["gpu_temp_c"] == 60
    assert second[0].ts == 1_700_000_015


def test_a_bad_row_names_file_and_line_or_is_skipped_and_counted(tmp_path: Path) -> None:
    text = hot_series().replace(",93\n", ",hot\n").replace("gpu_temp_c,70", "gpu_tmp_c,70")
    path = write(tmp_path / "bad.csv", text)
    with pytest.raises(ReplayError, match=r"bad.csv line 4: value 'hot' of gpu_temp_c is not a "
                                          r"number \(fix the row, or pass --skip-bad"):
        run([path])
    with pytest.raises(ReplayError, match=r"line 9: unknown metric 'gpu_tmp_c'"):
        run([write(tmp_path / "bad2.csv", text.replace(",hot\n", ",93\n"))])
    changes, summary = run([path], skip_bad=True)
    assert summary.bad_rows == 2 and "not a number" in " ".join(summary.bad_examples)
    assert [c["state"] for c in changes] == ["pending", "firing", "resolved"]


@pytest.mark.parametrize("row, why", [
    ("1700000000,n1,0,gpu_temp_c,400", "outside its possible range"),
    ("1700000000,n1,,gpu_temp_c,60", "must be a GPU index"),
    ("1700000000,n1,0,host_cpu_util_pct,5", "must be empty"),
    ("yesterday,n1,0,gpu_temp_c,60", "neither epoch seconds nor ISO 8601"),
    ("1e400,n1,0,gpu_temp_c,60", "not a plausible epoch time"),
    ("1700000000,n1,0,gpu_temp_c,nan", "not finite"),
    ("1700000000,n1,0,gpu_temp_c", "4 fields"),
])
def test_bad_values_are_named(tmp_path: Path, row: str, why: str) -> None:
    with pytest.raises(ReplayError, match=why):
        read_files([write(tmp_path / "x.csv", HEADER + row + "\n")])


def test_an_unknown_layout_says_which_layouts_exist(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="line 1: unknown layout.*timestamp,node,gpu"):
        read_files([write(tmp_path / "x.csv", "a,b\n1,2\n")])


def test_acmetrace_layout_per_gpu_and_per_node_columns(tmp_path: Path) -> None:
    acme = tmp_path / "seren"
    acme.mkdir()
    t0 = 1_688_169_600
    temps = [70, 88, 90, 91, 92, 93, 94, 60]
    write(acme / "GPU_TEMP.csv", "Time,10.140.1.10-0,10.140.1.10-1\n" + "".join(
        f"{t0 + 15 * i},{t},65\n" for i, t in enumerate(temps)))
    write(acme / "NODE_CPU_UTILIZATION.csv", "Time,10.140.1.10\n" + "".join(
        f"{t0 + 15 * i},0.081\n" for i in range(8)))
    # The AcmeTrace notebook's form: date-time text and ratios scaled to percent.
    write(acme / "SM_ACTIVE-2023-07.csv", "Time,10.140.1.10-0,10.140.1.10-1\n" + "".join(
        f"2023-07-01 08:{i // 4:02d}:{15 * (i % 4):02d}+08:00,45.5,\n" for i in range(8)))
    write(acme / "XID_ERRORS.csv", "Time,10.140.1.10-0,10.140.1.10-1\n"
          f"{t0},0,0\n{t0 + 15},0,79\n{t0 + 30},0,79\n")
    paths = sorted(acme.iterdir())
    batches = frames(read_files(paths))
    f = batches[0][0]
    assert f.node == "10.140.1.10" and [g.index for g in f.gpus] == [0, 1]
    assert f.host.metrics == {"host_cpu_util_pct": pytest.approx(8.1)}
    assert f.gpus[0].metrics == {"gpu_temp_c": 70, "gpu_sm_active_ratio": pytest.approx(0.455)}
    assert "gpu_sm_active_ratio" not in f.gpus[1].metrics     # empty cell: absent, not 0
    assert [b[0].gpus[1].xids for b in batches[:3]] == [(), (79,), ()]  # one event, not three
    changes, summary = run(paths)
    assert [c["state"] for c in changes] == ["pending", "firing", "resolved"]
    assert any("percent" in n for n in summary.notes)


class NeedsPower:
    name = "power"
    rules = {"power_low": ("gpu_power_w", "gpu_temp_c")}

    def update(self, frames):  # noqa: ANN001, ANN201
        return []


def test_the_summary_says_what_detectors_lacked(tmp_path: Path) -> None:
    out = io.StringIO()
    summary = replay([write(tmp_path / "a.csv", hot_series())],
                     [GpuTemperatureLimit(), NeedsPower()], out)
    assert summary.coverage == {"gpu_temp_high": 1.0, "power_low": 0.0}
    assert summary.missing == {"power_low": ["gpu_power_w"]}
    assert any("lacked gpu_power_w" in line for line in summary.lines())


def test_speed_paces_by_the_frames_own_time(tmp_path: Path) -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    run([write(tmp_path / "a.csv", hot_series())], speed=10.0, sleep=sleep,
        clock=lambda: now[0])
    assert sum(slept) == pytest.approx(105 / 10)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ReplayError, match="--speed"):
            run([tmp_path / "a.csv"], speed=bad)


def test_cli_replay_prints_json_lines_and_exits_1_on_a_bad_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Cool for 300 s after +105 s: the default alerts.keep_firing_s, so both alerts resolve.
    assert main(["replay", str(write(tmp_path / "a.csv", hot_series(cool_s=300)))]) == 0
    out, err = capsys.readouterr()
    states: dict[str, list[str]] = {}
    for line in out.splitlines():  # the default detectors: a warning and a critical rule
        change = json.loads(line)
        states.setdefault(change["rule"], []).append(change["state"])
    assert states == {"gpu_temp_high": ["pending", "firing", "resolved"],
                      "gpu_temp_critical": ["firing", "resolved"]}
    assert "gpu_temp_high: judged 100%" in err
    assert main(["replay", str(write(tmp_path / "b.csv", HEADER + "x,n1,0,gpu_temp_c,1\n"))]) == 1
    assert "b.csv line 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["replay", "--speed", "0", str(tmp_path / "a.csv")])


def test_cli_replay_can_keep_the_alerts_in_a_store(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    db = tmp_path / "replay.db"
    assert main(["replay", "--store", str(db), "--cluster", "acme",
                 str(write(tmp_path / "a.csv", hot_series(cool_s=300)))]) == 0
    alerts = {a.rule: a for a in SqliteStore(db, read_only=True).alerts(("resolved",))}
    assert set(alerts) == {"gpu_temp_high", "gpu_temp_critical"}
    high = alerts["gpu_temp_high"]  # 88 °C at +15 s, past its 30 s for-duration at +45 s
    # Cool from +105 s; resolved once cool for alerts.keep_firing_s (300 s).
    assert (high.cluster, high.fired_ts, high.resolved_ts) == (
        "acme", 1_700_000_045, 1_700_000_405)


# -- one series (timestamp,value) ---------------------------------------------------------

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
