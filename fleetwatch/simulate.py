"""``fleetwatch simulate``: write days of a simulated fleet's history into a store, fast.

The frames go through the same ``Processor`` as live data (store, detectors,
alerts), in large batches, so the history holds the alerts a live run would
have raised, and the injected faults are stored as annotations: the ground
truth that later evaluations score detectors against.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from fleetwatch.collectors.sim import Fault, FaultRecord, FleetSim, SimParams
from fleetwatch.collectors.sim.faults import NoSuchSubject, check_subjects
from fleetwatch.config import Config, NodeConfig, SimConfig, ranged
from fleetwatch.models import Detector
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Annotation, Store

# A minute of simulated time per batch, at most, as a live processor gets frames: silence
# and rack rules judge at a batch's end, and with an hour a batch a node silent for 20
# minutes (back by the hour's end) was never paged.
BATCH_S = 60.0
# ... and at most this many frames (about 22 kB each for 8 GPUs while held): an hour of
# 1,000 nodes at 5 s held 15 GB before anything was written.
MAX_BATCH_FRAMES = 10_000
# Where simulated data goes unless the user names a store: never the real store's file.
SIM_STORE_PATH = "fleetwatch-sim.db"
YEAR_S = 366 * 86400.0
# The largest simulated fleet one machine runs (``up`` and ``simulate``; ``evaluate``
# stores nothing and has its own). The processor and SQLite take about 21,000 GPU
# samples a second (measured, 256 nodes x 8): ``up`` keeps up with 8,192 GPUs in real time
# at 5 s (its catch-up is slower), and ``simulate`` writes a day of them in about 40 min.
# Larger fleets filled the disk and memory long before they showed anything more.
MAX_NODES = 1024
MAX_GPUS = 8192


def sig(x: float) -> str:
    """``x`` to three significant figures, never in exponent form: 0.0833, 5, 1.5, 3,650."""
    return f"{float(f'{x:.3g}'):,g}" if math.isfinite(x) else f"{x}"


def span_text(seconds: float) -> str:
    """A duration as people say it: 45 s, 5 min, 1.5 h, 24 h, 7 d."""
    size = abs(seconds) if math.isfinite(seconds) else 0.0
    for unit, length, least in (("d", 86400.0, 2 * 86400.0), ("h", 3600.0, 3600.0),
                                ("min", 60.0, 120.0)):
        if size >= least:
            return f"{sig(seconds / length)} {unit}"
    return f"{sig(seconds)} s"


def counted(n: int, noun: str) -> str:
    """``1 node``, ``2 nodes``, ``1,024 GPUs``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def check_faults(faults: Sequence[Fault], params: SimParams, flag: str = "--fault") -> None:
    """A ``ValueError`` naming ``flag``, the fault and the subjects the fleet has, for a
    fault on a node, GPU or rack the fleet does not have: before anything is created
    (the simulator would refuse it only after the store and its lock exist)."""
    try:
        check_subjects(faults, params.nodes, params.gpus, params.nodes_per_rack)
    except NoSuchSubject as exc:
        made = {"node": f"--nodes {params.nodes}", "gpu": f"--gpus {params.gpus}",
                "rack": f"--nodes {params.nodes}, sim.nodes_per_rack = {params.nodes_per_rack}"}
        raise ValueError(f"{flag} {exc} ({made[exc.missing]})") from None


def late_faults(faults: Sequence[Fault], duration_s: float) -> list[str]:
    """A warning for each fault that starts after the history ends: it will never show."""
    return [f"warning: --fault {f.kind}:{f.subject} starts {span_text(f.start_s)} into a "
            f"history of {span_text(duration_s)}: it will never start (start it earlier "
            "with @START, or make --duration longer)"
            for f in faults if f.start_s >= duration_s]


