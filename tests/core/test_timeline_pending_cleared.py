"""A pending alert that clears without firing is no resolved alert: the timeline leaves
such alerts out by default (a postmortem reads what fired and what was told) and says how
many it left out; ``--pending-cleared`` shows them as "pending" then "pending cleared"."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.timeline import Records, Scope, build, pending_cleared

T = float(int(time.time())) - 3600


def flapping() -> list[Alert]:
    """gpu_power_low_vs_peers pending 15 s then clear, five times; a straggler that fired."""
    out = [Alert(f"gpu_power_low_vs_peers/sim/node-003/gpu2/{k}", "gpu_power_low_vs_peers",
                 "warning", "sim", "rack-01", "node-003", "gpu2", "resolved", T + 60 * k,
                 T + 60 * k + 15, 138.0, "draws 138 W against 239 W", resolved_ts=T + 60 * k + 15)
           for k in range(5)]
    out.append(Alert("gpu_straggler/sim/node-003/gpu2/9", "gpu_straggler", "warning", "sim",
                     "rack-01", "node-003", "gpu2", "firing", T, T + 400, 0.5, "slow",
                     fired_ts=T + 110))
    return out


def test_pending_that_cleared_is_left_out_or_said_so() -> None:
    records = Records(flapping(), [], [], [], [], [])
    scope = Scope(T - 60, T + 3600)
    assert [(e.what, e.rule) for e in build(records, scope)] == [
        ("pending", "gpu_straggler"), ("firing", "gpu_straggler")]
    assert len(pending_cleared(records.alerts)) == 5
    shown = [(e.what, e.rule) for e in build(records, scope, show_pending_cleared=True)
             if e.rule == "gpu_power_low_vs_peers"]
    assert shown == [("pending", "gpu_power_low_vs_peers"),
                     ("pending cleared", "gpu_power_low_vs_peers")] * 5
    assert not any(e.what == "resolved" for e in build(records, scope, show_pending_cleared=True))


def test_the_command_leaves_them_out_and_shows_them_with_a_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    s = SqliteStore(db)
    s.write_alerts(flapping())
    s.close()
    assert main(["timeline", "--store", str(db), "--since", "3h"]) == 0
    out = capsys.readouterr().out
    assert "gpu_power_low_vs_peers" not in out.split("\n", 1)[1].rsplit("\n", 2)[0]
    assert "5 pending alerts that cleared without firing left out (--pending-cleared " in out
    assert main(["timeline", "--store", str(db), "--since", "3h", "--pending-cleared"]) == 0
    out = capsys.readouterr().out
    assert out.count("pending cleared") == 5 and " resolved " not in out


def test_a_pending_alert_still_open_is_shown() -> None:
    (a, *_) = flapping()
    still = dataclasses.replace(a, state="pending", resolved_ts=None)
    assert [e.what for e in build(Records([still], [], [], [], [], []),
                                  Scope(T - 60, T + 3600))] == ["pending"]
