"""One processor (one consumer group) for several clusters whose node names repeat
(node001 in every cluster): a node is its (cluster, node), across restarts too. Over the
in-process bus and a real SQLite store."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from fleetwatch.frame import Frame
from fleetwatch.pipeline.takeover_quiet import expected_line
from tests.core.test_processor_hardening import frame
from tests.core.test_silent_takeover import STEP, T0, run_until_stored, silent_alerts


def ticks(nodes: tuple[tuple[str, str], ...], start: int, end: int) -> list[Frame]:
    return [dataclasses.replace(frame(n, T0 + STEP * k), cluster=c)
            for k in range(start, end) for c, n in nodes]


EAST, EU, EU2 = ("c-east", "node001"), ("c-eu", "node001"), ("c-eu", "node002")


def test_a_node_dead_in_one_cluster_is_paged_while_its_name_lives_in_another(
        tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    run_until_stored(db, ticks((EAST, EU), 0, 6) + ticks((EAST,), 6, 24), 12 + 18)
    alerts = silent_alerts(db)
    assert [(a.cluster, a.node, a.state) for a in alerts] == [("c-eu", "node001", "firing")]


def test_a_node_that_died_while_no_processor_ran_is_paged_beside_its_namesake(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "store.db"
    run_until_stored(db, ticks((EAST, EU, EU2), 0, 6), 18)
    assert silent_alerts(db) == []
    # The processor is down; c-eu's node001 dies. The new one hears c-east's node001 only.
    with caplog.at_level(logging.INFO, logger="fleetwatch.pipeline.ownership"):
        after = run_until_stored(db, ticks((EAST, EU2), 6, 24), 18 + 36)
    alerts = silent_alerts(db)
    assert [(a.cluster, a.node, a.state) for a in alerts] == [("c-eu", "node001", "firing")]
    assert set(after.ownership.nodes) == {EAST, EU, EU2}
    assert "c-eu/node001" in caplog.text


def test_the_log_names_nodes_by_cluster_and_sets_apart_clusters_never_heard() -> None:
    expected = [("p-eu", "r1", "node001", 1.0), ("c-east", "r1", "node002", 1.0),
                ("c-north", "r1", "node101", 1.0)]
    line = expected_line(expected, {"p-eu"})
    assert line.startswith("1 node(s) of the partitions taken over have sent nothing yet: "
                           "p-eu/node001; 2 node(s) the store holds of cluster(s) "
                           "c-east, c-north map to the partitions taken over but no frame")
    assert "node002" not in line and "node101" not in line
    assert expected_line(expected[:1], {"p-eu"}).endswith("sent nothing yet: p-eu/node001")
