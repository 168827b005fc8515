"""``timeline --since/--until`` in ``--tz``: a local time the zone skips (summer time
starting) or has twice (summer time ending) is refused naming it and what to write, as
``silence add --tz`` refuses it (one parser: ``fleetwatch.local_time``), not read silently
as another hour."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from fleetwatch.cli import main
from fleetwatch.cli_timeline import when
from fleetwatch.pipeline.store.sqlite import SqliteStore

BERLIN = ZoneInfo("Europe/Berlin")
NOW = 1_800_000_000.0


def test_when_refuses_a_skipped_local_time_naming_it_and_the_gap() -> None:
    with pytest.raises(ValueError, match=r"--since 2026-03-29 02:30 does not exist in "
                                         r"Europe/Berlin.*01:59.*03:00.*offset"):
        when("2026-03-29 02:30", NOW, BERLIN, "--since")


def test_when_refuses_a_local_time_that_happens_twice_with_both_readings() -> None:
    with pytest.raises(ValueError) as got:
        when("2026-10-25 02:30", NOW, BERLIN, "--until")
    text = str(got.value)
    assert "--until 2026-10-25 02:30 happens twice in Europe/Berlin" in text
    assert "2026-10-25T02:30+02:00 (00:30 UTC)" in text
    assert "2026-10-25T02:30+01:00 (01:30 UTC)" in text


def test_when_reads_ordinary_times_offsets_and_durations_as_before() -> None:
    assert when("2026-10-25 04:00", NOW, BERLIN, "--since") == datetime.fromisoformat(
        "2026-10-25T03:00:00+00:00").timestamp()
    # with its offset, the fold is no question
    assert when("2026-10-25T02:30:00+01:00", NOW, BERLIN, "--since") == datetime.fromisoformat(
        "2026-10-25T01:30:00+00:00").timestamp()
    assert when("2h", NOW, BERLIN, "--since") == NOW - 7200
    with pytest.raises(ValueError, match="neither a duration"):
        when("yesterday", NOW, BERLIN, "--since")


@pytest.mark.parametrize(("argv", "said"), [
    (["--since", "2026-03-29 02:30", "--until", "2026-03-29 05:00"],
     "--since 2026-03-29 02:30 does not exist in Europe/Berlin"),
    (["--since", "2026-10-25 01:00", "--until", "2026-10-25 02:30"],
     "--until 2026-10-25 02:30 happens twice in Europe/Berlin")])
def test_cli_timeline_refuses_a_dst_local_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    db = str(tmp_path / "fleet.db")
    SqliteStore(db).close()
    assert main(["timeline", "--store", db, *argv, "--tz", "Europe/Berlin"]) == 2
    captured = capsys.readouterr()
    assert said in captured.err and captured.out == ""
