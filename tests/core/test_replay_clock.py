"""Replay of the data-quality tester's notations of one half hour across the end of New
York's daylight-saving time (2026-11-01 06:00 UTC): local times without a zone are said to
have been read as UTC, and the hour they go back is named; rows passed over (a shuffled
file) make the exit status 1, as bad rows do, unless --skip-bad accepts them."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from zoneinfo import ZoneInfo

from fleetwatch.cli import main

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 1, 5, 45, tzinfo=UTC)  # 01:45 EDT
NY = ZoneInfo("America/New_York")


def rows() -> list[tuple[dt.datetime, str, int, str, float]]:
    """2 nodes x 2 GPUs, 5 s samples for 30 min; n1 GPU 1 at 95 C from minute 10 to 15."""
    out = []
    for k in range(360):
        t = T0 + dt.timedelta(seconds=5 * k)
        for node in ("n1", "n2"):
            for g in (0, 1):
                hot = node == "n1" and g == 1 and 120 <= k < 180
                out.append((t, node, g, "gpu_temp_c", 95.0 if hot else 60.0 + g))
                out.append((t, node, g, "gpu_power_w", 300.0))
    return out


def write(path: Path, fmt, rs=None) -> Path:
    lines = ["timestamp,node,gpu,metric,value"]
    lines += [f"{fmt(t)},{n},{g},{m},{v}" for t, n, g, m, v in (rs or rows())]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_local_times_without_a_zone_across_the_dst_change_are_said(tmp_path, capsys):
    path = write(tmp_path / "ny_local.csv",
                 lambda t: t.astimezone(NY).strftime("%Y-%m-%d %H:%M:%S"))
    main(["replay", str(path)])
    err = capsys.readouterr().err
    assert "times have no zone and were read as UTC, e.g. " + str(path) + " line 2: " \
        "2026-11-01 01:45:00" in err
    back = next(line for line in err.splitlines() if "went back by about an hour" in line)
    assert "the times of 8 series went back" in back
    assert "daylight-saving change" in back
    assert f"{path} line 1442: 2026-11-01 01:59:55 UTC then 2026-11-01 01:00:00 UTC" in back


def test_utc_times_say_nothing_of_zones_or_steps(tmp_path, capsys):
    path = write(tmp_path / "utc.csv", lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert main(["replay", str(path)]) == 0
    err = capsys.readouterr().err
    assert "no zone" not in err and "went back" not in err


def test_zone_less_utc_times_are_said_once(tmp_path, capsys):
    path = write(tmp_path / "naive_utc.csv", lambda t: t.strftime("%Y-%m-%d %H:%M:%S"))
    assert main(["replay", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.count("have no zone and were read as UTC") == 1 and "went back" not in err


def test_rows_passed_over_exit_1_unless_skip_bad(tmp_path, capsys):
    shuffled = rows()
    random.Random(1).shuffle(shuffled)
    path = write(tmp_path / "shuffled.csv", lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ"),
                 shuffled)
    assert main(["replay", str(path)]) == 1
    err = capsys.readouterr().err
    assert "were passed over, not replayed" in err and "--skip-bad" in err
    assert main(["replay", "--skip-bad", str(path)]) == 0
