"""``silence add --tz`` (``fleetwatch.local_time``, shared with ``timeline --since``): a
local time that does not exist (the hour skipped when summer time starts) or happens twice
(the hour repeated when it ends) is refused naming it, not read silently as another time;
and the length limit is said in days, as it is checked."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from fleetwatch.local_time import LocalTimeError, local_instant
from fleetwatch.silencing import MAX_LENGTH_S, SilenceError, window

BERLIN = ZoneInfo("Europe/Berlin")
NOW = 1_800_000_000.0


def test_a_local_time_skipped_by_summer_time_is_refused_naming_it() -> None:
    with pytest.raises(LocalTimeError, match=r"--start 2027-03-28 02:30 does not exist in "
                                           r"Europe/Berlin.*01:59.*03:00"):
        local_instant(datetime(2027, 3, 28, 2, 30), BERLIN, "--start")


def test_a_local_time_that_happens_twice_is_refused_naming_both_readings() -> None:
    with pytest.raises(LocalTimeError) as got:
        local_instant(datetime(2027, 10, 31, 2, 30), BERLIN, "--start")
    text = str(got.value)
    assert "happens twice in Europe/Berlin" in text
    assert "2027-10-31T02:30+02:00 (00:30 UTC)" in text
    assert "2027-10-31T02:30+01:00 (01:30 UTC)" in text


def test_an_ordinary_local_time_is_read_in_the_zone() -> None:
    at = local_instant(datetime(2027, 3, 28, 4, 0), BERLIN, "--until")
    assert at == datetime.fromisoformat("2027-03-28T02:00:00+00:00").timestamp()
    winter = local_instant(datetime(2027, 1, 5, 2, 0), BERLIN, "--start")
    assert winter == datetime.fromisoformat("2027-01-05T01:00:00+00:00").timestamp()


def test_the_length_limit_is_said_in_days_as_checked() -> None:
    assert MAX_LENGTH_S == 366 * 86400.0
    assert window(NOW, None, 366 * 86400.0, NOW) == (NOW, 366 * 86400.0)
    with pytest.raises(SilenceError, match=r"silence duration 367 d: must be above 0 and "
                                           r"at most 366 d"):
        window(NOW, None, 367 * 86400.0, NOW)
    with pytest.raises(SilenceError, match=r"silence duration 0 s: must be above 0"):
        window(NOW, None, 0.0, NOW)


def _next_change(spring: bool) -> datetime:
    """The next day Berlin's clocks go forward (``spring``) or back, within a year."""
    from datetime import timedelta
    day = datetime.fromtimestamp(NOW_REAL, BERLIN).replace(hour=0, minute=0, second=0,
                                                           microsecond=0, tzinfo=None)
    for _ in range(400):
        day += timedelta(days=1)
        before = day.replace(hour=0, tzinfo=BERLIN).utcoffset()
        after = day.replace(hour=12, tzinfo=BERLIN).utcoffset()
        if before != after and (after > before) == spring:  # type: ignore[operator]
            return day
    raise AssertionError("no summer-time change in Europe/Berlin within a year")


NOW_REAL = __import__("time").time()


@pytest.mark.parametrize(("spring", "said"), [(True, "does not exist in Europe/Berlin"),
                                              (False, "happens twice in Europe/Berlin")])
def test_cli_refuses_a_dst_local_time_and_stores_nothing(
        tmp_path: object, capsys: pytest.CaptureFixture[str], spring: bool, said: str) -> None:
    from pathlib import Path

    from fleetwatch.cli import main
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    db = str(Path(str(tmp_path)) / "fleet.db")
    SqliteStore(db).close()
    day = _next_change(spring).strftime("%Y-%m-%d")
    assert main(["silence", "--store", db, "add", "node=n1", "--start", f"{day} 02:30",
                 "--until", f"{day} 04:00", "--tz", "Europe/Berlin"]) == 2
    err = capsys.readouterr().err
    assert f"--start {day} 02:30 {said}" in err
    assert SqliteStore(db).silences() == []
