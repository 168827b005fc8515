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
* on a rebalance, the nodes of the partitions that really moved away
  (revoked and not assigned back) are dropped: every ``on_revoked``
  callback is called with their names, the alert book forgets them;
* frames polled before a rebalance from a partition no longer owned are
  not evaluated (their new owner replays them from the last commit).

With no bus (``Processor.process``) or before the first assignment, every
node counts as owned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.bus import Message, Partition
from fleetwatch.pipeline.store.base import Alert, Store, StoreError

log = logging.getLogger(__name__)

# Called with the names of the nodes whose partitions went to another member.
OnRevoked = Callable[[set[str]], None]
# Called with the open alerts taken from the store for nodes this member now owns.
OnLoaded = Callable[[list[Alert]], None]


class Ownership:
    def __init__(self, store: Store, book: AlertBook,
                 on_revoked: Sequence[OnRevoked] = (),
                 on_loaded: Sequence[OnLoaded] = ()) -> None:
        self._store = store
        self._book = book
        self._on_revoked = list(on_revoked)
        self._on_loaded = list(on_loaded)
        self.owned: set[Partition] | None = None  # None: no bus told us, all is ours
        self.generation = 0                       # bumped on every revocation
        self._revoking: set[Partition] = set()
        self._nodes: dict[str, Partition | None] = {}  # nodes whose state is built
        self._stored: dict[str, list[Alert]] | None = None  # open alerts not yet loaded

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
        if lost:
            self.forget({n for n, p in self._nodes.items() if p in lost})
        if fresh:
            self._stored = None  # read the store's open alerts again: they may be new to us
        log.info("partitions assigned: %s; moved away: %s", _names(gained), _names(lost))

    def forget(self, nodes: set[str]) -> None:
        """Drop every per-node state of ``nodes``."""
        if not nodes:
            return
        for n in nodes:
            self._nodes.pop(n, None)
        self._book.drop(nodes)
        for hook in self._on_revoked:
            hook(nodes)

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
        """Build the state of nodes seen for the first time: load their open alerts.

        Raises ``StoreError`` if the store cannot be read (the batch is retried).
        """
        known = self._nodes
        new = {f.node for f in frames}.difference(known)
        if not new:
            return
        if self._stored is None:
            try:
                alerts = self._store.alerts()
            except StoreError:
                raise
            except Exception:  # a bug reading them back must not stop storing frames
                log.exception("cannot read the open alerts back; nodes start with none")
                alerts = []
            self._stored = {}
            for a in alerts:
                self._stored.setdefault(a.node, []).append(a)
        where: dict[str, Partition | None] = dict.fromkeys(new)
        if sources is not None:
            for f, m in zip(frames, sources, strict=True):
                if f.node in new:
                    where[f.node] = (m.topic, m.partition)
        loaded: list[Alert] = []
        for node, partition in where.items():
            alerts = self._stored.pop(node, [])
            self._book.load(alerts)
            loaded.extend(alerts)
            known[node] = partition
        if loaded:
            for hook in self._on_loaded:
                hook(loaded)

    @property
    def nodes(self) -> Collection[str]:
        return self._nodes.keys()


def _names(partitions: set[Partition]) -> str:
    return ", ".join(f"{t}/{p}" for t, p in sorted(partitions)) or "none"
