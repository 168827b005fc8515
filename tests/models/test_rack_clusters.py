"""Which clusters' racks a member judges (``rack_silent``) when several processors share a
topic: those it has had frames from and those its configuration names as its deployment's
(``node.cluster`` where set, ``alerts.clusters``); no other, not even, for a member that
has had no frame at all, the one cluster the store holds. A small cluster whose nodes all
map to another member's partitions, while its rack's name maps to this member's, is judged
here all the same; a cluster of another deployment that only shares the store never is."""

from __future__ import annotations

import dataclasses

from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.models.rack_silence import Remote, judged_clusters
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

# Cluster "big" spread over both members; "small": every node read by the other member,
# its one rack "rs" judged by this one (its name maps to this member's partition).
BIG = {"a0": "ra", "a1": "ra", "a2": "ra", "a3": "ra"}
SMALL = {"s0": "rs", "s1": "rs", "s2": "rs"}


def _run(judge: NodeSilence, mine: tuple[str, ...], others: dict[tuple[str, str], str],
         start: float, end: float, down: set[str], clusters: set[str],
         book: AlertBook) -> None:
    """Every 5 s: ``mine`` (cluster big) send frames to the judge; ``others`` ((cluster,
    node) -> rack) are the other member's, known to the judge from the store, as every
    member writes its frames there; ``down`` send nothing from ``start`` on."""
    stored: dict[tuple[str, str], float] = {}
    t = start - 300.0
    while t < end:
        for key in others:
            if t < start or key[1] not in down:
                stored[key] = t
        remote = [Remote(c, others[(c, n)], n, ts) for (c, n), ts in stored.items()]
        judge.share(lambda c, r: r == "rs", remote, clusters)
        frames = [dataclasses.replace(node(t, [busy(60)], name=n, rack=BIG[n]), cluster="big")
                  for n in mine if t < start or n not in down]
        findings = judge.update(frames, wall=t + 0.1) if frames else judge.tick(t + 0.1)
        book.apply(book.observe(frames, findings))
        t += 5.0


def _racks(book: AlertBook) -> list[tuple[str, str]]:
    return [(a.cluster, a.rack) for a in book.open if a.rule == "rack_silent"]


def _judge() -> tuple[NodeSilence, AlertBook]:
    d = NodeSilence()
    d.whole(False)
    return d, AlertBook(requirements=d.rules)


OTHERS = {**{("big", n): BIG[n] for n in ("a2", "a3")},
          **{("small", n): r for n, r in SMALL.items()}}


def test_a_small_cluster_named_by_the_configuration_is_judged_without_a_frame_of_it() -> None:
    judge, book = _judge()
    _run(judge, ("a0", "a1"), OTHERS, 1000.0, 1200.0, {"s0", "s1", "s2"}, {"big", "small"},
         book)
    assert _racks(book) == [("small", "rs")]
    [alert] = [a for a in book.open if a.rule == "rack_silent"]
    assert alert.evidence["silent_nodes"] == 3 and alert.evidence["known_nodes"] == 3


def test_a_cluster_the_configuration_does_not_name_is_another_deployments() -> None:
    """Before, the small cluster was judged by no member, named or not: its rack's judge had
    no frame of it. One that is named nowhere still is not: it may be another deployment's
    (its own topic, its own processors) that merely shares the store."""
    judge, book = _judge()
    _run(judge, ("a0", "a1"), OTHERS, 1000.0, 1200.0, {"s0", "s1", "s2"}, {"big"}, book)
    assert _racks(book) == []


def test_a_member_that_never_had_a_frame_judges_only_the_clusters_named() -> None:
    """A small fleet: every node maps to the other member's partitions. The store's one
    cluster may be another deployment's (its own topic and processors, sharing only the
    store): a member that had no frame judges only the clusters its configuration names,
    and with none named, none (before, it judged the store's one cluster, and paged
    another deployment's racks to its own receivers)."""
    small = {("small", n): r for n, r in SMALL.items()}
    for named, racks in ((set(), []), ({"default"}, []), ({"small"}, [("small", "rs")])):
        judge, book = _judge()
        _run(judge, (), {**small, ("small", "s9"): "rx"}, 1000.0, 1200.0, {"s0", "s1", "s2"},
             named, book)
        assert _racks(book) == racks


def test_judged_clusters() -> None:
    assert judged_clusters({"a"}, {"b"}) == {"a", "b"}
    assert judged_clusters(set(), {"b"}) == {"b"}
    assert judged_clusters(set(), ()) == set()
