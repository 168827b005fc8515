"""`fleetwatch timeline`: one time-ordered list for a postmortem, from what the store kept."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.store.base import (
    Acknowledgement,
    Alert,
    Annotation,
    Event,
    Notification,
    Silence,
)
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.timeline import Records, Scope, build, csv_text, job_scope, text_line

T = 1_795_797_827.0  # 2026-11-27 16:43:47 UTC
UTC = ZoneInfo("UTC")


def _xid(node: str = "node-002", device: str = "gpu4") -> Alert:
    return Alert(f"gpu_xid_critical/sim/{node}/{device}/1", "gpu_xid_critical", "critical",
                 "sim", "rack-01", node, device, "resolved", T, T + 3600, 79.0,
                 f"GPU 4 on {node}: XID 79", fired_ts=T, resolved_ts=T + 3600)


def _records() -> Records:
    xid = _xid()
    hot = Alert("gpu_temp_high/sim/node-007/gpu3/2", "gpu_temp_high", "warning", "sim",
                "rack-03", "node-007", "gpu3", "firing", T + 60, T + 200, 90.0, "hot",
                fired_ts=T + 90)
    notes = [Notification(T, T + 900, "webhook", xid.id, xid.rule, xid.severity, "sim",
                          "rack-01", "node-002", "gpu4", "firing", "sent"),
             Notification(T + 3600, T + 4500, "webhook", xid.id, xid.rule, xid.severity,
                          "sim", "rack-01", "node-002", "gpu4", "resolved", "muted",
                          "inhibited:rack_cooling/sim//rack:rack-01/9")]
    acks = [Acknowledgement(xid.id, T + 600, "bob", "drained, RMA-77")]
    silences = [Silence("s1", (parse_matcher("rack=rack-01"),), T + 30, T + 1800,
                        "alice", "FAC-123: CRAH failed")]
    events = [Event(T, "xid", "sim", "rack-01", "node-002", "gpu4", code=79),
              *[Event(T + 1 + i, "xid", "sim", "rack-01", "node-003", "gpu1", code=48)
                for i in range(5)],
              *[Event(T + 5, "job_end", "sim", "rack-01", "node-002", f"gpu{i}",
                      value="4000003") for i in range(8)],
              Event(T + 5, "gpu_state", "sim", "rack-01", "node-002", "gpu4", value="lost"),
              Event(T - 3600, "job_start", "sim", "rack-01", "node-002", "gpu4",
                    value="4000003")]
    faults = [Annotation("fault", T - 1, T + 3600, "node-002", "gpu4", "injected xid79", "sim")]
    return Records([xid, hot], notes, acks, silences, events, faults)


def test_everything_in_time_order_with_who_when_and_why() -> None:
    entries = build(_records(), Scope(T - 60, T + 7200))
    got = [(e.ts - T, e.kind, e.what, e.node) for e in entries]
    assert got == [
        (-1, "fault", "fault", "node-002"),
        (0, "event", "xid 79", "node-002"),
        (0, "alert", "firing", "node-002"),
        (0, "notification", "sent", "node-002"),
        (1, "event", "xid 48", "node-003"),          # a storm of 5: one entry
        (5, "event", "job_end 4000003", "node-002"),  # 8 GPUs at once: one entry
        (5, "event", "gpu lost", "node-002"),
        (30, "silence", "silence added", ""),
        (60, "alert", "pending", "node-007"),
        (90, "alert", "firing", "node-007"),
        (600, "ack", "acknowledged", "node-002"),
        (1800, "silence", "silence ended", ""),
        (3600, "alert", "resolved", "node-002"),
        (3600, "notification", "muted", "node-002")]
    storm = entries[4]
    assert storm.count == 5 and storm.last_ts == T + 5
    ack = entries[10]
    assert (ack.by, ack.detail, ack.rule) == ("bob", "drained, RMA-77", "gpu_xid_critical")
    assert entries[7].detail == "rack=rack-01: FAC-123: CRAH failed"
    assert text_line(entries[13], UTC) == (
        "2026-11-27 17:43:47  notification muted            sim/rack-01/node-002/gpu4  "
        "gpu_xid_critical critical  resolved to webhook, muted by "
        "inhibited:rack_cooling/sim//rack:rack-01/9 · [gpu_xid_critical/sim/node-002/gpu4/1]")
    assert text_line(entries[4], ZoneInfo("America/New_York")).startswith(
        "2026-11-27 11:43:48  event        xid 48           sim/rack-01/node-003/gpu1  "
        "×5 until 2026-11-27 11:43:52")


def test_scoped_to_a_node_a_rack_or_a_job() -> None:
    r = _records()
    node = build(r, Scope(T - 60, T + 7200, node="node-007"))
    assert {e.node for e in node} == {"node-007"}
    rack = build(r, Scope(T - 60, T + 7200, rack="rack-01"))
    assert {e.node for e in rack} == {"node-002", "node-003", ""}  # "": the rack's silence
    assert "node-007" not in {e.node for e in rack}
    scope, slots = job_scope(Scope(T - 60, T + 7200, job="4000003"), r.events)
    assert slots == {("node-002", "gpu4")} and scope.end == T + 6
    job = build(r, scope, slots)
    assert {(e.node, e.device) for e in job} <= {("node-002", "gpu4"), ("node-002", ""),
                                                 ("", "")}
    assert [e.what for e in job if e.kind == "alert"] == ["firing"]


def test_csv_has_a_header_and_no_formula_cells() -> None:
    r = _records()
    r = r._replace(acks=[Acknowledgement(r.alerts[0].id, T + 600, "bob", "=HYPERLINK(1)")])
    rows = list(csv.DictReader(io.StringIO(csv_text(build(r, Scope(T, T + 700)), UTC))))
    ack = next(row for row in rows if row["kind"] == "ack")
    assert ack["detail"] == "'=HYPERLINK(1)" and ack["time"] == "2026-11-27T16:53:47+00:00"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    now = time.time()
    db = tmp_path / "f.db"
    s = SqliteStore(db)
    r = _records()
    shift = now - 7200 - T  # two hours ago

    def at(ts: float) -> float:
        return ts + shift

    s.write_alerts([a.__class__(**{**{f: getattr(a, f) for f in a.__slots__},
                                   "started_ts": at(a.started_ts), "updated_ts": at(a.updated_ts),
                                   "fired_ts": at(a.fired_ts) if a.fired_ts else None,
                                   "resolved_ts": at(a.resolved_ts) if a.resolved_ts else None})
                    for a in r.alerts])
    s.write_acks([Acknowledgement(k.alert_id, at(k.ts), k.by, k.comment) for k in r.acks])
    s.write_silences([Silence("s1", r.silences[0].matchers, at(T + 30), at(T + 1800), "alice",
                              "FAC-123")])
    s.write_events([Event(at(e.ts), e.kind, e.cluster, e.rack, e.node, e.device, e.code,
                          e.value, e.text) for e in r.events])
    s.write_notifications([Notification(at(n.ts), at(n.sent_ts), n.sink, n.alert_id, n.rule,
                                        n.severity, n.cluster, n.rack, n.node, n.device,
                                        n.state, n.outcome, n.muted_by)
                           for n in r.notifications])
    s.close()
    return db


def test_the_command_reads_the_store_as_text_json_and_csv(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["timeline", "--store", str(store), "--since", "3h", "--node", "node-002"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(times UTC)") and out[0].startswith("10 entries in ")
    assert any("acknowledged" in line and "by bob · drained, RMA-77" in line for line in out)
    assert any("notification sent" in line and "firing to webhook" in line for line in out)
    assert main(["timeline", "--store", str(store), "--since", "3h", "--json",
                 "--tz", "Asia/Tokyo"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["kind"] for r in rows].count("silence") == 2
    assert all(r["time"].endswith("+09:00") for r in rows)
    assert main(["timeline", "--store", str(store), "--since", "3h", "--csv",
                 "--job", "4000003"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["node"] for r in rows} == {"node-002"}


@pytest.mark.parametrize("argv, said", [
    (["--tz", "Mars/Olympus"], "not an IANA time zone"),
    (["--since", "yesterday"], "neither a duration"),
    (["--since", "1h", "--until", "2h"], "the window is empty")])
def test_wrong_arguments_say_what_to_write(store: Path, capsys: pytest.CaptureFixture[str],
                                           argv: list[str], said: str) -> None:
    assert main(["timeline", "--store", str(store), *argv]) == 2
    assert said in capsys.readouterr().err


def test_a_job_never_seen_says_so(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["timeline", "--store", str(store), "--job", "nope"]) == 1
    assert "no job 'nope'" in capsys.readouterr().err


def test_a_silence_of_another_cluster_with_an_empty_matcher_is_not_this_clusters() -> None:
    # rack="" and node="" name no rack or node: the scope's unset parts must not match them.
    r = _records()
    other = Silence("s2", (parse_matcher("cluster=elsewhere"), parse_matcher('rack=""'),
                           parse_matcher('node=""')), T + 40, T + 900, "ops-alice", "fan swap")
    r = Records(r.alerts, r.notifications, r.acks, [*r.silences, other], r.events, r.faults)
    entries = build(r, Scope(T - 60, T + 7200, cluster="sim"))
    assert {e.alert_id for e in entries if e.kind == "silence"} == {"s1"}


def test_a_page_handed_over_and_never_confirmed_reads_so_and_an_outcome_replaces_it() -> None:
    """``queued``: handed to the sink, then the processor was killed before an outcome;
    followed by ``sent`` (its successor re-sent it), only ``sent`` is listed."""
    r = _records()
    hot = r.alerts[1]

    def note(outcome: str, ts: float, sent_ts: float) -> Notification:
        return Notification(ts, sent_ts, "webhook", hot.id, hot.rule, hot.severity, "sim",
                            "rack-03", "node-007", "gpu3", "firing", outcome)

    owed = Records(r.alerts, [note("queued", T + 90, T + 90)], [], [], [], [])
    (entry,) = [e for e in build(owed, Scope(T - 60, T + 7200)) if e.kind == "notification"]
    assert text_line(entry, UTC) == (
        "2026-11-27 16:45:17  notification not confirmed    sim/rack-03/node-007/gpu3  "
        "gpu_temp_high warning  firing to webhook, handed over, no outcome recorded · "
        "[gpu_temp_high/sim/node-007/gpu3/2]")
    resent = Records(r.alerts, [note("queued", T + 90, T + 90), note("sent", T + 150, T + 150)],
                     [], [], [], [])
    got = [(e.ts - T, e.what) for e in build(resent, Scope(T - 60, T + 7200))
           if e.kind == "notification"]
    assert got == [(150, "sent")]


def test_a_jobs_timeline_names_whom_the_job_belongs_to(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The ledger's (job, user, team) rows name the job's owner under the header; a job
    whose owner the store does not know says nothing of one."""
    from fleetwatch.pipeline.store.ledger import EnergyRow, bucket_floor

    s = SqliteStore(store)
    hour = int(bucket_floor(time.time() - 7200))
    s.write_energy([EnergyRow(hour, "sim", "rack-01", "node-002", "gpu4", "4000003",
                              "user-02", "multimodal", 3.6e6, 0.0, 3600.0, 0.0, 0.0, 0.0)], [])
    s.close()
    assert main(["timeline", "--store", str(store), "--since", "3h", "--job", "4000003"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "job 4000003: user-02, team multimodal", lines[:3]
    s = SqliteStore(store)
    s._energy_conn().execute("DELETE FROM energy")
    s._energy_conn().commit()
    s.close()
    assert main(["timeline", "--store", str(store), "--since", "3h", "--job", "4000003"]) == 0
    assert "user-02" not in capsys.readouterr().out.splitlines()[1]
