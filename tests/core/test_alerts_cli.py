"""`fleetwatch alerts`: what on-call reads in a terminal, from the store the processors write."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from fleetwatch.alert_view import age, lines, ordered, record
from fleetwatch.cli import main
from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore

NOW = 1_800_000_000.0


def alert(rule: str, state: str, severity: str, started: float, node: str = "node-007",
          device: str = "gpu3", fired: float | None = None, resolved: float | None = None,
          ) -> Alert:
    return Alert(f"{rule}/c1/{node}/{device}/{int(started)}", rule, severity, "c1", "r2",
                 node, device, state, started, resolved or NOW - 5, 81.0,  # type: ignore[arg-type]
                 f"GPU 3 on {node} at 81 °C", fired_ts=fired, resolved_ts=resolved,
                 evidence={"temp_c": 81.0, "peer_median_c": 66.5},
                 action="Check the GPU's cooling")


def test_firing_before_pending_critical_before_warning_oldest_first() -> None:
    a = [alert("gpu_hot_vs_peers", "pending", "warning", NOW - 20),
         alert("gpu_temp_high", "firing", "warning", NOW - 600, fired=NOW - 570),
         alert("xid", "firing", "critical", NOW - 60, fired=NOW - 60),
         alert("gpu_hw_slowdown", "firing", "critical", NOW - 300, fired=NOW - 290)]
    assert [x.rule for x in ordered(a)] == ["gpu_hw_slowdown", "xid", "gpu_temp_high",
                                            "gpu_hot_vs_peers"]


def test_each_alert_says_where_since_when_evidence_action_and_why_it_is_quiet() -> None:
    hot = alert("gpu_temp_high", "firing", "warning", NOW - 600, fired=NOW - 570)
    other = alert("gpu_hot_vs_peers", "firing", "warning", NOW - 60, node="node-009",
                  fired=NOW - 30)
    acks = {hot.id: Acknowledgement(hot.id, NOW - 100, "alice", "swapping the fan")}
    silence = Silence("s-1", (parse_matcher("node=node-009"),), NOW - 3600, NOW + 3600)
    text = lines([hot, other], [silence], acks, NOW)
    assert text[0].startswith("FIRING   warning  gpu_temp_high  c1/r2/node-007/gpu3  firing "
                              "since 2027-01-15 07:50:30 (9 min; pending from 07:50:00)")
    assert text[1] == f"    id {hot.id}"  # on a line of its own, whole
    assert "    GPU 3 on node-007 at 81 °C" in text
    assert "    evidence: peer_median_c=66.5, temp_c=81" in text
    assert "    action: Check the GPU's cooling" in text
    assert "    notifications: acknowledged by alice: swapping the fan" in text
    assert "    notifications: silenced by s-1" in text


def test_a_silence_added_after_an_alerts_last_change_shows_as_muting_it() -> None:
    # A latched XID: last seen 10 minutes ago, silenced 5 minutes ago, still open.
    xid = dataclasses.replace(alert("gpu_xid_critical", "firing", "critical", NOW - 900,
                                    fired=NOW - 900), updated_ts=NOW - 600)
    silence = Silence("s-2", (parse_matcher("node=node-007"),), NOW - 300, NOW + 3600)
    assert "    notifications: silenced by s-2" in lines([xid], [silence], {}, NOW)
    assert record(xid, [xid], [silence], {}, NOW)["muted"] == "silence:s-2"


def test_ages_read_as_people_say_them() -> None:
    assert [age(s) for s in (5, 119, 600, 7200, 90000, 200000)] == [
        "5 s", "119 s", "10 min", "2 h 00 min", "25 h 00 min", "2 d 7 h"]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "fleetwatch.db"
    s = SqliteStore(db)
    now = time.time()
    s.write_alerts([
        alert("gpu_temp_high", "firing", "warning", now - 600, fired=now - 570),
        alert("node_silent", "firing", "critical", now - 120, node="node-001", device="host",
              fired=now - 60),
        alert("gpu_temp_high", "pending", "warning", now - 130, node="node-001", device="gpu0"),
        alert("gpu_straggler", "resolved", "warning", now - 7200, node="node-002",
              fired=now - 7000, resolved=now - 3600),
        alert("gpu_power_low_vs_peers", "resolved", "warning", now - 900, node="node-002",
              resolved=now - 880)])                               # pending that cleared
    s.close()
    return db


def test_the_command_lists_open_alerts_and_ack_takes_the_id_it_shows(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts", "--store", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"2 firing, 1 pending alerts in {store} (times UTC)"
    heads = [line for line in out if not line.startswith("    ")]
    assert [h.split()[2] for h in heads[1:]] == ["node_silent", "gpu_temp_high",
                                                 "gpu_temp_high"]
    assert "notifications: inhibited by node_silent/c1/node-001/host/" in "\n".join(out)
    # Piped: the previous release's lines, the id last on the heading (awk '{print $NF}').
    alert_id = heads[2].split()[-1]
    assert alert_id.startswith("gpu_temp_high/c1/node-007/gpu3/")
    assert main(["ack", alert_id, "--by", "bob", "--store", str(store)]) == 0
    capsys.readouterr()
    assert main(["alerts", "--store", str(store), "--node", "node-007"]) == 0
    out = capsys.readouterr().out
    assert "1 firing, 0 pending alerts of node-007" in out
    assert "notifications: acknowledged by bob" in out and "node_silent" not in out


def test_since_adds_what_fired_and_resolved_and_json_is_one_object_a_line(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts", "--since", "1d", "--json", "--store", str(store)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["rule"] for r in records) == ["gpu_straggler", "gpu_temp_high",
                                                  "gpu_temp_high", "node_silent"]
    muted = {r["node"]: r["muted"] for r in records if r["rule"] == "gpu_temp_high"}
    # The GPU alert of the silent node is inhibited by the node's; the other one is not.
    assert muted["node-001"].startswith("inhibited:node_silent/") and muted["node-007"] == ""
    gpu = next(r for r in records if r["node"] == "node-007")
    assert gpu["evidence"] == {"temp_c": 81.0, "peer_median_c": 66.5}
    assert gpu["acked_by"] is None and gpu["fired_ts"] is not None
    assert main(["alerts", "--since", "30m", "--store", str(store)]) == 0
    assert "gpu_straggler" not in capsys.readouterr().out  # resolved an hour ago


def test_json_lists_the_alerts_in_the_table_order(store: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Firing before pending, critical first, the oldest first: a script reading the first
    line reads what the table shows first."""
    assert main(["alerts", "--since", "1d", "--store", str(store)]) == 0
    ids = [line.split()[-1] for line in capsys.readouterr().out.splitlines()[1:]
           if not line.startswith("    ")]
    assert main(["alerts", "--since", "1d", "--json", "--store", str(store)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in records] == ids
    assert [(r["state"], r["rule"]) for r in records] == [
        ("firing", "node_silent"), ("firing", "gpu_temp_high"), ("pending", "gpu_temp_high"),
        ("resolved", "gpu_straggler")]


@pytest.mark.parametrize("since", ["0", "-1h", "1e400h", "soon", "24"])
def test_a_wrong_look_back_is_a_usage_error(since: str, store: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["alerts", "--since", since, "--store", str(store)])
    assert exit_.value.code == 2
    assert "--since" in capsys.readouterr().err


def test_an_empty_or_missing_store_says_so(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.db"
    SqliteStore(empty).close()
    assert main(["alerts", "--store", str(empty)]) == 0
    assert capsys.readouterr().out == f"no open alerts in {empty}\n"
    assert main(["alerts", "--store", str(tmp_path / "none.db")]) == 1
    assert f"no store at {tmp_path / 'none.db'}" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()


def test_an_alert_without_its_text_prints_no_empty_line() -> None:
    # VictoriaMetrics keeps the numbers of an alert, not its text.
    bare = dataclasses.replace(alert("gpu_temp_high", "firing", "warning", NOW - 60,
                                     fired=NOW - 30), message="", action="")
    text = lines([bare], [], {}, NOW)
    assert len(text) == 3 and text[2].startswith("    evidence: ")


def test_a_node_the_store_never_heard_of_gets_a_hint(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`--node node-07` when the agents call it node-007: "no open alerts" alone reads as
    all clear; the store says which nodes it knows."""
    from tests.core.test_alerts import frame

    db = tmp_path / "f.db"
    s = SqliteStore(db)
    now = time.time()
    # Fresh samples: older than a minute, the command would add that the data stopped.
    s.write([frame(now - 10, [60.0], node=n) for n in ("node-007", "node-008", "gpu-a1")])
    s.close()
    assert main(["alerts", "--store", str(db), "--node", "node-07"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"no open alerts of node-07 in {db} (no node 'node-07' has sent "
                          "data to it in the last 7 days; did you mean node-007")
    assert main(["alerts", "--store", str(db), "--node", "zz"]) == 0
    assert "nodes seen: gpu-a1, node-007, node-008)" in capsys.readouterr().out
    assert main(["alerts", "--store", str(db), "--node", "node-008"]) == 0
    assert capsys.readouterr().out == f"no open alerts of node-008 in {db}\n"