@dataclass(frozen=True)
class SimulateOptions:
    """``fleetwatch simulate``'s own numbers, each range declared once, here (the
    command line checks them through ``config.options``)."""

    days: float = ranged(1.0, 0.0, 366.0, above=True)
    duration_s: float = ranged(86400.0, 0.0, YEAR_S, above=True)
    # Sub-second samples of a simulated fleet only make the history bigger.
    interval_s: float = ranged(15.0, 1.0, 3600.0)
    # Epoch seconds, 2000-01-01 to 2100-01-01: a typo in milliseconds is refused.
    end_ts: float = ranged(4_102_444_800.0, 946_684_800.0, 4_102_444_800.0)


@dataclass(frozen=True)
class SimulateResult:
    frames: int
    points: int
    alerts_changed: int
    seconds: float
    ground_truth: tuple[FaultRecord, ...]
    stopped: bool = False  # asked to stop before the end: the batches done are stored

    @property
    def points_per_s(self) -> float:
        return self.points / self.seconds if self.seconds else 0.0


def fault_annotations(records: Sequence[FaultRecord], cluster: str) -> list[Annotation]:
    """The injected faults as annotations of the simulated ``cluster``: a store may hold
    several clusters with nodes of the same names."""
    # A rack fault has no node and a node fault no GPU: the annotation names the rack or node.
    return [Annotation("fault", r.onset_ts, r.end_ts, r.node or r.rack or "",
                       "" if r.gpu is None else f"gpu{r.gpu}",
                       _fault_text(r.kind, r.mode, r.severity), cluster) for r in records]


def _fault_text(kind: str, mode: str, severity: float) -> str:
    return f"injected {kind} fault ({mode}, x{severity:g})"


def continued_faults(faults: Sequence[Fault], stored: Sequence[Annotation], resume_ts: float
                     ) -> tuple[list[Fault], list[bool], list[tuple[Fault, Annotation]]]:
    """The faults of a run that continues a stored timeline from ``resume_ts`` (``up
    --keep``): those to inject, each with its onset fixed and whether it continues one the
    store holds; and those not injected again, each with the stored window that ended.

    A fault the store's annotations show (same kind, subject, mode, severity and
    duration) whose window has not ended at ``resume_ts`` keeps that window; one whose
    stored window has ended already happened in this timeline, so it is not replayed (the
    same flags on a restart would repeat a past incident in the kept store); any other
    starts ``start_s`` after ``resume_ts``, as in a new run.
    """
    out, continued, ended = [], [], []
    for f in faults:
        where = (f.node or f.rack or "", "" if f.gpu is None else f"gpu{f.gpu}")
        text = _fault_text(f.kind, f.resolved_mode, f.resolved_severity)
        same = [a for a in stored
                if a.kind == "fault" and (a.node, a.device) == where and a.text == text
                and a.end_ts is not None and abs(a.end_ts - a.start_ts - f.duration_s) < 1e-3]
        onsets = [a.start_ts for a in same if a.end_ts is not None and a.end_ts > resume_ts]
        if not onsets and same:
            ended.append((f, max(same, key=lambda a: a.start_ts)))
            continue
        onset = min(onsets, default=resume_ts + f.start_s)
        out.append(dataclasses.replace(f, onset_ts=onset))
        continued.append(bool(onsets))
    return out, continued, ended


