"""Two deployments share one store, each with its own topic and processors. A's agents set
cluster ``east``; its processors' file leaves ``node.cluster`` out (an agent setting). B's
agents are left at the default cluster, ``default``. B's rack loses power: A's member that is
the judge of that rack's name (several members: ``pipeline.rack_judges``) reads B's nodes
from the store as it reads its own group's, and must leave them to B's processors. Before,
A counted its own unset ``node.cluster``, "default", among its deployment's clusters, judged
B's rack and paged it to A's webhook. Named by A's configuration (``alerts.clusters``), the
cluster is A's and its rack is judged: the same reads raise it. On every store backend."""

from __future__ import annotations

import dataclasses
import time
import uuid

from fleetwatch.config import DetectorsConfig, load
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.rack_judges import RackJudges
from fleetwatch.wiring import deployment_clusters
from tests.models.helpers import busy, node
from tests.store.backends import Backend

STEP_S, STOP_S, END_S = 5.0, 60.0, 150.0


class JudgeOfTheRunsRacks:
    """A's member reading partition 0 of two, the one this run's rack names map to here (its
    node names, and the rack names of other tests sharing the server: partition 1). B's
    nodes are read by no member of A's group (another topic): they are only in the store."""

    owned = {("a", 0)}

    def __init__(self, run: str) -> None:
        self.run = run

    @staticmethod
    def partitions() -> set[tuple[str, int]]:
        return {("a", 0), ("a", 1)}

    def locate(self, key: bytes) -> tuple[str, int]:
        name = key.decode()
        return ("a", 0) if name.startswith("rack-") and name.endswith(self.run) else ("a", 1)

    def whole(self) -> bool:
        return False


def _frame(cluster: str, rack: str, name: str, ts: float):  # noqa: ANN202
    return dataclasses.replace(node(ts, [busy(60)], name=name, rack=rack), cluster=cluster)


def _b_racks_judged_by_a(backend: Backend, env: dict[str, str]) -> list[tuple[str, str]]:
    """B's nodes (rack ``down`` stops at STOP_S, rack ``up`` sends on) in the store; A's
    judge, configured by ``env``, runs over them with its own nodes' frames: the racks of
    cluster "default" it raises ``rack_silent`` for."""
    run = uuid.uuid4().hex[:8]
    down, up = f"rack-01-{run}", f"rack-02-{run}"
    t0 = time.time() - 600.0  # in the recent past, as a stream a little behind would be
    steps = [t0 + i * STEP_S for i in range(int(END_S / STEP_S))]
    b_nodes = [(down, f"d{i}-{run}") for i in range(3)] + [(up, f"d{i}-{run}") for i in (3, 4)]
    a_nodes = [(f"rack-00-{run}", f"e{i}-{run}") for i in range(3)]
    config = load(env=env)
    judge = NodeSilence(DetectorsConfig(silent_min_s=20.0))
    judge.whole(False)
    clock = [t0]
    judges = RackJudges(backend.store, JudgeOfTheRunsRacks(run),  # type: ignore[arg-type]
                        [judge], clock=lambda: clock[0], monotonic=lambda: clock[0],
                        clusters=deployment_clusters(config))
    raised: set[tuple[str, str]] = set()
    for t in steps:
        # Each deployment's processors store their frames of the step (B's rack ``down``
        # loses power at STOP_S); A's judge then reads the store and judges its batch.
        mine = [_frame("east", r, n, t) for r, n in a_nodes]
        backend.store.write([_frame("default", r, n, t) for r, n in b_nodes
                             if r == up or t < t0 + STOP_S] + mine)
        backend.settle()
        clock[0] = t + 0.1
        judges.feed()
        findings = judge.update(mine, wall=t + 0.1)
        raised |= {(f.cluster, f.rack) for f in findings
                   if f.rule == "rack_silent" and f.cluster == "default"}
    return sorted(raised)


def test_another_deployments_default_cluster_is_not_judged(backend: Backend) -> None:
    assert _b_racks_judged_by_a(backend, {}) == []


def test_a_cluster_the_configuration_names_is_judged(backend: Backend) -> None:
    [(cluster, rack)] = _b_racks_judged_by_a(backend, {"FLEETWATCH_ALERTS_CLUSTERS": "default"})
    assert cluster == "default" and rack.startswith("rack-01-")
