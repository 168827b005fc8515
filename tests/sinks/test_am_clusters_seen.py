"""An ``alerts.clusters`` entry that no frame or alert carries (hunt2 #1).

A mirrored silence gets a ``cluster`` matcher from ``alerts.clusters``, and Alertmanager
compares it exactly, case included: "East" mutes nothing of cluster "east" while
``fleetwatch alerts`` says silenced. Said at start and whenever a silence is mirrored,
naming the clusters the store has seen.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from fleetwatch.config import load, override
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.am_silences import clusters_warning, unseen_clusters
from fleetwatch.pipeline.store.base import Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.wiring import alert_sinks, clusters_in
from tests.servers import Server
from tests.sinks.test_alertmanager import am_alerts, wait_for
from tests.sinks.test_am_shared import _alert
from tests.store.helpers import frames


def test_clusters_are_compared_exactly_case_included() -> None:
    assert unseen_clusters(("East", "west"), {"east", "west"}) == ("East",)
    assert unseen_clusters(("east",), {"east", "lab"}) == ()
    said = clusters_warning(("East",), {"east"})
    assert said.startswith("alerts.clusters names 'East', which no frame or alert in the "
                           "store carries (clusters seen: 'east')")
    assert "case included" in said
    assert "none yet" in clusters_warning(("east",), ())
    assert clusters_warning(("east",), {"east"}) == ""


def _notifier(am: Server, store: SqliteStore, path: Path, clusters: list[str]) -> Notifier:
    config = override(load(None, env={}), "store", path=str(path))
    config = override(config, "alerts", alertmanager_url=f"http://{am.address}",
                      alertmanager_resend_s=1.0, clusters=clusters)
    return Notifier(alert_sinks(config, clusters_seen=clusters_in(store)),
                    silences=store.silences, acks=store.acks, background=False, reload_s=0)


@pytest.mark.parametrize("configured", ["East", "east"])
def test_a_cluster_never_seen_is_warned_of_and_its_silence_mutes_nothing(
        am: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture, configured: str) -> None:
    path = tmp_path / "fw.db"
    store = SqliteStore(path)
    store.write(frames("east", int((time.time() - 60) * 1000), 3, nodes=1, gpus=1))
    node = f"node-{time.time_ns()}"
    with caplog.at_level(logging.WARNING, "fleetwatch"):
        notifier = _notifier(am, store, path, [configured])
        at_start = [r.getMessage() for r in caplog.records
                    if "alerts.clusters" in r.getMessage()]
        alert = _alert("east", node)
        notifier.send([alert])
        now = time.time()
        store.write_silences([Silence(f"s-{node}", (("node", "=", node),), now - 1,
                                      now + 600, "ops", "maintenance")])
        caplog.clear()
        notifier.send([])                 # reloads the silence, mirrors it
        notifier.sinks[0].tick()
        at_mirror = [r.getMessage() for r in caplog.records
                    if "alerts.clusters" in r.getMessage()]
    state = wait_for(lambda: {x["status"]["state"] for x in am_alerts(am, node)} - {""})
    if configured == "East":
        assert len(at_start) == 1 and "'East'" in at_start[0] and "'east'" in at_start[0]
        assert len(at_mirror) == 1 and "'East'" in at_mirror[0]
        assert state == {"active"}        # what the warning is about: nothing muted there
    else:
        assert at_start == [] and at_mirror == []
        assert wait_for(lambda: {x["status"]["state"] for x in am_alerts(am, node)}
                        == {"suppressed"})
