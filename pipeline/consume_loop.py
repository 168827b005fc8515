"""The processor's loop over a consumer: poll, decode, store in writer threads, evaluate
and commit in order, pause while the store or the bus is away (``consume_pause``), drain
on stop.

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
from fleetwatch.pipeline.bus import BusBroken, BusError, Consumer, Message
from fleetwatch.pipeline.consume_pause import ConsumePause, partitions_behind
from fleetwatch.pipeline.gc_timer import collect as _collect
from fleetwatch.pipeline.gc_timer import collect_on_a_timer as _collect_on_a_timer
from fleetwatch.pipeline.out_of_memory import out_of_memory
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.partition_watch import PartitionWatch
from fleetwatch.pipeline.store.base import Store, StoreError, StoreLost, StoreRejected
from fleetwatch.retry import Backoff

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fleetwatch.frame import Frame
    from fleetwatch.models import Finding

log = logging.getLogger("fleetwatch.pipeline.processor")


def _unheard(consumer: Consumer) -> float | None:
    """How long ago the brokers last answered (0: not known), or None when a poll that
    brought nothing does not mean that nothing was sent: the brokers are away, hang, or
    the group rebalances (a consumer's optional ``listening`` and ``unheard_s``)."""
    listening = getattr(consumer, "listening", None)
    if callable(listening) and not listening():
        return None
    unheard = getattr(consumer, "unheard_s", None)
    return float(unheard()) if callable(unheard) else 0.0


class ConsumerLoop(ConsumePause):
    """``run``: the steps of ``Processor.handle`` over a consumer, pipelined."""

    store: Store
    stats: Stats
    ownership: Ownership
    drained: tuple[int, int]
    _stop: threading.Event
    _clock_findings: list[Finding]  # node_clock_skew findings not judged yet (Processor)
    drain_error: BaseException | None = None  # why batches were left unfinished at stop

    if TYPE_CHECKING:  # the per-batch work, in Processor (and ConsumePause's)
        def _evaluate(self, batch: Batch, points: int, t0: float) -> None: ...
        def _write(self, frames: list[Frame], sources: Sequence[Message] | None,
                   failed: BaseException | None = None) -> int: ...
        def _bisect(self, frames: list[Frame], sources: Sequence[Message] | None,
                    exc: BaseException, surprise: bool) -> int: ...
        def summarise_dead_letters(self, final: bool = False) -> None: ...
        def tick(self, unheard_s: float = 0.0) -> None: ...

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
        self.ownership.lagging = lambda: partitions_behind(consumer)
        every = getattr(consumer, "partitions", None)
        if callable(every):
            self.ownership.partitions = every
        settled = getattr(consumer, "settled", None)
        self.ownership.settled = settled if callable(settled) else None
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
                                              behind=partitions_behind(consumer)))
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
                    memory_errors = self._outage(exc, consumer, stop, held, max_messages,
                                                 backoff.next(), memory_errors)
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


# How long the loop waits on one write before it turns again (a stop request is seen within it).
WRITE_WAIT_S = 0.5


def _written(batch: Batch, seconds: float) -> bool:
    """Whether ``batch``'s write is done, waiting for it up to ``seconds``."""
    assert batch.write is not None
    return bool(_wait([batch.write], timeout=seconds).done)
