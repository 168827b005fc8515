"""The processor: consume frames, store them, detect, drive alerts.

``Processor.handle`` is the whole per-batch logic (decode, store, detect,
alert) and touches no bus; ``run`` is the loop that takes the same steps
over a consumer, with the store writes in writer threads, and commits.
Offsets are committed only after the batch is in the store (at-least-once);
the store's idempotent writes make a replayed batch harmless.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

from fleetwatch.codec import Decoder, FrameError
from fleetwatch.frame import Frame
from fleetwatch.models import Detector
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.bus import BusError, Consumer, Message, Producer
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.store.base import Store, StoreError

log = logging.getLogger(__name__)


@dataclass
class Stats:
    frames: int = 0
    points: int = 0
    dead_letters: int = 0
    alerts_changed: int = 0
    store_errors: int = 0
    paused: bool = False
    last_batch_s: float = 0.0
    by_reason: dict[str, int] = field(default_factory=dict)


class Processor:
    def __init__(self, store: Store, detectors: Sequence[Detector] = (),
                 dead_letters: Producer | None = None,
                 dead_letter_topic: str = "fleetwatch.frames.dead",
                 energy: EnergyIntegrator | None = None) -> None:
        self.store = store
        # Energy is integrated here, once, into the store's ledger (pipeline/energy.py);
        # by default with default settings whenever the store keeps a ledger.
        if energy is None and hasattr(store, "write_energy"):
            energy = EnergyIntegrator(store)  # type: ignore[arg-type]
        self.energy = energy
        self.detectors = list(detectors)
        self.alerts = AlertBook(store.alerts())
        self.stats = Stats()
        self._decoder = Decoder()
        self._dead = dead_letters
        self._dead_topic = dead_letter_topic

    def decode(self, messages: Sequence[Message]) -> list[Frame]:
        """Good frames out; bad ones to the dead-letter topic with their reason."""
        frames = []
        for m in messages:
            try:
                frames.append(self._decoder.decode(m.value))
            except FrameError as exc:
                self._dead_letter(m, exc)
        if self._dead is not None and len(frames) < len(messages):
            self._dead.flush()  # dead letters are out before the batch is committed
        return frames

    def _dead_letter(self, m: Message, exc: FrameError) -> None:
        self.stats.dead_letters += 1
        self.stats.by_reason[exc.field or "frame"] = self.stats.by_reason.get(
            exc.field or "frame", 0) + 1
        log.warning("dead letter from %s@%d: %s", m.topic, m.offset, exc)
        if self._dead is not None:
            self._dead.send(self._dead_topic, m.value, m.key, headers=[
                ("reason", str(exc).encode()), ("source_topic", m.topic.encode()),
                ("source_partition", str(m.partition).encode()),
                ("source_offset", str(m.offset).encode())])

    def handle(self, messages: Sequence[Message]) -> list[Frame]:
        """One batch: decode, store, detect, alert. Raises StoreError if the store is away."""
        frames = self.decode(messages)
        self.process(frames)
        return frames

    def process(self, frames: Sequence[Frame]) -> None:
        if not frames:
            return
        t0 = time.perf_counter()
        self._evaluate(frames, self.store.write(frames), t0)

    def _evaluate(self, frames: Sequence[Frame], points: int, t0: float) -> None:
        """Integrate energy, detect and drive alerts on a stored batch; count it."""
        if self.energy is not None:
            self.energy.observe(frames)
        findings = [x for d in self.detectors for x in d.update(frames)]
        changed = self.alerts.observe(frames, findings)
        if changed:
            self.store.write_alerts(changed)
        self.stats.frames += len(frames)
        self.stats.points += points
        self.stats.alerts_changed += len(changed)
        self.stats.last_batch_s = time.perf_counter() - t0

    def run(self, consumer: Consumer, stop: threading.Event, max_messages: int = 2000,
            maintain_every_s: float = 30.0, collect_every_s: float = 10.0) -> None:
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

        The cyclic garbage collector runs every ``collect_every_s``, not on
        allocation counts; see ``_collect_on_a_timer``.
        """
        with _collect_on_a_timer():
            self._run(consumer, stop, max_messages, maintain_every_s, collect_every_s)

    def _run(self, consumer: Consumer, stop: threading.Event, max_messages: int,
             maintain_every_s: float, collect_every_s: float) -> None:
        writes = max(1, int(getattr(self.store, "concurrent_writes", 1)))
        backoff = 0.5
        next_maintain = 0.0
        next_collect = time.monotonic() + collect_every_s
        held: deque[_Batch] = deque()  # oldest first: at most `writes` stored, one more decoded
        with ThreadPoolExecutor(writes, thread_name_prefix="store-writer") as writers:
            while not stop.is_set():
                try:
                    fetched = False
                    if len(held) <= writes and not self.stats.paused:
                        messages = consumer.poll(max_messages, timeout_s=0.05 if held else 0.2)
                        if messages:
                            held.append(_Batch(messages))
                            fetched = True
                    in_flight = 0
                    for batch in held:
                        if batch.frames is None:
                            batch.frames = self.decode(batch.messages)
                        if batch.write is None and in_flight < writes and batch.frames:
                            batch.started = time.perf_counter()
                            batch.write = writers.submit(self.store.write, batch.frames)
                        in_flight += batch.write is not None
                    # The oldest batch, once stored: evaluate, commit. Wait for it when
                    # there is nothing else to do (all writers busy, or nothing came).
                    while held:
                        batch = held[0]
                        if batch.frames:  # else every message was a dead letter
                            if batch.write is None:
                                break  # a writer was busy: submitted on the next turn
                            if not (batch.write.done() or len(held) > writes or not fetched):
                                break  # being written, and there is other work to do
                            self._evaluate(batch.frames, batch.write.result(), batch.started)
                        consumer.commit(batch.messages)
                        held.popleft()
                        fetched = True  # waited once: poll again before waiting more
                    if time.monotonic() >= next_maintain:  # in a writer thread, as writes are
                        writers.submit(self.store.maintain, int(time.time() * 1000)).result()
                        next_maintain = time.monotonic() + maintain_every_s
                    if time.monotonic() >= next_collect:
                        _collect()
                        next_collect = time.monotonic() + collect_every_s
                except (StoreError, BusError) as exc:
                    # Writes in flight finish (their batches are written again anyway:
                    # writes are idempotent); every batch in hand is kept, in order.
                    for batch in held:
                        if batch.write is not None:
                            batch.write.exception()
                            batch.write = None
                    self.stats.store_errors += isinstance(exc, StoreError)
                    log.warning("%s unavailable (%s); pausing consumption, retry in %.1fs",
                                "store" if isinstance(exc, StoreError) else "bus", exc, backoff)
                    consumer.pause()
                    self.stats.paused = True
                    late = self._idle(consumer, stop, backoff)
                    if late:
                        held.append(_Batch(late))
                    backoff = min(backoff * 2, 30.0)
                    continue
                if self.stats.paused and not held:
                    consumer.resume()
                    self.stats.paused = False
                    log.info("store and bus are back; consuming again")
                if not held:
                    backoff = 0.5
            for batch in held:  # let writes in flight finish; their batches are replayed anyway
                if batch.write is not None:
                    batch.write.exception()

    @staticmethod
    def _idle(consumer: Consumer, stop: threading.Event, seconds: float) -> list[Message]:
        """Wait, polling the paused consumer so that the group keeps this member."""
        deadline = time.monotonic() + seconds
        late: list[Message] = []
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                # Paused: returns nothing. Kept, not dropped, if it ever does.
                late.extend(consumer.poll(1, timeout_s=min(1.0, deadline - time.monotonic())))
            except BusError:
                stop.wait(min(1.0, max(0.0, deadline - time.monotonic())))
        return late


