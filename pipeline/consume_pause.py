"""The consumer loop paused: what each failure does (the store away, the bus away, the
group rebalancing, memory run out, anything else), the batches in hand judged ahead while
the store is away, the wait that keeps this member in its group, and resuming.

``ConsumePause`` is mixed into ``pipeline.consume_loop.ConsumerLoop``, whose ``_run``
hands it each failure (``_outage``) and asks it to resume once the batches in hand are done.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from fleetwatch.pipeline.batches import Batch, Stats
from fleetwatch.pipeline.bus import BusError, BusRebalancing, Consumer, Partition
from fleetwatch.pipeline.out_of_memory import (
    MEMORY_ERRORS_MAX,
    OutOfMemory,
    out_of_memory,
    out_of_memory_said,
)
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.store.base import StoreError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fleetwatch.frame import Frame
    from fleetwatch.pipeline.bus import Message

log = logging.getLogger("fleetwatch.pipeline.processor")

# While the store is away, batches go on being polled and judged (alerts sent) until
# this many messages are held unstored; beyond, consumption pauses (memory stays bounded).
JUDGE_AHEAD_MESSAGES = 20_000


def _frames(held: deque[Batch]) -> int:
    return sum(len(b.frames or ()) for b in held)


def partitions_behind(consumer: Consumer) -> frozenset[Partition]:
    """The partitions that still hold messages not polled yet (a consumer's optional
    ``behind``; none known: none)."""
    behind = getattr(consumer, "behind", None)
    return frozenset(behind()) if callable(behind) else frozenset()


# What ``_resume`` says, by what paused consumption.
_RESUMED = {
    "bus": "bus is back; consuming again",
    "store": "consuming again",  # after "store is back: ..."
    "memory": "consuming again after running out of memory",
    "error": "consuming again after the unexpected error above",
}


class ConsumePause:
    """``_outage``: a failure of the loop's turn said, counted and waited out; ``_resume``:
    fetching again once the batches in hand are done."""

    stats: Stats
    ownership: Ownership
    _rebalancing = False  # the last pause was the group rebalancing, not an outage
    _fetching = True  # the consumer is not paused
    # The store failed (``StoreError``) and nothing has been stored since: the loop does
    # not say it is back, nor reset its backoff, until a batch is stored (``_complete``).
    _store_away = False
    _paused_for = ""  # what paused consumption last: a key of _RESUMED

    if TYPE_CHECKING:  # the per-batch work, in Processor
        def decode(self, messages: Sequence[Message]
                   ) -> tuple[list[Frame], Sequence[Message]]: ...
        def _send_dead_letters(self) -> None: ...
        def deaf(self) -> None: ...
        def judge(self, batch: Batch) -> bool: ...

    def _outage(self, exc: Exception, consumer: Consumer, stop: threading.Event,
                held: deque[Batch], max_messages: int, delay: float,
                memory_errors: int) -> int:
        """Say and count what failed (``exc``), pause, and wait ``delay`` (``_idle``);
        the count of memory errors in a row, this one included. ``OutOfMemory`` once they
        reach ``MEMORY_ERRORS_MAX``."""
        if isinstance(exc, BusError):
            self.deaf()  # the brokers did not answer: no time heard as quiet
        self._rebalancing = isinstance(exc, BusRebalancing)
        judging = isinstance(exc, StoreError)
        self._paused_for = "rebalance"
        if self._rebalancing:   # routine (a member joined or left): not an outage
            log.info("consumer group rebalancing (a member joined or left); "
                     "committing after it, in %.1fs (%s)", delay, exc)
        elif judging:
            self._paused_for = "store"
            self._store_away = True
            self.stats.store_errors += 1
            failing = self.stats.store_failing
            self.stats.store_failing = (time.time() if failing is None
                                        else failing[0], str(exc))
            if self._judge_held(held):
                log.warning("store unavailable (%s); frames held, not committed, "
                            "written again in %.1fs; alerts are still judged and "
                            "sent from %d frames in hand (up to %d messages)",
                            exc, delay, _frames(held), JUDGE_AHEAD_MESSAGES)
            else:
                log.warning("store unavailable (%s); frames held, not committed, "
                            "written again in %.1fs; %d frames in hand are NOT judged "
                            "yet: this processor needs the store to read its partitions' "
                            "open alerts first (no alert is sent until it can)",
                            exc, delay, _frames(held))
        elif isinstance(exc, BusError):
            self._paused_for = "bus"
            log.warning("bus unavailable (%s); pausing consumption, retry in "
                        "%.1fs", exc, delay)
        elif out_of_memory(exc):
            self._paused_for = "memory"
            self.stats.errors += 1
            memory_errors += 1
            if memory_errors >= MEMORY_ERRORS_MAX:
                raise OutOfMemory(out_of_memory_said(
                    exc, memory_errors, getattr(consumer, "replays", True))) from exc
            log.error("out of memory (%s: %s); pausing consumption, retry in "
                      "%.1fs", type(exc).__name__, exc, delay)
        else:
            self._paused_for = "error"
            self.stats.errors += 1
            log.exception("unexpected error; pausing consumption, retry in %.1fs",
                          delay)
        self.stats.paused = True
        self._idle(consumer, stop, delay, held, max_messages, judging)
        return memory_errors

    def _pause(self, consumer: Consumer, paused: bool = True) -> None:
        """Pause (or resume) fetching; the loop is in its waiting turn either way."""
        try:
            consumer.pause() if paused else consumer.resume()
        except Exception:  # noqa: BLE001 - paused or not, the loop waits its turn
            log.debug("pause/resume failed", exc_info=True)
        self._fetching = not paused
        self.stats.paused = True

    def _resume(self, consumer: Consumer) -> None:
        """Fetch again, the batches in hand being done. Whether the store is back is
        said only once a batch is stored (``_complete``): what failed may have been a
        read (open alerts of a node taken over) that nothing has tried again yet."""
        consumer.resume()
        self._fetching = True
        self.stats.paused = False
        # Said for what paused it: only a bus error is followed by "bus is back".
        paused_for, self._paused_for = self._paused_for, ""
        if self._rebalancing:
            log.info("consuming again")
        elif self._store_away:
            log.debug("consuming again; the store is not known to be back yet")
        else:
            log.info("%s", _RESUMED.get(paused_for, "consuming again"))
        self._rebalancing = False

    def _judge_held(self, held: deque[Batch]) -> bool:
        """The store is away: decode and judge the batches in hand, oldest first, so that
        their alerts are sent now (``Processor.judge``); one that cannot be judged yet
        holds back those behind it (batches are judged in order). False: a batch with
        frames could not be judged (its partitions' open alerts not read yet)."""
        for batch in held:
            if batch.frames is None:
                batch.frames, batch.sources = self.decode(batch.messages)
                self._send_dead_letters()
            if not self.judge(batch):
                if batch.frames:
                    return False
                batch.judged = True  # nothing to judge (all dead letters)
        return True

    def _idle(self, consumer: Consumer, stop: threading.Event, seconds: float,
              held: deque[Batch], max_messages: int, judging: bool) -> None:
        """Wait ``seconds`` before the batches in hand are written again, polling so that
        the group keeps this member. While the store is away (``judging``) and fewer
        than ``JUDGE_AHEAD_MESSAGES`` messages are held, new batches are polled and
        judged at once (their alerts are sent; they are stored later); else the consumer
        is paused and what a paused poll still brings is kept, in order."""
        deadline = time.monotonic() + seconds
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            room = judging and sum(len(b.messages) for b in held) < JUDGE_AHEAD_MESSAGES \
                and all(b.judged for b in held)
            try:
                if room != self._fetching:
                    self._pause(consumer, paused=not room)
                messages = consumer.poll(max_messages if room else 1,
                                         timeout_s=min(1.0, left))
                if messages:
                    held.append(Batch(messages, generation=self.ownership.generation,
                                      behind=partitions_behind(consumer)))
                    if room:
                        self._judge_held(held)
            except Exception:  # noqa: BLE001 - the bus is away: wait and try again
                stop.wait(min(1.0, max(0.0, deadline - time.monotonic())))
