"""The processor's loop over a consumer: poll, decode, store in writer threads, evaluate
and commit in order, pause while the store or the bus is away, drain on stop.

``ConsumerLoop`` is mixed into ``pipeline.processor.Processor``, which does the
per-batch work (``decode``, ``_write``, ``_bisect``, ``_evaluate``) and holds
the state named below; this module only orders those steps over a bus.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as _wait
from typing import TYPE_CHECKING

from fleetwatch.pipeline.batches import MAX_SURPRISES, Batch, Stats, settle
from fleetwatch.pipeline.bus import (
    BusBroken,
    BusError,
    BusRebalancing,
    Consumer,
    Message,
    Partition,
)
from fleetwatch.pipeline.gc_timer import collect as _collect
from fleetwatch.pipeline.gc_timer import collect_on_a_timer as _collect_on_a_timer
from fleetwatch.pipeline.out_of_memory import (
    MEMORY_ERRORS_MAX,
    OutOfMemory,
    out_of_memory,
    out_of_memory_said,
)
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.partition_watch import PartitionWatch
from fleetwatch.pipeline.store.base import Store, StoreError, StoreLost, StoreRejected
from fleetwatch.retry import Backoff

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fleetwatch.frame import Frame
    from fleetwatch.models import Finding

log = logging.getLogger("fleetwatch.pipeline.processor")

# While the store is away, batches go on being polled and judged (alerts sent) until
# this many messages are held unstored; beyond, consumption pauses (memory stays bounded).
JUDGE_AHEAD_MESSAGES = 20_000


def _frames(held: deque[Batch]) -> int:
    return sum(len(b.frames or ()) for b in held)


def _unheard(consumer: Consumer) -> float | None:
    """How long ago the brokers last answered (0: not known), or None when a poll that
    brought nothing does not mean that nothing was sent: the brokers are away, hang, or
    the group rebalances (a consumer's optional ``listening`` and ``unheard_s``)."""
    listening = getattr(consumer, "listening", None)
    if callable(listening) and not listening():
        return None
    unheard = getattr(consumer, "unheard_s", None)
    return float(unheard()) if callable(unheard) else 0.0


def _behind(consumer: Consumer) -> frozenset[Partition]:
    """The partitions that still hold messages not polled yet (a consumer's optional
    ``behind``; none known: none)."""
    behind = getattr(consumer, "behind", None)
    return frozenset(behind()) if callable(behind) else frozenset()


class ConsumerLoop:
    """``run``: the steps of ``Processor.handle`` over a consumer, pipelined."""

    store: Store
    stats: Stats
    ownership: Ownership
    drained: tuple[int, int]
    _stop: threading.Event
    _rebalancing = False  # the last pause was the group rebalancing, not an outage
    _fetching = True  # the consumer is not paused
    # The store failed (``StoreError``) and nothing has been stored since: the loop does
    # not say it is back, nor reset its backoff, until a batch is stored (``_complete``).
    _store_away = False
    _paused_for = ""  # what paused consumption last: a key of _RESUMED
    _clock_findings: list[Finding]  # node_clock_skew findings not judged yet (Processor)
    drain_error: BaseException | None = None  # why batches were left unfinished at stop

    if TYPE_CHECKING:  # the per-batch work, in Processor
        def decode(self, messages: Sequence[Message]
                   ) -> tuple[list[Frame], Sequence[Message]]: ...
        def _send_dead_letters(self) -> None: ...
        def _evaluate(self, batch: Batch, points: int, t0: float) -> None: ...
        def _write(self, frames: list[Frame], sources: Sequence[Message] | None,
                   failed: BaseException | None = None) -> int: ...
        def _bisect(self, frames: list[Frame], sources: Sequence[Message] | None,
                    exc: BaseException, surprise: bool) -> int: ...
        def summarise_dead_letters(self, final: bool = False) -> None: ...
        def tick(self, unheard_s: float = 0.0) -> None: ...
        def deaf(self) -> None: ...
        def judge(self, batch: Batch) -> bool: ...

    def run(self, consumer: Consumer, stop: threading.Event, max_messages: int = 2000,
            maintain_every_s: float = 30.0, collect_every_s: float = 10.0,
            drain_s: float | Callable[[], float] = 30.0,
            no_partitions_warn_s: float = 60.0) -> None:
        """Poll → decode → store → evaluate → commit, until ``stop`` is set.

        Batches overlap: while writer threads store batch N (and N+1 when the
        store takes ``concurrent_writes`` of 2 or more), this thread polls and
        decodes the next. Batches are evaluated (detectors, alerts) and
        committed strictly in order, each only once it is stored: at-least-once.
        Overlapping writes keep the store busy across batch boundaries, where a
        single writer would leave it idle while it encodes the next batch's
        first request and the processor idle while the store takes the last.

        While the store or the broker is away, the batches in hand are kept and
        retried with backoff and the consumer is paused (polled, so it stays in
        its group, but fetching nothing): memory stays bounded, and no offset
        is committed for a batch that is not stored.

        Once ``stop`` is set (SIGTERM, Ctrl-C), the batches in hand are
        finished (stored, evaluated, committed, their dead letters sent) for up
        to ``drain_s``; what is not finished by then is replayed by whoever
        consumes the partitions next.

        The cyclic garbage collector runs every ``collect_every_s``, not on
        allocation counts; see ``_collect_on_a_timer``.

        A member that owns no partition for ``no_partitions_warn_s`` says so, once,
        and again when it gets some (``PartitionWatch``), from a thread of its own:
        a member stuck joining its group is blocked inside ``poll``.
        """
        self._stop = stop
        listen = getattr(consumer, "listen", None)
        if callable(listen):
            listen(self.ownership)
        self.ownership.locate = getattr(consumer, "partition_of", None)
        self.ownership.lagging = lambda: _behind(consumer)
        done = threading.Event()
        watch = threading.Thread(target=self._watch_partitions,
                                 args=(PartitionWatch(no_partitions_warn_s), done),
                                 name="partition-watch", daemon=True)
        watch.start()
        try:
            with _collect_on_a_timer():
                self._run(consumer, stop, max_messages, maintain_every_s, collect_every_s,
                          drain_s)
        finally:
            done.set()
            watch.join(5)

    def _watch_partitions(self, watch: PartitionWatch, done: threading.Event) -> None:
        every = min(5.0, max(0.05, watch.after_s / 4))
        while not done.wait(every):
            # Only read here: the polling thread changes it (in the consumer's listener).
            said = watch.check(len(self.ownership.owned or ()))
            if said is not None:
                log.log(said[0], "%s", said[1])

    def _run(self, consumer: Consumer, stop: threading.Event, max_messages: int,
             maintain_every_s: float, collect_every_s: float,
             drain_s: float | Callable[[], float]) -> None:
        writes = max(1, int(getattr(self.store, "concurrent_writes", 1)))
        backoff = Backoff(0.5, 30.0)
        next_maintain = 0.0
        next_collect = time.monotonic() + collect_every_s
        held: deque[Batch] = deque()  # oldest first: at most `writes` stored, one more decoded
        memory_errors = 0  # in a row (see MEMORY_ERRORS_MAX)
        with _writers(writes, self) as writers:
            while not stop.is_set():
                try:
                    fetched = False
                    if len(held) <= writes and not self.stats.paused:
                        messages = consumer.poll(max_messages, timeout_s=0.05 if held else 0.2)
                        if messages:
                            held.append(Batch(messages, generation=self.ownership.generation,
                                              behind=_behind(consumer)))
                            fetched = True
                    self._submit(held, writers, writes)
                    # The oldest batch, once stored: evaluate, commit. Wait for it when
                    # there is nothing else to do (all writers busy, or nothing came).
                    while held:
                        batch = held[0]
                        if batch.frames and batch.points is None:
                            if batch.write is None:
                                break  # a writer was busy: submitted on the next turn
                            if not (batch.write.done() or len(held) > writes or not fetched):
                                break  # being written, and there is other work to do
                            if not _written(batch, WRITE_WAIT_S):
                                break  # a slow store: the loop turns, and sees a stop request
                            self._finish_write(batch)
                        self._complete(batch, consumer)
                        held.popleft()
                        fetched = True  # waited once: poll again before waiting more
                    if not fetched and not held and not self.stats.paused:
                        # Nothing came: time passes for the silent-node rule, up to the
                        # brokers' last answer; while they are not heard, none does.
                        unheard = _unheard(consumer)
                        self.deaf() if unheard is None else self.tick(unheard)
                    if time.monotonic() >= next_maintain:
                        self._maintain(writers)
                        next_maintain = time.monotonic() + maintain_every_s
                    if time.monotonic() >= next_collect:
                        _collect()
                        next_collect = time.monotonic() + collect_every_s
                    if self.stats.paused and not held:
                        self._resume(consumer)
                    self.summarise_dead_letters()  # a burst's count, once its minute is over
                except Exception as exc:  # noqa: BLE001 - nothing may end the loop; see below
                    # Writes in flight finish (their batches are written again anyway:
                    # writes are idempotent); every batch in hand is kept, in order.
                    settle(held)
                    if isinstance(exc, StoreLost):  # retrying would write where nobody reads
                        raise
                    if isinstance(exc, BusBroken):
                        raise  # fetching has stopped for good: said, not waited out
                    delay = backoff.next()
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
                        self._judge_held(held)
                        log.warning("store unavailable (%s); frames held, not committed, "
                                    "written again in %.1fs; alerts are still judged and "
                                    "sent from %d frames in hand (up to %d messages)",
                                    exc, delay, _frames(held), JUDGE_AHEAD_MESSAGES)
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
                    continue
                if not held and not self._store_away:
                    backoff.reset()
                    memory_errors = 0
            self._drain(held, consumer, writers, drain_s)

    def _submit(self, held: deque[Batch], writers: ThreadPoolExecutor, writes: int) -> None:
        """Decode what is new; start writes while writers are free."""
        in_flight = 0
        for batch in held:
            if batch.frames is None:
                batch.frames, batch.sources = self.decode(batch.messages)
                self._send_dead_letters()  # out before the batch can be committed
            if batch.write is None and batch.points is None and in_flight < writes \
                    and batch.frames:
                batch.started = time.perf_counter()
                batch.write = writers.submit(self.store.write, batch.frames)
            in_flight += batch.write is not None

    def _finish_write(self, batch: Batch) -> None:
        """The stored batch's point count; refusals dead-lettered (may raise to retry)."""
        assert batch.write is not None and batch.frames is not None
        write, batch.write = batch.write, None
        exc = write.exception()
        if exc is None:
            batch.points = write.result()
            return
        if isinstance(exc, (StoreError, StoreLost, BusError)) or out_of_memory(exc):
            raise exc  # the frames are fine: never bisected into dead letters for it
        if not isinstance(exc, StoreRejected):
            batch.failures += 1
            if batch.failures < MAX_SURPRISES:
                raise exc
            self.stats.errors += 1
            log.error("a batch of %d frames failed %d times (%s: %s); bisecting it",
                      len(batch.frames), batch.failures, type(exc).__name__, exc,
                      exc_info=exc)
            batch.points = self._bisect(batch.frames, batch.sources, exc, surprise=True)
        else:
            batch.points = self._write(batch.frames, batch.sources, exc)
        self._send_dead_letters()

    def _complete(self, batch: Batch, consumer: Consumer) -> None:
        if batch.frames or self._clock_findings:  # a node whose frames are all refused
            self._evaluate(batch, batch.points or 0, batch.started)
        consumer.commit(batch.messages)
        if batch.frames and self._store_away:  # stored and committed: it is back
            self._store_away = False
            self.stats.store_failing = None
            log.info("store is back: a batch of %d frames was stored and committed",
                     len(batch.frames))

    def _maintain(self, writers: ThreadPoolExecutor) -> None:
        """Rollups and retention, in a writer thread as writes are; a failure waits a turn."""
        try:
            writers.submit(self.store.maintain, int(time.time() * 1000)).result()
        except StoreLost:
            raise
        except Exception as exc:  # noqa: BLE001 - maintenance is retried on the next turn
            self.stats.errors += not isinstance(exc, StoreError)
            log.warning("store maintenance failed (%s: %s); tried again next turn",
                        type(exc).__name__, exc)

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

    def _judge_held(self, held: deque[Batch]) -> None:
        """The store is away: decode and judge the batches in hand, oldest first, so that
        their alerts are sent now (``Processor.judge``); one that cannot be judged yet
        holds back those behind it (batches are judged in order)."""
        for batch in held:
            if batch.frames is None:
                batch.frames, batch.sources = self.decode(batch.messages)
                self._send_dead_letters()
            if not self.judge(batch):
                if batch.frames:
                    return
                batch.judged = True  # nothing to judge (all dead letters)

    def _drain(self, held: deque[Batch], consumer: Consumer, writers: ThreadPoolExecutor,
               drain_s: float | Callable[[], float]) -> None:
        """On stop: finish the batches in hand, in order, for up to ``drain_s`` (or what it
        gives when called now: what is left of the stop's budget)."""
        drain_s = drain_s() if callable(drain_s) else drain_s
        deadline = time.monotonic() + drain_s
        done = 0
        try:
            while held and time.monotonic() < deadline:
                batch = held[0]
                if batch.frames is None:
                    batch.frames, batch.sources = self.decode(batch.messages)
                    self._send_dead_letters()
                if batch.frames and batch.points is None:
                    if batch.write is None:
                        batch.started = time.perf_counter()
                        batch.write = writers.submit(self.store.write, batch.frames)
                    batch.write.exception(max(0.0, deadline - time.monotonic()))
                    self._finish_write(batch)
                self._complete(batch, consumer)
                held.popleft()
                done += 1
        except Exception as exc:  # noqa: BLE001 - stopping: what is left is replayed
            self.drain_error = exc
            # A write still waiting at the deadline is a TimeoutError without a message.
            why = (f"{type(exc).__name__}: {exc}" if str(exc) else
                   f"the store did not answer within {drain_s:.1f} s"
                   if isinstance(exc, TimeoutError) else type(exc).__name__)
            if getattr(consumer, "replays", True):
                log.warning("stopping with %d batches not finished (%s); they will be "
                            "replayed", len(held), why)
            else:  # an in-process bus (`fleetwatch up`): nothing outlives this process
                log.warning("stopping with %d batches not finished (%s); their frames "
                            "were NOT stored, and nothing replays them", len(held), why)
        finally:
            settle(held)
            self.summarise_dead_letters(final=True)
        self.drained = (done, len(held))

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
                                      behind=_behind(consumer)))
                    if room:
                        self._judge_held(held)
            except Exception:  # noqa: BLE001 - the bus is away: wait and try again
                stop.wait(min(1.0, max(0.0, deadline - time.monotonic())))


@contextlib.contextmanager
def _writers(writes: int, loop: ConsumerLoop) -> Iterator[ThreadPoolExecutor]:
    """The store writers; on the way out they are waited for, unless the drain left a
    batch unfinished: its write is hung on the store, and the stop's deadline does not
    wait for it (the process leaves it behind: ``process_service.leave``)."""
    writers = ThreadPoolExecutor(writes, thread_name_prefix="store-writer")
    try:
        yield writers
    finally:
        left = getattr(loop, "drained", (0, 0))[1]
        writers.shutdown(wait=not left, cancel_futures=True)


# What ``_resume`` says, by what paused consumption.
_RESUMED = {
    "bus": "bus is back; consuming again",
    "store": "consuming again",  # after "store is back: ..."
    "memory": "consuming again after running out of memory",
    "error": "consuming again after the unexpected error above",
}

# How long the loop waits on one write before it turns again (a stop request is seen within it).
WRITE_WAIT_S = 0.5


def _written(batch: Batch, seconds: float) -> bool:
    """Whether ``batch``'s write is done, waiting for it up to ``seconds``."""
    assert batch.write is not None
    return bool(_wait([batch.write], timeout=seconds).done)
