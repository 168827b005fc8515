"""`fleetwatch alerts` shows what was notified as recorded at the time, and the
acknowledgement (who, when, why) of resolved alerts too (postmortems)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetwatch.alert_view import lines, record
from fleetwatch.cli import main
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Notification
from fleetwatch.pipeline.store.sqlite import SqliteStore

NOW = 1_800_000_000.0


def _alert(state: str, now: float) -> Alert:
    return Alert("gpu_ecc_dbe/c1/node-003/gpu1/1", "gpu_ecc_dbe", "critical", "c1", "r1",
                 "node-003", "gpu1", state, now - 3600, now - 600, 1.0,  # type: ignore[arg-type]
                 "GPU 1 on node-003: new DBE", fired_ts=now - 3600,
                 resolved_ts=now - 600 if state == "resolved" else None)


def _note(a: Alert, ts: float, state: str, outcome: str, muted_by: str = "") -> Notification:
    return Notification(ts, ts + 1, "webhook", a.id, a.rule, a.severity, a.cluster, a.rack,
                        a.node, a.device, state, outcome, muted_by)


def test_a_resolved_alert_shows_its_ack_and_what_was_notified() -> None:
    a = _alert("resolved", NOW)
    ack = Acknowledgement(a.id, NOW - 3000, "bob", "drained, RMA-77")
    notes = [_note(a, NOW - 3600, "firing", "sent"),
             _note(a, NOW - 600, "resolved", "muted", "inhibited:rack_cooling/c1//r1/9")]
    text = "\n".join(lines([a], [], {a.id: ack}, NOW, notified={a.id: notes}))
    assert "    acknowledged by bob at 2027-01-15 07:10:00 UTC: drained, RMA-77" in text
    assert ("    notified: 2027-01-15 07:00:00 firing sent to webhook; 07:50:00 resolved "
            "muted at webhook (inhibited:rack_cooling/c1//r1/9)") in text
    r = record(a, [], [], {a.id: ack}, NOW, notes)
    assert (r["acked_by"], r["acked_ts"], r["ack_comment"]) == ("bob", NOW - 3000,
                                                                "drained, RMA-77")
    assert [(n["state"], n["outcome"], n["muted_by"]) for n in r["notifications"]] == [
        ("firing", "sent", ""), ("resolved", "muted", "inhibited:rack_cooling/c1//r1/9")]


def test_the_command_reads_the_record_from_the_store(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "f.db"
    now = time.time()
    s = SqliteStore(db)
    a = _alert("resolved", now)
    s.write_alerts([a])
    s.write_acks([Acknowledgement(a.id, now - 3000, "bob", "drained")])
    s.write_notifications([_note(a, now - 3600, "firing", "sent")])
    s.close()
    assert main(["alerts", "--since", "1d", "--json", "--store", str(db)]) == 0
    (r,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert r["ack_comment"] == "drained" and r["acked_ts"] == now - 3000
    assert [(n["sink"], n["outcome"], n["ts"]) for n in r["notifications"]] == [
        ("webhook", "sent", now - 3600)]
    assert main(["alerts", "--since", "1d", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "firing sent to webhook" in out and "acknowledged by bob at" in out
