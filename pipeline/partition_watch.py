"""A processor that owns no partition of its topic: said once after a while, and again
when it owns some (``PartitionWatch``, run by ``pipeline.consume_loop`` in a thread of
its own). Pure: it returns the line to log; the loop logs it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class PartitionWatch:
    """Says when this member has owned no partition for ``after_s`` (once), and again when
    it owns some.

    A member with no partitions consumes nothing and otherwise looks healthy: it
    answers, its counters stand still, its lag is 0. Either the group has more
    members than the topic has partitions, or the member is stuck joining its group
    (kafka-python's ``poll`` blocks inside the join while the broker's coordinator
    does not answer): the loop's thread is then blocked too, so the watch runs in a
    thread of its own (``ConsumerLoop.run``).
    """

    def __init__(self, after_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.after_s = after_s
        self._clock = clock
        self._since: float | None = clock()  # owning none since (None: owns some)
        self._warned = False

    def check(self, owned: int) -> tuple[int, str] | None:
        """The line to log now (its level and text), if any, for a member that owns
        ``owned`` partitions."""
        now = self._clock()
        if owned:
            since, warned = self._since, self._warned
            self._since, self._warned = None, False
            if not warned or since is None:
                return None
            return logging.INFO, (f"this processor owns {owned} partition(s) again after "
                                  f"{now - since:.0f} s with none; consuming")
        if self._since is None:
            self._since = now
        if self._warned or now - self._since < self.after_s:
            return None
        self._warned = True
        return logging.WARNING, (
            f"this processor has owned no partition of its topic for {now - self._since:.0f} "
            "s: it consumes nothing (fleetwatch_processor_partitions_owned is 0). Either the "
            "group has more members than the topic has partitions (bus.partitions; a spare "
            "member is fine while another consumes), or it is stuck joining its consumer group "
            "(the broker's group coordinator does not answer: see the broker's log; another "
            "bus.group is a way out)")
