from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.recorded import frames, read_files
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
    # Cool for 1800 s after +105 s: detectors.thermal_keep_firing_s, so both alerts resolve.
    assert main(["replay", str(write(tmp_path / "a.csv", hot_series(cool_s=1800)))]) == 0
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
                 str(write(tmp_path / "a.csv", hot_series(cool_s=1800)))]) == 0
    alerts = {a.rule: a for a in SqliteStore(db, read_only=True).alerts(("resolved",))}
    assert set(alerts) == {"gpu_temp_high", "gpu_temp_critical"}
    high = alerts["gpu_temp_high"]  # 88 °C at +15 s, past its 30 s for-duration at +45 s
    # Cool from +105 s; resolved once cool for detectors.thermal_keep_firing_s (1800 s).
    assert (high.cluster, high.fired_ts, high.resolved_ts) == (
        "acme", 1_700_000_045, 1_700_001_905)


# -- a replay into a store: the lock `up` and `simulate` take ---------------------------------

def test_replay_refuses_a_store_another_fleetwatch_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Replayed alerts in a live store are never resolved by the live stream, and stayed
    firing there; `replay --store` takes the store's lock as `up` and `simulate` do."""
    import os

    from fleetwatch.pipeline.store.sqlite import SqliteStore
    from fleetwatch.storelock import StoreLock

    db = tmp_path / "live.db"
    SqliteStore(db).close()
    data = write(tmp_path / "a.csv", hot_series(cool_s=300))
    with StoreLock(db):                          # `fleetwatch up` holds it
        assert main(["replay", "--store", str(db), str(data)]) == 1
        out, err = capsys.readouterr()
        assert f"in use by another fleetwatch (pid {os.getpid()})" in err and out == ""
    assert SqliteStore(db, read_only=True).alerts(("pending", "firing", "resolved")) == []
    assert main(["replay", "--store", str(db), str(data)]) == 0   # free again
    assert (tmp_path / "live.db.lock").read_text() == ""         # and released after
    capsys.readouterr()
    assert main(["replay", "--store", str(tmp_path / "no" / "x.db"), str(data)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


# -- nothing replayed ------------------------------------------------------------------------

@pytest.mark.parametrize("text, args, why", [
    (HEADER, [], "the files hold no sample"),
    (HEADER + "x,n1,0,gpu_temp_c,1\n1700000000,n1,0,gpu_temp_c,hot\n", ["--skip-bad"],
     "every row was bad (2 skipped)"),
    ("timestamp,value\n", ["--metric", "gpu_temp_c"], "the files hold no sample"),
])
def test_nothing_replayed_is_a_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       text: str, args: list[str], why: str) -> None:
    assert main(["replay", *args, str(write(tmp_path / "x.csv", text))]) == 1
    assert f"fleetwatch replay: nothing replayed: {why}" in capsys.readouterr().err


# -- XID codes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("code", ["-5", "0", "79.9", "65536", "1e9", "nan", "inf"])
def test_an_impossible_xid_is_a_bad_row(tmp_path: Path, code: str) -> None:
    text = HEADER + f"1700000000,n1,0,gpu_temp_c,60\n1700000000,n1,0,xid,{code}\n"
    path = write(tmp_path / "x.csv", text)
    with pytest.raises(ReplayError, match=rf"x.csv line 3: column value: XID '{code}' is not a "
                                          r"whole number 1..65535"):
        read_files([path])
    reading = read_files([path], skip_bad=True)
    assert reading.bad_rows == 1 and not reading.xids


def test_an_xid_written_as_a_float_is_its_code(tmp_path: Path) -> None:
    text = HEADER + "1700000000,n1,0,xid,79.0\n1700000000,n1,0,xid,65535\n"
    (batch,) = frames(read_files([write(tmp_path / "x.csv", text)]))
    assert batch[0].gpus[0].xids == (79, 65535)


@pytest.mark.parametrize("cell", ["-5", "79.9", "65536"])
def test_an_impossible_xid_in_acmetrace_names_line_and_column(tmp_path: Path, cell: str) -> None:
    path = write(tmp_path / "XID_ERRORS.csv", "Time,10.0.0.1-0,10.0.0.1-1\n"
                 f"1700000000,0,0\n1700000015,0,{cell}\n")
    with pytest.raises(ReplayError, match=rf"line 3, column 10.0.0.1-1: XID '{cell}' is not"):
        read_files([path])
    assert read_files([path], skip_bad=True).bad_rows == 1


# -- the long layout: its columns named, its header in any case, an empty value absent ----------

@pytest.mark.parametrize("gpu", ["3.0", "x", "-1", "1024"])
def test_a_bad_gpu_cell_names_its_column(tmp_path: Path, gpu: str) -> None:
    with pytest.raises(ReplayError, match=rf"line 2: column gpu: '{gpu}' is not a GPU index"):
        read_files([write(tmp_path / "x.csv", HEADER + f"1700000000,n1,{gpu},gpu_temp_c,60\n")])


def test_the_long_header_is_read_in_any_case(tmp_path: Path) -> None:
    rows = "1700000000,n1,0,gpu_temp_c,60,r7\n"
    upper = frames(read_files([write(tmp_path / "a.csv", "Timestamp,Node,GPU,Metric,Value,RACK\n"
                                     + rows)]))
    lower = frames(read_files([write(tmp_path / "b.csv", HEADER.strip() + ",rack\n" + rows)]))
    assert upper == lower and upper[0][0].rack == "r7"


def test_an_empty_value_is_no_sample_in_every_layout(tmp_path: Path) -> None:
    """As the one-series and AcmeTrace layouts read an empty cell: absent, never 0, and no
    error; the summary counts such rows."""
    text = HEADER + ("1700000000,n1,0,gpu_temp_c,60\n1700000000,n1,0,gpu_power_w,\n"
                     "1700000015,n1,0,gpu_temp_c, \n1700000015,n1,0,xid,\n")
    reading = read_files([write(tmp_path / "x.csv", text)])
    (batch,) = frames(reading)
    assert batch[0].gpus[0].metrics == {"gpu_temp_c": 60} and reading.bad_rows == 0
    assert "x.csv: 3 rows with an empty value, read as no sample (absent, not 0)" in reading.notes
    series = read_files([write(tmp_path / "s.csv", "timestamp,gpu_temp_c\n1700000000,\n")])
    assert "s.csv: 1 row with an empty value, read as no sample (absent, not 0)" in series.notes


def test_a_replays_store_holds_the_last_count_of_a_repeated_xid(tmp_path: Path) -> None:
    """XID 48 every second for 10 min: the stored alert counts all 600 and ends at the last
    one, not at the last update written before (every 60 s)."""
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    rows = "".join(f"{1_700_000_000 + k},n1,0,gpu_temp_c,60\n{1_700_000_000 + k},n1,0,xid,48\n"
                   for k in range(600))
    db = tmp_path / "replay.db"
    assert main(["replay", "--store", str(db),
                 str(write(tmp_path / "x.csv", HEADER + rows))]) == 0
    (alert,) = SqliteStore(db, read_only=True).alerts()
    assert alert.evidence["xid_48_count"] == 600 and alert.updated_ts == 1_700_000_599