class _Batch:
    """Messages polled together, their good frames once decoded, their write once submitted."""

    __slots__ = ("messages", "frames", "write", "started")

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.frames: list[Frame] | None = None
        self.write: Future[int] | None = None
        self.started = 0.0


# Processors running in this process (each in its own thread): automatic
# collection is off while there is at least one.
_gc_lock = threading.Lock()
_gc_runs = 0
_gc_was_enabled = True


@contextmanager
def _collect_on_a_timer() -> Iterator[None]:
    """Turn the cyclic GC's automatic collections off while a processor runs.

    Every batch allocates tens of thousands of containers (a frame's lists,
    dicts and readings) and holds them while it is stored, so the allocation
    counts that trigger collections keep firing, and each older-generation
    pass walks every batch in hand. Measured on the pipeline benchmark: 40 µs
    of CPU per 8-GPU frame, a quarter of the processor's. Batches hold no
    reference cycles (refcounting frees them; a run over 20,000 frames left
    ~2,700 cyclic objects in all, from the clients), so ``run`` collects
    every ``collect_every_s`` instead. ``gc.freeze()`` first moves what lives
    as long as the process (modules, clients, detectors' state) out of those
    collections.
    """
    global _gc_runs, _gc_was_enabled
    with _gc_lock:
        if _gc_runs == 0:
            _gc_was_enabled = gc.isenabled()
            gc.freeze()
            gc.disable()
        _gc_runs += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_runs -= 1
            if _gc_runs == 0 and _gc_was_enabled:
                gc.enable()


def _collect() -> None:
    started = time.perf_counter()
    found = gc.collect()
    log.debug("garbage collection: %d unreachable objects in %.1f ms", found,
              (time.perf_counter() - started) * 1000)
