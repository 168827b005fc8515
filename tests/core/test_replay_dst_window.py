"""Replay's notes on zone-less times that go back about an hour: a daylight-saving change
is suggested only where one can be (a local night hour, in a month where clocks fall back
north or south), the advice to give times in UTC is said once, and the README's own
example (NAB's machine temperature, whose hour 02:00-02:55 of 7 January 2014 is
recorded twice) says what it passed over and exits 1 unless --skip-bad accepts it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

from fleetwatch.cli import main

NAB = Path(__file__).parent.parent / "data/recorded/nab_machine_temperature_system_failure.csv"
UTC = dt.timezone.utc


def test_the_readme_example_says_the_repeated_hour_and_exits_1_unless_skip_bad(capsys):
    assert main(["replay", "--metric", "gpu_temp_c", str(NAB)]) == 1
    err = capsys.readouterr().err
    assert "daylight" not in err and "went back by about an hour" not in err
    assert "replayed in time order" not in err
    assert err.count("give them in UTC or with their offset") + err.count(
        "give times in UTC or with their offset") == 1
    assert "9 rows were passed over, not replayed" in err
    assert main(["replay", "--skip-bad", "--metric", "gpu_temp_c", str(NAB)]) == 0


def series(path: Path, zone: str, start: dt.datetime) -> Path:
    """One GPU's temperature every 5 min for 3 h, written as zone-less local times."""
    z = ZoneInfo(zone)
    lines = ["timestamp,gpu_temp_c"]
    for k in range(36):
        t = (start + dt.timedelta(minutes=5 * k)).astimezone(z)
        lines.append(f"{t.strftime('%Y-%m-%d %H:%M:%S')},{60 + k % 3}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sydneys_april_fall_back_is_called_a_daylight_saving_change(tmp_path, capsys):
    # 2026-04-05 03:00 AEDT -> 02:00 AEST (16:00 UTC on the 4th).
    path = series(tmp_path / "syd.csv", "Australia/Sydney",
                  dt.datetime(2026, 4, 4, 14, 30, tzinfo=UTC))
    main(["replay", "--skip-bad", str(path)])
    err = capsys.readouterr().err
    assert "daylight-saving change" in err
    assert "2026-04-05 02:55:00 UTC then 2026-04-05 02:00:00 UTC" in err


def test_an_hour_back_on_a_january_afternoon_is_no_daylight_saving_change(tmp_path, capsys):
    lines = ["timestamp,gpu_temp_c"]
    t0 = dt.datetime(2026, 1, 7, 14, 0)
    times = [t0 + dt.timedelta(minutes=5 * k) for k in range(24)]
    times += [t0 + dt.timedelta(minutes=60 + 5 * k) for k in range(24)]
    lines += [f"{t:%Y-%m-%d %H:%M:%S},60" for t in times]
    path = tmp_path / "jan.csv"
    path.write_text("\n".join(lines) + "\n")
    main(["replay", "--skip-bad", str(path)])
    err = capsys.readouterr().err
    assert "daylight" not in err
