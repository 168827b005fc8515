"""A silence made ahead of a maintenance window (``silence add --start/--until``): the
window's checks (pure), the CLI's parsing (dates in --tz) and listing (pending ones shown
as such), and that a pending silence mutes nothing until its start."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.silence_matchers import silenced_by
from fleetwatch.pipeline.store.base import Alert, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.silencing import PAST_TOLERANCE_S, SilenceError, window

NOW = 1_800_000_000.0
# A day a month ahead, and the day before it (Asia/Kolkata: UTC+05:30, no summer time).
AHEAD = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 30 * 86400))
BEFORE = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 29 * 86400))


def test_a_window_ahead_keeps_its_start_and_end() -> None:
    assert window(NOW + 3600, NOW + 5 * 3600, None, NOW) == (NOW + 3600, 4 * 3600)
    assert window(NOW + 3600, None, 1800.0, NOW) == (NOW + 3600, 1800.0)
    assert window(None, NOW + 600, None, NOW) == (NOW, 600.0)      # --until alone: from now
    assert window(None, None, None, NOW) == (NOW, 3600.0)           # the default hour


def test_a_start_just_past_is_now_further_back_is_refused() -> None:
    assert window(NOW - PAST_TOLERANCE_S + 1, None, 600.0, NOW) == (NOW, 600.0)
    with pytest.raises(SilenceError, match=r"--start 2027-01-15 07:50:00 UTC is 10 min in "
                                           r"the past"):
        window(NOW - 600, None, 600.0, NOW)


@pytest.mark.parametrize("end", [NOW + 3600, NOW + 1800])
def test_an_end_not_after_the_start_is_refused_naming_both(end: float) -> None:
    with pytest.raises(SilenceError, match=r"--until .* is not after --start"):
        window(NOW + 3600, end, None, NOW)


def test_an_end_already_past_and_absurd_lengths_are_refused() -> None:
    with pytest.raises(SilenceError, match="is not after"):
        window(None, NOW - 60, None, NOW)
    with pytest.raises(SilenceError, match=r"at most 366 d \(a year\)"):
        window(NOW + 60, NOW + 400 * 86400, None, NOW)
    with pytest.raises(SilenceError, match="more than a year ahead"):
        window(NOW + 400 * 86400, None, 3600.0, NOW)
    with pytest.raises(SilenceError, match="either --for or --until"):
        window(NOW, NOW + 60, 60.0, NOW)


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def test_cli_adds_a_pending_silence_in_tz_and_lists_it_as_pending(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    SqliteStore(db).close()
    day = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 2 * 86400))
    assert main(["silence", "--store", db, "add", "rack=rack-02", "--start", f"{day} 02:00",
                 "--until", f"{day} 06:00", "--tz", "Europe/Berlin", "--by", "alice"]) == 0
    out, err = capsys.readouterr()
    (s,) = SqliteStore(db).silences()
    assert s.id == out.strip()
    # Berlin is UTC+1 in winter, UTC+2 in summer: 02:00 there is 00:00 or 01:00 UTC.
    assert s.start_ts in (_utc(f"{day} 00:00"), _utc(f"{day} 01:00"))
    assert s.end_ts - s.start_ts == 4 * 3600
    assert "pending: it mutes nothing until it starts in " in err
    assert "it matches no open alert now" in err
    assert main(["silence", "--store", db, "list"]) == 0
    listed = capsys.readouterr().out
    assert s.id in listed and "pending (starts in " in listed
    # Not in force now: a pending silence mutes no alert before its start.
    alert = _alert(time.time())
    assert silenced_by(alert, [s]) == ""
    later = _alert(s.start_ts + 10)
    assert silenced_by(later, [s]) == s.id


def _alert(ts: float) -> Alert:
    return Alert(id=f"node_silent/c/n1/host/{int(ts)}", rule="node_silent", severity="critical",
                 cluster="c", rack="rack-02", node="n1", device="host", state="firing",
                 started_ts=ts, updated_ts=ts, value=0.0, message="", evidence={},
                 action="")


@pytest.mark.parametrize(("argv", "said"), [
    (["--start", "tomorrow"], "--start 'tomorrow' is not a date and time"),
    (["--start", "2020-01-01 00:00"], "in the past"),
    (["--until", "2020-01-01 00:00"], "is not after"),
    (["--for", "1h", "--until", "2099-01-01"], "either --for or --until"),
    (["--start", "2099-01-01 00:00", "--tz", "Mars/Olympus"], "Mars/Olympus"),
    (["--start", f"{AHEAD} 06:00", "--until", f"{AHEAD} 02:00", "--tz", "Asia/Kolkata"],
     f"--until {AHEAD} 02:00:00 Asia/Kolkata ({BEFORE} 20:30:00 UTC) is not after "
     f"--start {AHEAD} 06:00:00 Asia/Kolkata ({AHEAD} 00:30:00 UTC)"),
])
def test_cli_refusals_name_the_value(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     argv: list[str], said: str) -> None:
    db = str(tmp_path / "fleet.db")
    SqliteStore(db).close()
    assert main(["silence", "--store", db, "add", "node=n1", *argv]) == 2
    assert said in capsys.readouterr().err
    assert SqliteStore(db).silences() == []


def test_help_says_the_zone_rule_and_the_reload_setting(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["silence", "add", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "without an offset is in --tz (UTC by default)" in text
    with pytest.raises(SystemExit):
        main(["silence", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "every 30 s" not in text and "alerts.silence_reload_s" in text


def test_expiring_a_pending_silence_cancels_it(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from fleetwatch.pipeline.sinks.am_silences import silence_wanted

    db = str(tmp_path / "fleet.db")
    SqliteStore(db).close()
    ahead = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 3600))
    assert main(["silence", "--store", db, "add", "node=n1", "--start", ahead]) == 0
    silence_id = capsys.readouterr().out.strip()
    assert main(["silence", "--store", db, "expire", silence_id]) == 0
    capsys.readouterr()
    assert main(["silence", "--store", db, "list"]) == 0
    assert capsys.readouterr().out == ""                  # neither in force nor pending
    (s,) = SqliteStore(db).silences()
    assert s.end_ts == s.start_ts and silence_wanted(s, time.time()) is None
    assert main(["silence", "--store", db, "list", "--all"]) == 0
    assert "pending" not in capsys.readouterr().out


def test_a_pending_silence_says_it_mutes_nothing_yet_and_what_it_matches() -> None:
    from fleetwatch.silencing import mutes_now

    s = Silence("p1", (("node", "=", "n1"),), NOW + 3600, NOW + 7200, "ops")
    assert mutes_now(s, [_alert(NOW), _alert(NOW - 5)], NOW) == (
        "pending: it mutes nothing until it starts in 60 min; it matches 2 open alerts now")
    assert mutes_now(Silence("a1", s.matchers, NOW - 1, NOW + 60, "ops"), [_alert(NOW)],
                     NOW) == "it mutes 1 open alert now"
