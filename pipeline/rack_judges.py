"""Which racks this member judges (``rack_silent``) when several members share its topic,
and what the shared store says of their other nodes.

Agents key frames by node, so with several processors in a consumer group a rack's nodes
are spread over members. Each rack is judged by one member only: the one that owns the
partition the rack's name maps to (the producers' partitioner, as for a node's name: the
consumer's ``partition_of``), so that a rack is paged once, whichever members read its
nodes, and its judge moves with the partitions on a rebalance. The judge knows its own
nodes of the rack; of the others it knows their newest frame's time, which every member
writes to the store: read here at most every ``every_s`` (an eighth of ``silent_min_s``,
0.5 s to 5 s: a live node read that late is far from half its limit, the least a node
must be quiet to count). The nodes heard in the last ``EXPECT_S`` (a week) are read only
when the member's partitions change (an assignment or a rebalance: new racks to judge)
and every ``FULL_EVERY_S`` (hours); every other read asks only for the last ``RECENT_S``
since the previous read (longer after a read that failed), merged into what the judge
knows, so that a member's idle cost does not grow with the history the store holds. A
node leaves when its newest frame is older than ``EXPECT_S``, as the member's own do. A
node whose newest frame said its agent stopped cleanly
(``host_agent_stopped``: a scale-down) is left out, as the member's own are. A read that
fails (``StoreError``) holds the racks' last findings (``rack_silence.SharedRacks``): a
store away resolves no rack alert and raises none.

Before each read, the brokers are asked which of the other members' partitions the group
has stored to their end (its committed offsets: ``bus.kafka_settled``): the nodes of those
are judged on the judge's own time, the others' each on the newest frame its own partition
has in the store (``Remote.lane``: members catch a backlog up unevenly; ``rack_remote``).
Where the brokers do not say, none is settled, and they are asked again only
``SETTLED_RETRY_S`` later. Only while the judge's time is within the read's window
(``window``: a short read sees no frame stamped before it, so a member whose stream runs
minutes behind the clock, a backlog or a replay stamped in the past, would find settled
nodes older than they are): else all are judged as unsettled.

A member reading every partition (or no bus) judges every rack on its own frames alone:
nothing here is read.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Sequence

from fleetwatch.frame import AGENT_STOPPED
from fleetwatch.models.rack_silence import Remote
from fleetwatch.pipeline.bus import Partition
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.store.base import Store, StoreError
from fleetwatch.pipeline.stored_nodes import EXPECT_S, NodeKey, last_seen

log = logging.getLogger(__name__)

FULL_EVERY_S = 6 * 3600.0  # a full re-read, in case a late write was missed
RECENT_S = 120.0  # a short read's margin: a member writes its frames a little late
SLOW_S = 1.0  # a read longer than this is said (it holds the member's frames meanwhile)
MIN_EVERY_S, MAX_EVERY_S = 0.5, 5.0
SETTLED_RETRY_S = 30.0  # after the brokers did not say which partitions are settled


class RackJudges:
    def __init__(self, store: Store, ownership: Ownership, detectors: Sequence[object],
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 clusters: Collection[str] = ()) -> None:
        """``clusters``: those the configuration names as this deployment's, whose racks
        are judged though no frame of them came to this member (``node.cluster`` where
        set, ``alerts.clusters``: ``wiring.deployment_clusters``)."""
        self._store, self._ownership = store, ownership
        self.clusters = frozenset(clusters)
        self._sharers = [d for d in detectors if callable(getattr(d, "share", None))]
        silent_min = min((getattr(getattr(d, "c", None), "silent_min_s", 60.0)
                          for d in self._sharers), default=60.0)
        self.every_s = min(MAX_EVERY_S, max(MIN_EVERY_S, silent_min / 8))
        self._clock, self._monotonic = clock, monotonic
        self._seen: dict[NodeKey, tuple[str, float]] = {}
        self._stops: dict[NodeKey, float] = {}  # when each node's agent last stopped cleanly
        self._read_at = self._full_at = -math.inf
        self._full_owned: frozenset[Partition] | None = None  # the partitions at a full read
        self._read_to: float | None = None  # the store's time up to the last good read
        self._away = False  # the last read failed (said once until one succeeds)
        # Each rack's partition (a murmur2 a name), found again after every read: the
        # detector asks for each node's rack on every batch.
        self._partition: dict[str, Partition] = {}
        # Each node's partition, for the topic's size then (a node's frames are keyed by
        # its name), and when to ask which partitions are settled again after the brokers
        # did not say.
        self._nodes_at: dict[str, Partition | None] = {}
        self._nodes_size = 0
        self._settled_retry = -math.inf
        # The oldest frame time the last good read could return (a short read asks only
        # for the last minutes): a frame stamped earlier, stored since, is not seen.
        self.window: float | None = None

    def judges(self, cluster: str, rack: str) -> bool:
        """Is this member the judge of ``rack``? (No bus, or before any assignment: yes.)"""
        locate, owned = self._ownership.locate, self._ownership.owned
        if locate is None or owned is None:
            return True
        partition = self._partition.get(rack)
        if partition is None:  # as agents key a node's frames by its name
            partition = locate(rack.encode())
            if partition is None:  # the topic's size not known yet: asked again next time
                return False
            self._partition[rack] = partition
        return partition in owned

    def feed(self) -> None:
        """Tell the detectors which racks are theirs and what the store says of the other
        members' nodes (at most every ``every_s``; nothing while this member reads every
        partition)."""
        if not self._sharers or self._ownership.whole():
            return
        now = self._monotonic()
        if now < self._read_at + self.every_s:
            return
        self._read_at = now
        self._partition = {}  # the topic's partition count may have changed since
        settled = self._settled(now)  # before the store: what is settled is stored
        remote = self._read(now, settled)
        for d in self._sharers:
            d.share(self.judges, remote, self.clusters,  # type: ignore[attr-defined]
                    self.window)

    def _settled(self, now: float) -> frozenset[Partition]:
        """The other members' partitions the group has stored to their end (its committed
        offsets: see the module); none where the brokers do not say, asked again only
        ``SETTLED_RETRY_S`` later (each ask holds the member's frames meanwhile)."""
        ask, owned = getattr(self._ownership, "settled", None), self._ownership.owned
        if ask is None or owned is None or now < self._settled_retry:
            return frozenset()
        others = set(self._ownership.partitions()) - owned
        if not others:
            return frozenset()
        try:
            out = ask(others)
        except Exception:  # a bug here must not stop the loop: judged as before
            log.exception("cannot read how far the other members have stored their partitions")
            out = None
        if out is None:  # the brokers away: not asked again at every read meanwhile
            self._settled_retry = now + SETTLED_RETRY_S
            return frozenset()
        return frozenset(out)

    def _lanes(self) -> Callable[[str], Partition | None]:
        """Each node's partition (by name: agents key its frames by it; None: the topic's
        size not known), kept while the topic's size stays."""
        locate = self._ownership.locate
        if locate is None:
            return lambda node: None
        size = len(self._ownership.partitions())
        if size != self._nodes_size:
            self._nodes_at, self._nodes_size = {}, size
        at = self._nodes_at

        def lane(node: str) -> Partition | None:
            if node not in at:
                at[node] = locate(node.encode())
            return at[node]
        return lane

    def _read(self, now: float, settled: frozenset[Partition] = frozenset()
              ) -> list[Remote] | None:
        """Every node's newest frame time from the store (None: it cannot be read), and
        whether its partition is ``settled`` (the group stored it to its end)."""
        clock = self._clock()
        owned = frozenset(self._ownership.owned or ())
        full = (self._read_to is None or owned != self._full_owned
                or now >= self._full_at + FULL_EVERY_S)
        since = clock - EXPECT_S
        if not full and self._read_to is not None:
            since = max(since, min(clock, self._read_to) - RECENT_S)
        started = self._monotonic()
        try:
            seen = last_seen(self._store, since)
            stops = self._store.latest(AGENT_STOPPED, int(since * 1000))
        except StoreError as exc:
            if not self._away:
                log.warning("cannot read the other members' nodes from the store (%s): the "
                            "racks this processor judges keep their last finding until it "
                            "answers", exc)
            self._away = True
            return None
        except Exception:  # a bug here must not stop the loop: racks held as they are
            log.exception("cannot read the other members' nodes from the store; racks held")
            return None
        took = self._monotonic() - started
        if took > SLOW_S:
            log.warning("reading the other members' nodes from the store took %.1f s (%s "
                        "read, since %.0f s ago): frames wait meanwhile", took,
                        "full" if full else "short", clock - since)
        if self._away:
            log.info("the store answers again: racks judged on the other members' nodes again")
        self._away = False
        self._read_to = clock
        self.window = since  # the oldest stamp this read could return
        if full:
            self._seen, self._stops = seen, {}
            self._full_at, self._full_owned = now, owned
        else:
            self._merge(seen)
        for k, ts_ms, value in stops:
            if value == 1.0:
                key = (k.cluster, k.node)
                self._stops[key] = max(self._stops.get(key, 0.0), ts_ms / 1000.0)
        self._forget(clock - EXPECT_S)
        # A node whose newest frame said its agent stopped cleanly (a scale-down) left: not
        # silent, and not counted in its rack, as for the member's own nodes.
        # Each node with its partition: judged on the time that partition has reached in
        # the store (members catch a backlog up unevenly), or on the judge's if ``settled``.
        lane = self._lanes()
        out = []
        for (c, node), (rack, ts) in self._seen.items():
            if self._stops.get((c, node), -math.inf) < ts:
                at = lane(node)
                out.append(Remote(c, rack, node, ts, at is not None and at in settled, at))
        return out

    def _merge(self, seen: dict[NodeKey, tuple[str, float]]) -> None:
        """Keep each node's newest time (and its rack then) across short reads."""
        for key, (rack, ts) in seen.items():
            old = self._seen.get(key)
            if old is None or ts > old[1]:
                self._seen[key] = (rack, ts)

    def _forget(self, before: float) -> None:
        """Nodes unheard since ``before`` left, as a full read would not find them."""
        self._seen = {k: v for k, v in self._seen.items() if v[1] >= before}
        self._stops = {k: ts for k, ts in self._stops.items() if ts >= before}
