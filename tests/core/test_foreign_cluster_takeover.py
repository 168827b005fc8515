"""A processor takes over (loads the open alerts of, expects frames from, judges silent and
re-sends to Alertmanager) only nodes of the clusters whose frames it reads: beside it, a
`fleetwatch up --into-live-store` writes a simulated cluster into the same store and
judges and notifies it itself. Before this, both notified the simulated cluster's alerts
(a page twice). Over a real SQLite store."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import pytest

from fleetwatch.frame import Frame
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame

T0 = time.time() - 600


def of(cluster: str, node: str, ts: float) -> Frame:
    return dataclasses.replace(frame(node, ts), cluster=cluster)


def test_nodes_of_a_cluster_it_reads_no_frame_of_are_not_taken_over(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SqliteStore(tmp_path / "s.db")
    # `up` wrote cluster sim (and has an alert open on node-002); prod's processor wrote prod.
    store.write([of("sim", n, T0) for n in ("node-001", "node-002")]
                + [of("prod", "gpu-prod-01", T0)])
    lost = Alert("gpu_lost/sim/node-002/gpu5/1", "gpu_lost", "critical", "sim", "r1",
                 "node-002", "gpu5", "firing", T0, T0, 1.0, "GPU 5 on node-002 is lost",
                 fired_ts=T0)
    store.write_alerts([lost])
    loaded: list[list[str]] = []
    told: list[list[str]] = []
    o = Ownership(store, AlertBook(), on_loaded=[lambda a: loaded.append([x.id for x in a])],
                  on_expected=[lambda e: told.append([f"{c}/{n}" for c, _, n, _ in e])])
    o.locate = lambda key: ("t", 0)  # every name maps to this member's one partition
    o.assigned([("t", 0)])
    with caplog.at_level(logging.INFO, logger="fleetwatch.pipeline.ownership"):
        o.build([of("prod", "gpu-prod-01", T0 + 5)], None)
        o.build([of("prod", "gpu-prod-01", T0 + 60)], None)  # past the grace: the log line
    assert loaded == [] and told == []
    assert set(o.nodes) == {("prod", "gpu-prod-01")}
    assert "not taken over" in caplog.text and "sim" in caplog.text
    # A frame of cluster sim comes here after all (its frames now go through this topic):
    # its nodes are taken over then, with their open alerts.
    o.build([of("sim", "node-001", T0 + 65)], None)
    assert told == [["sim/node-002"]]
    assert loaded == [[lost.id]]
    assert set(o.nodes) == {("prod", "gpu-prod-01"), ("sim", "node-001"), ("sim", "node-002")}
    store.close()


def test_a_takeover_before_any_frame_cannot_tell_and_takes_every_stored_node(
        tmp_path: Path) -> None:
    """The limit, as the README and `up --into-live-store` say: an idle first poll (no
    frame yet) takes every stored node of its partitions over, as a member whose
    partitions hold only dead nodes must."""
    store = SqliteStore(tmp_path / "s.db")
    store.write([of("sim", "node-001", T0), of("prod", "gpu-prod-01", T0)])
    told: list[list[str]] = []
    o = Ownership(store, AlertBook(),
                  on_expected=[lambda e: told.append([f"{c}/{n}" for c, _, n, _ in e])])
    o.locate = lambda key: ("t", 0)
    o.assigned([("t", 0)])
    o.build([], None)
    assert told == [["prod/gpu-prod-01", "sim/node-001"]]
    store.close()
