"""A silence made ahead of a maintenance window (``silence add --start/--until``) reaches a
real Alertmanager with the same start and end: pending there until its start, muting
nothing before it, and fleetwatch's own sinks hear the node's alerts until then."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.am_silences import ts
from tests.servers import Server
from tests.sinks.conftest import tmp_store
from tests.sinks.test_alertmanager import am_alerts
from tests.sinks.test_am_silences import firing, fw_silences, sink_for


def test_a_pending_silence_is_mirrored_with_its_start_and_mutes_nothing_before_it(
        am: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = f"node-pend-{time.time_ns()}"
    store = tmp_store(tmp_path)
    start = time.time() + 3600
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start))
    end = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start + 4 * 3600))  # no offset: UTC
    assert main(["silence", "--store", str(tmp_path / "fleet.db"), "add", f"node={node}",
                 "--start", stamp, "--until", end, "--by", "alice"]) == 0
    silence_id = capsys.readouterr().out.strip()
    notifier = Notifier([sink_for(am)], silences=store.silences, acks=store.acks,
                        background=False, reload_s=0)
    alert = firing(node)
    (notice,) = notifier.send([alert])
    assert notice.notify and notice.muted_by == ""     # pending: not muted in fleetwatch
    (mirrored,) = fw_silences(am, node)
    assert mirrored["comment"].startswith(f"fleetwatch silence {silence_id} by alice")
    assert mirrored["status"]["state"] == "pending"
    assert abs(ts(mirrored["startsAt"]) - int(start)) < 0.01
    assert abs(ts(mirrored["endsAt"]) - (int(start) + 4 * 3600)) < 0.01
    (held,) = am_alerts(am, node)
    assert held["status"]["state"] == "active"        # Alertmanager pages it as well


def test_a_pending_silence_expired_is_expired_in_alertmanager(
        am: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = f"node-pendx-{time.time_ns()}"
    store = tmp_store(tmp_path)
    db = str(tmp_path / "fleet.db")
    ahead = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 3600))
    assert main(["silence", "--store", db, "add", f"node={node}", "--start", ahead]) == 0
    silence_id = capsys.readouterr().out.strip()
    notifier = Notifier([sink_for(am)], silences=store.silences, acks=store.acks,
                        background=False, reload_s=0)
    notifier.send([])
    assert [s["status"]["state"] for s in fw_silences(am, node)] == ["pending"]
    assert main(["silence", "--store", db, "expire", silence_id]) == 0
    notifier.send([])
    assert fw_silences(am, node) == []                   # expired there too
