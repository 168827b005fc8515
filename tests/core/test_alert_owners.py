"""An alert keeps the owner of its job through its life and in the store: ``users`` follow
its findings, ``teams`` (Alertmanager's routing label) stay those it opened with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetwatch.models import Finding
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_alerts import frame, step


def lost(ts: float, user: str, team: str) -> Finding:
    return Finding("gpu_lost", "c", "r1", "n1", 0, ts, 1.0,
                   f"GPU 0 on n1 (job 7, {user}, team {team}) is lost", "critical",
                   jobs=("7",), users=(user,), teams=(team,))


def test_an_alerts_owner_is_kept_and_its_team_stays_as_it_opened(tmp_path: Path) -> None:
    book = AlertBook(requirements={"gpu_lost": ()}, refresh_s=0.0)
    (opened,) = step(book, [frame(100, [60])], [lost(100, "alice", "vision")])
    assert (opened.users, opened.teams) == (("alice",), ("vision",))
    later = step(book, [frame(200, [60])], [lost(200, "bob", "llm")])[-1]
    assert (later.users, later.teams) == (("bob",), ("vision",))
    store = SqliteStore(tmp_path / "fw.db")
    store.write_alerts([later])
    (back,) = store.alerts()
    assert (back.jobs, back.users, back.teams) == (("7",), ("bob",), ("vision",))
    # Unknown: an alert with no owner keeps none.
    store.write_alerts([dataclasses.replace(later, id="other", users=(), teams=())])
    assert {a.id: a.teams for a in store.alerts()}["other"] == ()
    store.close()
