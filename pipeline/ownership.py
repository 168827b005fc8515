"""Which nodes a processor owns, following its consumer's partitions.

Agents key every frame by its node, so a node's frames all come through one
partition, and the member of the group that owns the partition owns the
node: its alerts and every per-node state (detectors' history, energy
ledgers). ``Ownership`` is the consumer's ``Rebalance`` listener:

* a node's state is built on its first frame in a partition this member
  owns: its open alerts are taken from the store (read once per assignment
  that brings new partitions, then handed out node by node) into the book,
  and every ``on_loaded`` callback is called with them (the notifier adopts
  them: not notified again, still re-sent to Alertmanager);
* on a rebalance, each built node is put in the partition its name maps to
  under the topic's current partition count (``_relocate``: a broker back
  empty may make the topic again with another count), and the nodes whose
  partition is not this member's (moved away, or no longer the node's) are
  dropped: every ``on_revoked`` callback is called with their names, the
  alert book forgets them; after a count change the store's nodes that now
  map here are taken over as on a new partition (their alerts re-sent);
* frames polled before a rebalance from a partition no longer owned are
  not evaluated (their new owner replays them from the last commit);
* a partition assigned back (after a revocation, or none) may have had another owner
  meanwhile (this member was thrown out of its group: the brokers away, a
  long pause), which may have opened alerts for its nodes: the store's open
  alerts of those nodes that the book does not hold are loaded too, so that
  this member resolves them when their condition clears;
* nodes that send nothing are owned too: on an assignment that brings new
  partitions, the store says which nodes sent frames in the last
  ``EXPECT_S`` and when they last did; those whose key the producers'
  partitioner puts in a partition this member now owns (the consumer's
  ``partition_of``) are built as if they had sent a frame, and every
  ``on_expected`` callback is told their last frame's time. A node that fell
  silent while no processor watched it (a restart, a rolling upgrade, its
  partition moving) is then reported by its new owner, once. The log line that
  names those that have sent nothing yet waits ``grace_s`` (two of the fleet's
  usual intervals, at least ``MIN_GRACE_S``) on the processor's clock or the
  frames': right after an assignment nothing has been polled yet, and naming
  every node then reads as "these nodes are silent" (``takeover_quiet``).

With no bus (``Processor.process``) or before the first assignment, every
node counts as owned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence

from fleetwatch.frame import Frame
from fleetwatch.models.rack_silence import judged_clusters
from fleetwatch.pipeline.alerts import AlertBook, alert_key
from fleetwatch.pipeline.bus import Message, Partition
from fleetwatch.pipeline.store.base import Alert, Store, StoreError
from fleetwatch.pipeline.stored_nodes import EXPECT_S, NodeKey, last_seen, stopped_at
from fleetwatch.pipeline.takeover_quiet import Expected, QuietNodes

log = logging.getLogger(__name__)

# Called with the names of the nodes whose partitions went to another member: a name
# stands for that node in every cluster, as the bus keys frames by name alone (so all
# same-named nodes share a partition, and move together).
OnRevoked = Callable[[set[str]], None]
# Called with the open alerts taken from the store for nodes this member now owns.
OnLoaded = Callable[[list[Alert]], None]
# Called with the nodes this member now owns that have sent it nothing yet.
OnExpected = Callable[[list[Expected]], None]
# Which partition a key's messages go to (the consumer's ``partition_of``).
Locate = Callable[[bytes], Partition | None]

# A rack's ``rack_silent`` alert belongs to the rack's judge (``pipeline.rack_judges``).
RACK_DOWN_RULE = "rack_silent"


class Ownership:
    def __init__(self, store: Store, book: AlertBook,
                 on_revoked: Sequence[OnRevoked] = (),
                 on_loaded: Sequence[OnLoaded] = (),
                 on_expected: Sequence[OnExpected] = (),
                 clock: Callable[[], float] | None = None,
                 on_let_go: Sequence[OnLoaded] = ()) -> None:
        """``clock``: the processor's, against which loaded alerts stamped in the future
        are put back to now (``AlertBook.load``)."""
        self._store = store
        self._clock = clock
        self._book = book
        self._on_revoked = list(on_revoked)
        self._on_loaded = list(on_loaded)
        self._on_expected = list(on_expected)
        # Called with the open rack alerts this member hands to another judge.
        self._on_let_go = list(on_let_go)
        self.locate: Locate | None = None  # set from the consumer; None: expect nobody
        # The partitions that hold messages not polled yet (the consumer's ``behind``).
        self.lagging: Callable[[], Collection[Partition]] = frozenset
        # Every partition of the topic (the consumer's ``partitions``; none: not known).
        self.partitions: Callable[[], Collection[Partition]] = frozenset
        # Of the given partitions, those the group has stored to their end (the consumer's
        # ``settled``; it returns None where the brokers do not say; None: none is).
        self.settled: Callable[[Collection[Partition]], Collection[Partition] | None] | None \
            = None
        self._expect = False  # new partitions: ask the store which nodes they hold
        self.owned: set[Partition] | None = None  # None: no bus told us, all is ours
        self.generation = 0                       # bumped on every revocation
        self._revoking: set[Partition] = set()
        self._nodes: dict[NodeKey, Partition | None] = {}  # nodes whose state is built
        self._stored: dict[NodeKey, list[Alert]] | None = None  # open alerts not yet loaded
        # Built nodes of partitions assigned back: their open alerts in the store that
        # the book does not hold (opened by another owner meanwhile) are to be loaded.
        self._recheck: set[NodeKey] = set()
        # The clusters this member has had frames from: one store may hold several
        # clusters, each consumed from its own topic by its own processors.
        self._clusters: set[str] = set()
        # Nodes taken over that have sent nothing yet, named in the log once the grace is
        # over (``_say_expected``), and the fleet's usual interval that sets it.
        self._quiet = QuietNodes()
        # With several members, which racks' ``rack_silent`` alerts are this member's
        # (``pipeline.rack_judges``; None: every rack's). Checked again after a rebalance.
        self.judges: Callable[[str, str], bool] | None = None
        # The clusters the configuration names as this deployment's (``node.cluster``,
        # ``alerts.clusters``): their rack alerts are taken over with no frame of them.
        self.named: frozenset[str] = frozenset()
        self._rejudge_racks = False
        self.monotonic: Callable[[], float] = time.monotonic

    # -- the consumer's Rebalance listener (called inside poll) --
    def revoked(self, partitions: Sequence[Partition]) -> None:
        self.generation += 1
        self._revoking |= set(partitions)
        if self.owned is not None:
            self.owned -= set(partitions)

    def assigned(self, partitions: Sequence[Partition]) -> None:
        gained = set(partitions)
        lost, fresh = self._revoking - gained, gained - self._revoking
        self._revoking = set()
        self.owned = (self.owned or set()) | gained
        moved = self._relocate()
        # A node belongs to the partition its name maps to now: those mapped to another
        # member's (their partition moved away, or the topic's count changed) are dropped.
        away = {n for (_, n), p in self._nodes.items() if p is not None and p not in self.owned}
        if away:
            self.forget(away)
        if fresh or moved:
            # Read the store's open alerts again: they may be new to us. After a change of
            # the partition count, stored nodes that now map here are taken over too (those
            # of partitions that vanished: nobody else re-sends their alerts).
            self._stored = None
            self._expect = True
        # Nodes already built in partitions (re)assigned: this member may have been out of
        # its group meanwhile (with or without a revocation first).
        self._rejudge_racks = self._rejudge_racks or bool(gained or lost)
        back = {n for n, p in self._nodes.items() if p in gained}
        if back:
            self._recheck |= back
            self._stored = None
        log.info("partitions assigned: %s; moved away: %s", _names(gained), _names(lost))

    def _relocate(self) -> int:
        """Put each built node in the partition its name maps to under the topic's current
        partition count (the consumer's ``partition_of``); how many moved, said once.

        The count changes when a broker comes back empty and makes the topic again with its
        own count (Tansu: 4), or when partitions are added: each node's frames then go to
        another partition, and the alerts and state of a node follow it, not the number it
        was built under (or a node of a partition that no longer exists belonged to nobody:
        its alerts were never re-sent nor resolved)."""
        if self.locate is None:
            return 0
        moved: dict[NodeKey, Partition] = {}
        for key, partition in self._nodes.items():
            if partition is None:
                continue
            now = self.locate(key[1].encode())  # agents key frames by node name
            if now is not None and now != partition:
                moved[key] = now
        if not moved:
            return 0
        self._nodes.update(moved)
        mine = sum(p in (self.owned or ()) for p in moved.values())
        log.warning("%d node(s) now map to another partition than they were built under (the "
                    "topic's partition count changed: a broker that came back empty made it "
                    "again, or partitions were added): each node's alerts and state follow "
                    "its node; %d of them stay with this processor, the others go to the "
                    "member that owns their partition now", len(moved), mine)
        return len(moved)

    def forget(self, nodes: set[str]) -> None:
        """Drop every per-node state of the nodes named ``nodes`` (in every cluster)."""
        if not nodes:
            return
        for key in [k for k in self._nodes if k[1] in nodes]:
            del self._nodes[key]
            self._quiet.drop(key)
        self._book.drop(nodes)
        for hook in self._on_revoked:
            hook(nodes)

    def retire(self, nodes: set[str]) -> None:
        """Drop this member's own state of nodes forgotten for good (``NodeSilence.retired``);
        their alerts and the hooks are the caller's. A frame from one later builds it anew."""
        for key in [k for k in self._nodes if k[1] in nodes]:
            del self._nodes[key]
            self._quiet.drop(key)

    # -- per batch, on the processor's thread --
    def owned_frames(self, frames: list[Frame], sources: Sequence[Message] | None,
                     generation: int) -> list[Frame]:
        """The frames of partitions still owned, for a batch polled at ``generation``."""
        if generation == self.generation or self.owned is None or sources is None:
            return frames
        owned = self.owned
        return [f for f, m in zip(frames, sources, strict=True)
                if (m.topic, m.partition) in owned]

    def build(self, frames: Sequence[Frame], sources: Sequence[Message] | None) -> None:
        """Build the state of nodes seen for the first time (load their open alerts),
        and, after an assignment that brought new partitions, of the nodes they hold
        that have sent nothing yet (see the module's doc).

        Raises ``StoreError`` if the store cannot be read (the batch is retried).
        """
        known = self._nodes
        where: dict[NodeKey, Partition | None] = {}
        new_clusters = {f.cluster for f in frames} - self._clusters
        for i, f in enumerate(frames):
            key = (f.cluster, f.node)
            self._clusters.add(f.cluster)
            self._quiet.learn(key, f.ts)
            if key not in known and key not in where:
                # Its name's partition: a frame with no key may land on another of ours.
                at = self.locate(f.node.encode()) if self.locate is not None else None
                where[key] = at or ((sources[i].topic, sources[i].partition) if sources
                                    else None)
        expected = self._expected(where) if self._expect else []
        if self._recheck:
            self._load_missed()
        if self._rejudge_racks:
            self._rack_alerts()
        self._say_expected(frames, expected)
        # A cluster's first frames may bring no node to build (the assignment built every
        # node the store knows, as expected, before any frame came): its rack and room
        # alerts are taken over all the same.
        if not where and not new_clusters:
            return
        self._read_stored()
        assert self._stored is not None
        loaded: list[Alert] = []
        for node, partition in where.items():
            alerts = self._stored.pop(node, [])
            self._book.load(alerts, None if self._clock is None else self._clock())
            loaded.extend(alerts)
            known[node] = partition
        for cluster in sorted(new_clusters):
            # A cluster's rack and room alerts have no node: taken over with its first
            # frames here, or they stayed open in the store for ever beside new ones.
            held = {a.id for a in self._book.open}  # a rack's, taken over just before
            alerts = [a for a in self._stored.pop((cluster, ""), [])
                      if self._judged(a) and a.id not in held]
            self._book.load(alerts, None if self._clock is None else self._clock())
            loaded.extend(alerts)
        if loaded:
            for hook in self._on_loaded:
                hook(loaded)
        if expected:
            for hook in self._on_expected:
                hook(expected)

    def _say_expected(self, frames: Sequence[Frame], expected: list[Expected]) -> None:
        """Keep the newly ``expected`` nodes; forget those that sent a frame since; name
        the rest once the grace is over on either clock."""
        line = self._quiet.line(frames, expected, self.monotonic, self._clusters)
        if line is not None:
            log.info("%s", line)

    def _read_stored(self) -> None:
        """The store's open alerts, by node, unless read since the last assignment."""
        if self._stored is not None:
            return
        try:
            alerts = self._store.alerts()
        except StoreError:
            raise
        except Exception:  # a bug reading them back must not stop storing frames
            log.exception("cannot read the open alerts back; nodes start with none")
            alerts = []
        self._stored = {}
        for a in alerts:
            self._stored.setdefault((a.cluster, a.node), []).append(a)

    def _load_missed(self) -> None:
        """Load the open alerts of the nodes of partitions assigned back that the book does
        not hold: another member owned them meanwhile and opened them."""
        self._read_stored()
        assert self._stored is not None
        held = {alert_key(a) for a in self._book.open}
        missed: list[Alert] = []
        for node in sorted(self._recheck):
            if node in self._nodes:
                missed += [a for a in self._stored.pop(node, []) if alert_key(a) not in held]
        self._recheck = set()
        if not missed:
            return
        log.info("%d open alert(s) of nodes of partitions assigned back were opened by another "
                 "member meanwhile; taken over: %s", len(missed),
                 ", ".join(sorted({f"{a.rule} {a.cluster}/{a.node}" for a in missed})[:10]))
        self._book.load(missed, None if self._clock is None else self._clock())
        for hook in self._on_loaded:
            hook(missed)

    def _judged(self, alert: Alert) -> bool:
        """Is this open alert this member's? A ``rack_silent`` one is its rack's judge's."""
        return (alert.rule != RACK_DOWN_RULE or self.judges is None or self.whole()
                or self.judges(alert.cluster, alert.rack))

    def _rack_alerts(self) -> None:
        """After a rebalance: hand the ``rack_silent`` alerts of racks another member
        judges now to it (dropped from the book, no longer re-sent from here) and take
        over those of racks this member judges now (loaded from the store), so that one
        member carries each rack's alert across the rebalance, neither two nor none."""
        gone = [a for a in self._book.open if a.rule == RACK_DOWN_RULE and not self._judged(a)]
        if gone:
            self._book.forget(gone)
            for hook in self._on_let_go:
                hook(gone)
        stored = self._store.alerts()  # StoreError: the batch is retried, this with it
        held = {alert_key(a) for a in self._book.open}
        # The group's clusters (``rack_silence.judged_clusters``, as the rack's judge judges
        # them): those it had frames from and those its configuration names; no other, not
        # even the store's one cluster for a member that never had a frame: it may be
        # another deployment's.
        clusters = judged_clusters(self._clusters, self.named)
        racks = [a for a in stored if a.rule == RACK_DOWN_RULE and a.cluster in clusters
                 and a.state != "resolved" and alert_key(a) not in held]
        # A rack whose partition is not known yet (the topic's size not yet learned): asked
        # again at the next batch, or nobody would take its alert over.
        self._rejudge_racks = self.locate is not None and not self.whole() and any(
            self.locate(a.rack.encode()) is None for a in racks)
        taken = [a for a in racks if self._judged(a)]
        if taken:
            log.info("rack alert(s) of racks this processor now judges taken over: %s",
                     ", ".join(sorted(f"{a.cluster}/{a.rack}" for a in taken)[:10]))
            self._book.load(taken, None if self._clock is None else self._clock())
            for hook in self._on_loaded:
                hook(taken)

    def _expected(self, where: dict[NodeKey, Partition | None]) -> list[Expected]:
        """Add to ``where`` the stored nodes of owned partitions not yet built; their
        (cluster, rack, node, last frame's time)."""
        if self.locate is None or self.owned is None or not self._on_expected:
            self._expect = False
            return []
        try:
            since = time.time() - EXPECT_S
            seen = last_seen(self._store, since)
            # A node whose last frame said its agent stopped (drained, scaled down) stays
            # stopped for its new owner: not paged silent (nor counted in a rack).
            stops = stopped_at(self._store, since)
        except StoreError:
            raise
        except Exception:  # a bug here must not stop storing frames
            log.exception("cannot read which nodes the store knows; silent nodes of the "
                          "partitions taken over go unreported until they send again")
            seen, stops = {}, {}
        self._expect = False
        out: list[Expected] = []
        for key, (rack, ts) in sorted(seen.items()):
            if key in self._nodes or key in where:
                continue
            partition = self.locate(key[1].encode())  # agents key frames by node name
            if partition is not None and partition in self.owned:
                where[key] = partition
                out.append((key[0], rack, key[1], ts, stops.get(key, -1.0) >= ts))
        return out

    def whole(self) -> bool:
        """Does this member read every partition of its topic (no bus: it reads all), so
        that every node of a rack is its own? False while the partitions are not known."""
        if self.owned is None:
            return True
        every = self.partitions()
        return bool(every) and set(every) <= self.owned

    @property
    def nodes(self) -> Collection[NodeKey]:
        """The built nodes, as (cluster, node)."""
        return self._nodes.keys()

    def behind(self, partitions: Collection[Partition] | None = None
               ) -> dict[NodeKey, Partition]:
        """The built nodes ((cluster, node)) of ``partitions`` (default: those that hold
        messages not polled yet, now), with their partition."""
        lagging = self.lagging() if partitions is None else partitions
        if not lagging:
            return {}
        return {n: p for n, p in self._nodes.items() if p is not None and p in lagging}

    def placement(self) -> dict[NodeKey, Partition | None]:
        """Each built node's ((cluster, node)) partition (None: no bus)."""
        return dict(self._nodes)


def _names(partitions: set[Partition]) -> str:
    return ", ".join(f"{t}/{p}" for t, p in sorted(partitions)) or "none"