def simulate(store: Store, params: SimParams, start_ts: float, duration_s: float,
             faults: Sequence[Fault] = (), detectors: Sequence[Detector] = (),
             progress: Callable[[float, int], None] | None = None,
             stop: threading.Event | None = None,
             energy: EnergyIntegrator | None = None,
             keep_firing_s: float = 0.0) -> SimulateResult:
    """Simulate ``duration_s`` from ``start_ts`` and write it all to ``store``.

    ``progress(fraction_done, points_so_far)`` is called after every batch.
    ``stop`` (set by Ctrl-C or SIGTERM) ends the run between two batches: every
    batch written is whole, with its alerts.
    """
    t0 = time.perf_counter()
    sim = FleetSim(params, start_ts, faults)
    store.write_annotations(fault_annotations(sim.ground_truth, params.cluster))
    end_ts = start_ts + duration_s
    if energy is not None:
        energy.history(end_ts)  # the span may be older than the stored history
    processor = Processor(store, detectors, energy=energy, keep_firing_s=keep_firing_s)
    steps_per_batch = max(1, min(int(BATCH_S / params.interval_s),
                                 MAX_BATCH_FRAMES // max(1, params.nodes)))
    # Serial on purpose: a writer thread would fight the simulation for the GIL
    # and was measured slower than doing one after the other.
    stopped = False
    while sim.ts + params.interval_s <= end_ts:
        if stop is not None and stop.is_set():
            stopped = True
            break
        frames = []
        for _ in range(steps_per_batch):
            if sim.ts + params.interval_s > end_ts:
                break
            sim.step()
            frames.extend(sim.frames())
        processor.process(frames)
        if progress is not None:
            progress((sim.ts - start_ts) / duration_s, processor.stats.points)
    store.maintain(int(sim.ts * 1000))
    processor.flush()  # the last counts of open alerts, which no later frame writes
    s = processor.stats
    return SimulateResult(s.frames, s.points, s.alerts_changed, time.perf_counter() - t0,
                          tuple(sim.ground_truth), stopped)


def held_span(path: str, start_s: float, end_s: float, cluster: str
              ) -> tuple[float, float] | None:
    """The first and last time of the samples of ``cluster`` the store at ``path`` already
    holds in (start, end] (GPU temperatures, which every simulated frame has), or None.
    Another cluster's samples are no obstacle: its series are its own."""
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    if not os.path.exists(path):
        return None
    store = SqliteStore(path, read_only=True)
    start_ms, end_ms = int(start_s * 1000) + 1, int(end_s * 1000) + 1
    try:
        # (start, end]: a history's first sample is one interval after its start. Raw
        # samples (a run killed before its rollups were built) and minute rollups
        # (raw samples past their retention) both count.
        times = [ts for _, ts, _ in store.range("gpu_temp_c", start_ms, end_ms,
                                                cluster=cluster)]
        raw = store.raw_span(start_ms, end_ms, cluster)
    finally:
        store.close()
    times += raw or ()
    if not times:
        return None
    return min(times) / 1000, max(times) / 1000


def last_job_id(path: str, cluster: str) -> int:
    """The highest numeric job id of ``cluster``'s jobs in the store at ``path`` (0: none):
    a second run into it numbers its jobs after it, as a scheduler does, so that its job of
    an id already stored is not merged with that one (one job history spanning both)."""
    from fleetwatch.pipeline.events import split_jobs
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    if not os.path.exists(path):
        return 0
    store = SqliteStore(path, read_only=True)
    try:
        values = {e.value for e in store.events(0.0, 1e11, kinds=["job_start"])
                  if e.cluster == cluster}
    finally:
        store.close()
    ids = [int(job) for value in values for job in split_jobs(value) if job.isdigit()]
    return max(ids, default=0)


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def run_simulate(config: Config, given: SimulateOptions, duration_s: float,
                 faults: Sequence[Fault], store: str | None = None,
                 out: TextIO | None = None) -> int:
    """``fleetwatch simulate``: the history into ``store`` (default ``fleetwatch-sim.db``,
    never the real store), locked against a second writer; Ctrl-C or SIGTERM stop
    it between two batches with every batch written whole. Returns the exit status."""
    from fleetwatch.pipeline.store.sqlite import SqliteStore
    from fleetwatch.storelock import StoreBusy, StoreLock, StorePathError, check_store_path
    from fleetwatch.wiring import detectors, energy_integrator

    out = out or sys.stderr
    path = store or SIM_STORE_PATH
    if duration_s < given.interval_s:
        print(f"fleetwatch simulate: a history of {span_text(duration_s)} holds no sample of "
              f"{span_text(given.interval_s)}: make --duration longer or --interval shorter",
              file=out)
        return 2
    s = config.sim
    params = SimParams(nodes=s.nodes, gpus=s.gpus, nodes_per_rack=s.nodes_per_rack,
                       seed=s.seed, interval_s=given.interval_s, job_mean_s=s.job_mean_s,
                       idle_mean_s=s.idle_mean_s, part=s.part, cluster=s.cluster,
                       inlet_c=s.inlet_c, warm_spell_c=s.warm_spell_c,
                       warm_spell_h=s.warm_spell_h)
    if config.node.cluster != NodeConfig().cluster and s.cluster == SimConfig().cluster:
        print(f"fleetwatch simulate: the fleet reports as cluster {s.cluster}: node.cluster "
              f"({config.node.cluster}) is an agent's; name the simulated cluster with "
              "--cluster or sim.cluster", file=out)
    try:
        check_faults(faults, params)
    except ValueError as exc:
        print(f"fleetwatch simulate: {exc}", file=out)
        return 2
    for line in late_faults(faults, duration_s):
        print(f"fleetwatch simulate: {line}", file=out)
    try:
        check_store_path(path)
        lock = StoreLock(path).acquire()
    except (StoreBusy, StorePathError) as exc:
        print(f"fleetwatch simulate: {exc}", file=out)
        return 1 if isinstance(exc, StoreBusy) else 2
    start = given.end_ts - duration_s
    try:
        held = held_span(path, start, given.end_ts, s.cluster)
        after = last_job_id(path, s.cluster) + 1
    except Exception:
        lock.release()
        raise
    if held is not None:
        lock.release()
        print(f"fleetwatch simulate: {path} already holds samples of cluster {s.cluster} from "
              f"{_utc(held[0])} to {_utc(held[1])}, within this run's span ({_utc(start)} to "
              f"{_utc(given.end_ts)}): a second history of the cluster over the same hours "
              "would interleave two fleets sample by sample. Name another cluster (--cluster, "
              "sim.cluster), write it to another file (--store NEW.db), choose a span clear of "
              f"that data (--end, --duration), or remove the file yourself (rm {path}*)",
              file=out)
        return 1
    # A store of an earlier span: this one's jobs are numbered after its jobs.
    params = dataclasses.replace(params, first_job_id=max(params.first_job_id, after))
    stop = threading.Event()
    reason = ["done"]

    def on_signal(signum: int, frame: object) -> None:
        reason[0] = signal.Signals(signum).name
        stop.set()

    saved = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        db = SqliteStore(path, config.store.raw_retention_h, config.store.rollup_retention_d)
        print(f"simulating {span_text(duration_s)} of {counted(s.nodes, 'node')} x "
              f"{counted(s.gpus, s.part.upper() + ' GPU')} every {span_text(given.interval_s)} "
              f"into {os.path.abspath(path)}", file=out)
        last = [0.0]

        def progress(done: float, points: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 1.0 or done >= 1.0:
                last[0] = now
                print(f"\r  {done:6.1%}  {points:>14,} samples", end="", file=out, flush=True)

        try:
            result = simulate(db, params, start, duration_s, faults,
                              detectors(config.detectors), progress, stop,
                              energy=energy_integrator(config.energy, db),
                              keep_firing_s=config.alerts.keep_firing_s)
        finally:
            db.close()
    finally:
        # After a stop by signal the process is about to exit: ``on_signal`` then stays, so
        # a second Ctrl-C only sets the event again instead of raising at the last line.
        if not stop.is_set():
            for sig, handler in saved.items():
                signal.signal(sig, handler)
        lock.release()
    print(f"\n{'stopped (' + reason[0] + '): ' if result.stopped else ''}wrote "
          f"{result.points:,} samples ({result.frames:,} frames) in {result.seconds:.1f} s "
          f"({result.points_per_s:,.0f} samples/s); "
          f"{counted(result.alerts_changed, 'alert change')}; store closed", file=out)
    for r in result.ground_truth:
        where = (r.node or r.rack or "") + ("" if r.gpu is None else f" GPU {r.gpu}")
        print(f"  ground truth: {r.kind} on {where} from "
              f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r.onset_ts))} to "
              f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r.end_ts))}", file=out)
    return 0
