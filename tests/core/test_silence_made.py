"""A silence made ahead of its window keeps when it was made and when it was cancelled:
the timeline (a postmortem's audit) says "silence made" at that time with its window,
"silence started" at its start if it ran, and "silence cancelled" for a pending one
expired before it started (no "added"/"ended" at a future time it never ran); `silence
expire` says "cancelled" for such a one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.store.base import Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.silencing import add_silence, expire_silence
from fleetwatch.timeline import _silence

T = 1_795_797_827.0  # 2026-11-27 16:43:47 UTC
M = (("node", "=", "n1"),)


def _whats(s: Silence) -> list[tuple[float, str]]:
    return [(e.ts, e.what) for e in _silence(s)]


def test_a_scheduled_silence_is_made_at_its_making_and_started_at_its_start() -> None:
    s = Silence("s1", M, T + 3 * 3600, T + 5 * 3600, "alice", "window", created_ts=T)
    entries = _silence(s)
    assert [(e.ts, e.what) for e in entries] == [
        (T, "silence made"), (T + 3 * 3600, "silence started"),
        (T + 5 * 3600, "silence ended")]
    assert "for 2026-11-27 19:43:47 .. 21:43:47 UTC" in entries[0].detail
    assert entries[0].by == "alice"


def test_a_pending_silence_cancelled_shows_made_and_cancelled_only() -> None:
    s = Silence("s1", M, T + 3 * 3600, T + 3 * 3600, "alice", "", created_ts=T,
                expired_ts=T + 600)
    assert _whats(s) == [(T, "silence made"), (T + 600, "silence cancelled")]
    made, cancelled = _silence(s)
    assert made.by == "alice" and cancelled.by == ""  # expire names no one: not its maker


def test_one_made_now_is_one_added_entry_and_an_old_record_reads_as_before() -> None:
    assert _whats(Silence("s1", M, T, T + 3600, created_ts=T)) == [
        (T, "silence added"), (T + 3600, "silence ended")]
    assert _whats(Silence("s1", M, T, T + 3600)) == [
        (T, "silence added"), (T + 3600, "silence ended")]
    # an older record cancelled before its start: not shown as having run
    assert _whats(Silence("s1", M, T + 60, T + 60)) == [
        (T + 60, "silence cancelled before its start")]


def test_expire_keeps_the_made_time_and_records_the_cancellation(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "fleet.db"))
    now = time.time()
    made = add_silence(store, ["node=n1"], 7200.0, start_ts=now + 3 * 3600, by="alice")
    (kept,) = store.silences()
    assert kept.created_ts == pytest.approx(now, abs=5)
    ended, did = expire_silence(store, made.id, now=now + 60)
    assert did and ended.expired_ts == pytest.approx(now + 60, abs=0.01)
    (kept,) = store.silences()
    assert (kept.created_ts, kept.expired_ts) == (made.created_ts, ended.expired_ts)
    assert kept.end_ts == kept.start_ts


def test_cli_expire_says_cancelled_and_timeline_shows_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    SqliteStore(db).close()
    ahead = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 3 * 3600))
    assert main(["silence", "--store", db, "add", "node=n1", "--start", ahead,
                 "--by", "alice"]) == 0
    sid = capsys.readouterr().out.strip()
    assert main(["silence", "--store", db, "expire", sid]) == 0
    assert "cancelled before its start" in capsys.readouterr().out
    tomorrow = time.strftime("%Y-%m-%d %H:%M", time.gmtime(time.time() + 86400))
    assert main(["timeline", "--store", db, "--since", "1h", "--until", tomorrow]) == 0
    out = capsys.readouterr().out
    assert "silence made" in out and "silence cancelled" in out
    assert "silence started" not in out and "silence ended" not in out


def test_an_older_sqlite_file_gains_the_columns(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE silences (id TEXT PRIMARY KEY, matchers TEXT NOT NULL, "
                 "start_ts REAL NOT NULL, end_ts REAL NOT NULL, created_by TEXT NOT NULL, "
                 "comment TEXT NOT NULL)")
    conn.execute("INSERT INTO silences VALUES ('s1', '[[\"node\",\"=\",\"n1\"]]', 1, 2, 'a', '')")
    conn.commit()
    conn.close()
    store = SqliteStore(str(db))
    (s,) = store.silences()
    assert (s.id, s.created_ts, s.expired_ts) == ("s1", 0.0, 0.0)
    store.write_silences([Silence("s2", M, 3, 4, created_ts=2.5)])
    assert [x.created_ts for x in store.silences()] == [0.0, 2.5]


def test_line_protocol_stores_keep_both_times() -> None:
    from fleetwatch.pipeline.store.lpsilences import silence_from, silence_line

    s = Silence("s1", M, T + 3600, T + 3600, "alice", "", created_ts=T, expired_ts=T + 60)
    for text in (False, True):
        line = silence_line(s, int(T * 1000), text=text)
        assert f"created_ts={T!r}" in line and f"expired_ts={T + 60!r}" in line
    back = silence_from({"id": "s1"}, {"start_ts": T + 3600, "end_ts": T + 3600,
                                       "created_ts": T, "expired_ts": T + 60},
                        {"matchers": '[["node", "=", "n1"]]', "created_by": "alice"})
    assert back == s
    older = silence_from({"id": "s1"}, {"start_ts": T, "end_ts": T + 60},
                         {"matchers": '[["node", "=", "n1"]]'})
    assert older is not None and (older.created_ts, older.expired_ts) == (0.0, 0.0)


def test_a_cancelled_pending_silence_keeps_its_planned_window_in_the_timeline() -> None:
    s = Silence("s1", M, T + 3 * 3600, T + 3 * 3600, "alice", "", created_ts=T,
                expired_ts=T + 600, planned_end_ts=T + 5 * 3600)
    made, cancelled = _silence(s)
    assert "for 2026-11-27 19:43:47 .. 21:43:47 UTC" in made.detail
    assert (cancelled.ts, cancelled.what) == (T + 600, "silence cancelled")
    assert cancelled.detail == ("node=n1: planned 2026-11-27 19:43:47 .. 21:43:47 UTC, "
                                "never in force")


def test_expire_keeps_the_planned_end_of_a_pending_and_of_a_running_silence(
        tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "fleet.db"))
    now = time.time()
    pending = add_silence(store, ["node=n1"], 7200.0, start_ts=now + 3 * 3600)
    running = add_silence(store, ["node=n2"], 7200.0)
    expire_silence(store, pending.id, now=now + 60)
    expire_silence(store, running.id, now=now + 60)
    kept = {s.id: s for s in SqliteStore(str(tmp_path / "fleet.db")).silences()}
    assert kept[pending.id].end_ts == kept[pending.id].start_ts
    assert kept[pending.id].planned_end_ts == pending.end_ts
    assert kept[running.id].end_ts < running.end_ts
    assert kept[running.id].planned_end_ts == running.end_ts


def test_cli_timeline_shows_a_cancelled_silences_planned_end(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    SqliteStore(db).close()
    start = time.time() + 3 * 3600
    ahead = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start))
    until = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start + 2 * 3600))
    assert main(["silence", "--store", db, "add", "node=n1", "--start", ahead,
                 "--until", until, "--by", "alice"]) == 0
    sid = capsys.readouterr().out.strip()
    assert main(["silence", "--store", db, "expire", sid]) == 0
    capsys.readouterr()
    tomorrow = time.strftime("%Y-%m-%d %H:%M", time.gmtime(time.time() + 86400))
    assert main(["timeline", "--store", db, "--since", "1h", "--until", tomorrow,
                 "--tz", "UTC"]) == 0
    (cancelled,) = [line for line in capsys.readouterr().out.splitlines()
                    if "silence cancelled" in line]
    end = time.strftime("%H:%M:%S", time.gmtime(start + 2 * 3600))
    assert f"planned {ahead[:10]} {ahead[11:19]} .. " in cancelled
    assert f"{end} UTC, never in force" in cancelled
    assert "never in force" in cancelled


def test_one_expired_while_in_force_says_its_planned_end_and_list_says_a_cancelled_ones(
        ) -> None:
    from fleetwatch.silencing import describe

    s = Silence("s1", M, T, T + 600, "alice", "", created_ts=T, expired_ts=T + 600,
                planned_end_ts=T + 3600)
    assert _silence(s)[-1].detail == ("node=n1 (expired by hand; planned until "
                                      "17:43:47 UTC)")
    cancelled = Silence("s2", M, T + 3600, T + 3600, created_ts=T, expired_ts=T + 60,
                        planned_end_ts=T + 7200)
    assert describe(cancelled, now=T + 120).endswith(
        "cancelled before its start at 2026-11-27 16:44:47 UTC (planned until "
        "2026-11-27 18:43:47 UTC)")


def test_line_protocol_stores_keep_the_planned_end() -> None:
    from fleetwatch.pipeline.store.lpsilences import silence_from, silence_line

    s = Silence("s1", M, T + 3600, T + 3600, "alice", "", created_ts=T, expired_ts=T + 60,
                planned_end_ts=T + 7200)
    for text in (False, True):
        assert f"planned_end_ts={T + 7200!r}" in silence_line(s, int(T * 1000), text=text)
    back = silence_from({"id": "s1"}, {"start_ts": T + 3600, "end_ts": T + 3600,
                                       "created_ts": T, "expired_ts": T + 60,
                                       "planned_end_ts": T + 7200},
                        {"matchers": '[["node", "=", "n1"]]', "created_by": "alice"})
    assert back == s
