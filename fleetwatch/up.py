"""``fleetwatch up``: the whole system in one process, nothing to install.

Real NVML when an NVIDIA GPU is present, else a simulated fleet; the
in-process bus; the embedded store; the dashboard on localhost. The agent and
the processor run in threads (``up_system.System``); the dashboard serves in the
foreground.

Never losing data comes first: the store is locked before it is read, written
or created (a second instance stops, naming the first one's pid); a file this
run did not create is never removed; a simulated fleet writes into its own
file (``fleetwatch-sim.db``) unless ``--store`` names one; and ``--keep``
continues from the newest sample already stored instead of writing the same
minutes again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from fleetwatch.collectors.clock import WallClock
from fleetwatch.collectors.sim import Fault, SimParams
from fleetwatch.collectors.sim.source import SimSource
from fleetwatch.config import Config, options, ranged
from fleetwatch.pipeline.store.base import StoreError
from fleetwatch.pipeline.store.sqlite_errors import describe, free_space, kind
from fleetwatch.service import StopSignals
from fleetwatch.service import listen as service_listen
from fleetwatch.simclock import CatchUp, PacedClock, pending_pace
from fleetwatch.simulate import (
    SIM_STORE_PATH,
    check_faults,
    counted,
    fault_annotations,
    span_text,
)
from fleetwatch.storelock import StoreBusy, StoreLock, StorePathError, check_store_path
from fleetwatch.up_system import System
from fleetwatch.up_timeline import continued_sim, live_clusters, newest_sample_s
from fleetwatch.urls import http_url
from fleetwatch.wiring import (
    open_store,
    store_name,
)

log = logging.getLogger(__name__)

# The processor ran out of memory (``out_of_memory.OutOfMemory``): ``up`` stops with this
# status, as ``fleetwatch process`` does, so that a supervisor restarts it.
EXIT_OUT_OF_MEMORY = 1


class UpError(RuntimeError):
    """``up`` cannot start as asked; the message says what to do instead."""


@dataclass(frozen=True)
class UpOptions:
    """``fleetwatch up``'s own options; each number's range is declared once, here.

    The command line builds this through ``config.options``, which checks every
    ranged field as the config file's numbers are checked.
    """

    simulate: bool | None = None      # None: simulate only when no NVIDIA GPU is found
    # Below 1 s the in-process stack spends its time ticking, not serving (0 spun a core).
    interval_s: float = ranged(5.0, 1.0, 3600.0)
    # The simulation starts this far in the past... (at most a week: longer is `simulate`)
    backfill_s: float = ranged(15 * 60.0, 0.0, 7 * 86400.0)
    # ...and runs this much faster until it is now; below 1 it would never catch up.
    speed: float = ranged(30.0, 1.0, 100_000.0)
    faults: Sequence[Fault] = ()
    keep: bool = False                # continue the store's data (else it must be new or empty)
    # With keep: write into a store that clusters other than the simulated one wrote to
    # within LIVE_S (live processors, as a rule); refused without it.
    into_live_store: bool = False
    store: str | None = None          # the file the user named (--store); None: the default
    steady_load: bool = False         # simulated jobs compute-bound throughout (no phases)


def listen(host: str, port: int, setting: str = "dashboard.port") -> socket.socket:
    """The dashboard's socket, bound and listening: taken first, so that a second
    ``up`` on the same port stops before it touches any store (``PortInUse``, naming
    ``setting``, what chose the port, and the pid of the process that holds it)."""
    return service_listen(host, port, setting, "--port" if setting == "--port" else
                          "--port (or dashboard.port)")


def gpu_present() -> bool:
    """True when NVML loads and sees at least one GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver, no device: all mean "no GPU here"
        return False


def store_config(config: Config, options: UpOptions, simulate: bool) -> Config:
    """The store this run writes: the user's ``--store``, else for a simulated fleet a file
    of its own (never the configured store, where real data lives), else the configured one."""
    store = config.store
    if options.store is not None:
        store = dataclasses.replace(store, kind="sqlite", path=options.store)
    elif simulate:
        store = dataclasses.replace(store, kind="sqlite", path=SIM_STORE_PATH)
    return dataclasses.replace(config, store=store)


def sim_start(path: str, options: UpOptions, now_s: float, cluster: str = "sim") -> float:
    """Where the simulated timeline starts (its first sample is one interval later):
    ``backfill_s`` ago in a new store; with ``keep``, at the newest stored sample (or
    ``backfill_s`` ago if that is older, leaving the time nothing ran as a gap), so that
    no sample is written twice and none is missing at the seam. The newest sample is the
    simulated ``cluster``'s own: another cluster sharing the store writes on meanwhile."""
    start = now_s - options.backfill_s
    newest = newest_sample_s(path)
    if newest is None:
        return start
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(newest))
    if not options.keep:
        raise UpError(f"the store {path} already holds data (to {stamp}) from an earlier run. "
                      f"Continue it with --keep; or start afresh with another file "
                      f"(--store NEW.db) or after removing this one yourself (rm {path}*): "
                      "fleetwatch never deletes a store it did not create in this run")
    _refuse_live_store(path, options, now_s, cluster)
    if newest > now_s + 60:
        raise UpError(f"the store {path} holds data up to {stamp}, later than now: is this "
                      "machine's clock right? Use another file with --store NEW.db")
    own = newest_sample_s(path, cluster)
    return start if own is None else max(start, own)


# A cluster other than the simulated one, or a node of its name that the simulator does
# not name, with a sample this recent makes a kept store live: processors of a real fleet
# write it.
LIVE_S = 900.0


def _refuse_live_store(path: str, options: UpOptions, now_s: float, cluster: str) -> None:
    """A ``--keep`` onto a store that other clusters' samples, or real nodes' samples of
    the simulated cluster's own name, reached within ``LIVE_S`` (processors writing a real
    fleet) is refused unless ``into_live_store``: the simulated
    cluster, its jobs and its faults would land among the real data and its dashboard."""
    if options.into_live_store:
        return
    live = live_clusters(path, cluster, now_s - LIVE_S)
    if not live:
        return
    said = ", ".join(f"{c} (newest sample {time.strftime('%H:%M:%S', time.localtime(ts))})"
                     for c, ts in sorted(live.items())[:5])
    raise UpError(f"the store {path} is written by something else: cluster(s) {said} have "
                  f"samples from the last {LIVE_S / 60:.0f} minutes and this run simulates "
                  f"cluster {cluster!r}. `fleetwatch up` would write a simulated "
                  "fleet into it (beside the data that `fleetwatch process` stores there): "
                  "give the simulation a store of its own (--store NEW.db), or, if that is "
                  "really meant, add --into-live-store")


def live_store_warning(path: str, options: UpOptions, now_s: float, cluster: str) -> str:
    """What ``--into-live-store`` onto a store a live processor writes must be told (""
    otherwise): each processor takes over the stored nodes of its partitions, of any
    cluster, and judges and notifies their alerts too (``pipeline.ownership``): a cluster
    dead at a takeover must still be paged by someone, so none is left out."""
    if not (options.keep and options.into_live_store):
        return ""
    live = live_clusters(path, cluster, now_s - LIVE_S)
    if not live:
        return ""
    return (f"warning: cluster(s) {', '.join(sorted(live)[:5])} write this store live. Each "
            "processor takes over the stored nodes whose names map to its partitions, of any "
            f"cluster: a `fleetwatch process` of theirs may notify cluster {cluster!r}'s "
            "alerts too, and this run theirs (duplicate pages). Give the simulation its own "
            "store (--store NEW.db) or its own alert receivers")


def build(config: Config, options: UpOptions) -> tuple[System, str]:
    """The system (its store locked) and a one-line description of its source.

    Raises ``StoreBusy`` when another instance holds the store, ``StorePathError``
    for a store in a missing folder, ``UpError`` for a store that already holds
    data without ``keep`` or a fault on a node, GPU or rack the simulated fleet does
    not have; nothing is created, written or removed before those checks.
    """
    check_options(options)
    simulate = options.simulate if options.simulate is not None else not gpu_present()
    if simulate:
        try:
            check_faults(options.faults, sim_params(config, options))
        except ValueError as exc:
            raise UpError(str(exc)) from None
    config = store_config(config, options, simulate)
    lock = None
    if config.store.kind == "sqlite":
        # A simulated fleet's store is its own file, never store.path's.
        check_store_path(config.store.path, "--store" if simulate else "--store (or store.path)")
        try:
            lock = StoreLock(config.store.path).acquire()
        except OSError as exc:  # a read-only directory, a full disk
            raise UpError(f"cannot lock {config.store.path}: "
                          f"{describe(config.store.path, exc)}") from None
    try:
        return _build(config, options, simulate, lock)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _build(config: Config, options: UpOptions, simulate: bool,
           lock: StoreLock | None) -> tuple[System, str]:
    if not simulate:
        from fleetwatch.collectors.node import node_source

        source = node_source(config)
        system = System(config, source, WallClock(), options.interval_s, lock)
        if getattr(source, "nvml_problem", None) is not None:  # said in the warning above
            return system, f"this node's host metrics only, no NVML yet ({config.node.node})"
        return system, f"this node's GPUs through NVML ({config.node.node})"
    start = sim_start(config.store.path, options, time.time(), config.sim.cluster)
    shared = live_store_warning(config.store.path, options, time.time(), config.sim.cluster)
    continued = (newest_sample_s(config.store.path, config.sim.cluster) if options.keep
                 else None)
    s = config.sim
    sim, notes, ended = continued_sim(sim_params(config, options), start, options.faults,
                                      config.store.path if options.keep else None)
    pace = CatchUp(options.speed, pending_pace(config, options.speed, options.interval_s),
                   s.nodes)
    system = System(config, SimSource(sim), PacedClock(start, pace), options.interval_s, lock)
    system.fault_notes = notes
    system.faults_not_replayed = ended
    system.continued_from = continued
    system.live_warning = shared
    pace.system = system
    system.store.write_annotations(fault_annotations(sim.ground_truth, sim.params.cluster))
    what = (f"simulated fleet: {counted(s.nodes, 'node')} x {s.gpus} {sim.part.model}, "
            f"seed {s.seed}, {options.interval_s:g} s samples")
    return system, what


def sim_params(config: Config, options: UpOptions) -> SimParams:
    """The simulated fleet ``up`` runs: ``build`` checks the faults against it before it
    takes the store's lock, ``_build`` then simulates it."""
    s = config.sim
    return SimParams(nodes=s.nodes, gpus=s.gpus, nodes_per_rack=s.nodes_per_rack,
                     seed=s.seed, interval_s=options.interval_s,
                     job_mean_s=s.job_mean_s, idle_mean_s=s.idle_mean_s,
                     steady_load=options.steady_load, part=s.part, cluster=s.cluster,
                     inlet_c=s.inlet_c, warm_spell_c=s.warm_spell_c,
                     warm_spell_h=s.warm_spell_h)


def check_options(given: UpOptions) -> UpOptions:
    """``given`` if every ranged number is in range, else ``ConfigError`` naming it."""
    values = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)
              if "range" in f.metadata}
    options(UpOptions, "up", origin="UpOptions", **values)
    return given



def run_up(config: Config, given: UpOptions, out: TextIO | None = None,
           port_setting: str = "dashboard.port") -> int:
    """``fleetwatch up``: take the port, then the store's lock, run until Ctrl-C or
    SIGTERM, then store every frame already sent, close the store and say so.

    Returns the exit status: 0, 1 (store taken by someone else; frames sent but not
    stored; out of memory), 2 (a store or fault that cannot be used as asked). A port
    that is taken raises ``PortInUse`` naming ``port_setting`` (what chose the port) and
    the pid that holds it.
    """
    out = out or sys.stderr
    stopping = StopSignals()
    try:
        sock = listen(config.dashboard.host, config.dashboard.port, port_setting)
        try:
            system, what = build(config, given)
        except (StoreBusy, StorePathError, UpError, StoreError) as exc:
            # StoreError: a store that cannot be read (damaged, read-only, full disk)
            sock.close()
            print(f"fleetwatch up: {exc}", file=out)
            return 1 if isinstance(exc, StoreBusy) else 2
        except BaseException:
            sock.close()
            raise
        return _serve(system, what, given, sock, stopping, out)
    finally:
        stopping.restore()


def _serve(system: System, what: str, given: UpOptions, sock: socket.socket,
           stopping: StopSignals, out: TextIO) -> int:
    config = system.config
    store = store_name(config.store)
    print(f"fleetwatch up: {what}", file=out)
    if system.live_warning:
        print(f"  {system.live_warning}", file=out)
    sim = getattr(system.agent.source, "sim", None)
    for n, r in enumerate(sim.ground_truth if sim is not None else ()):
        where = (r.node or r.rack or "") + ("" if r.gpu is None else f" GPU {r.gpu}")
        note = system.fault_notes[n] if n < len(system.fault_notes) else ""
        print(f"  injected fault: {r.kind} on {where}, from "
              f"{time.strftime('%H:%M:%S', time.localtime(r.onset_ts))} for "
              f"{span_text(r.end_ts - r.onset_ts)}{note}", file=out)
    for f, a in system.faults_not_replayed:
        where = (f.node or f.rack or "") + ("" if f.gpu is None else f" GPU {f.gpu}")
        print(f"  not injected again: {f.kind} on {where}, which already ran in this store's "
              f"timeline ({time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(a.start_ts))} "
              f"for {span_text(f.duration_s)}); a new store (--store NEW.db) runs it afresh",
              file=out)
    kept = ""
    if given.keep:  # said as it is: a --keep that found no store starts one
        kept = ("   --keep: no data to continue, a new store" if system.continued_from is None
                else f"   continued from its newest sample (cluster {config.sim.cluster}), "
                + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(system.continued_from)))
    print(f"  bus: in-process   store: {os.path.abspath(store)} ({config.store.kind}){kept}",
          file=out)
    print(f"  dashboard: {http_url(config.dashboard.host, config.dashboard.port)}   "
          "(Ctrl-C or SIGTERM to stop)", file=out, flush=True)
    system.halt = stopping.stop
    try:
        system.start()
        system.report_every(30.0, out)
        from fleetwatch.carbon import model_or_unknown
        from fleetwatch.dashboards import serve

        if not stopping.stop.is_set():  # a signal while starting: stop without serving
            serve(open_store(config.store, read_only=config.store.kind == "sqlite"),
                  config.dashboard.host, config.dashboard.port, config.dashboard.refresh_s,
                  sock=sock, temp_limit_c=config.detectors.site_temp_limit_c,
                  carbon=model_or_unknown(config.carbon, config.energy),
                  until=stopping.stop, allowed_hosts=config.dashboard.allowed_hosts,
                  node_static_w=config.energy.node_static_w,
                  max_gap_s=config.energy.max_gap_s,
                  fallback_slowdown_c=config.detectors.fallback_slowdown_c,
                  # While the simulation catches up, the page's "now" is the simulated
                  # one: on the wall clock its data is minutes old and the fleet page
                  # would hide every GPU as not reporting until the catch-up ended.
                  clock=system.clock.now, store_problem=system.store_problem)
    finally:
        stopping.ignore()
        sock.close()
        left = system.stop()
        stats = system.processor.stats
        moved = getattr(system.store, "lost", None)  # its file left its path (StoreLost)
        lost = f"; {left:,} frames NOT stored" if left else "; every frame sent was stored"
        closed, verb = f"store closed ({os.path.abspath(store)})", "stored"
        if moved is not None:
            verb = "written"
            lost = f"; {left:,} frames NOT stored" if left else ""
            closed = (f"the store's file is no longer at {os.path.abspath(store)}: the last "
                      "frames written may be lost (below)")
        print(f"\nfleetwatch up: stopped ({stopping.reason or 'error'}): {stats.frames:,} "
              f"frames {verb}{lost}; {closed}", file=out, flush=True)
        if moved is not None and system.failure is None:
            print(f"fleetwatch up: {moved}", file=out, flush=True)
        if system.failure is not None:
            print(f"fleetwatch up: {system.failure}", file=out, flush=True)
        if left:
            print(f"fleetwatch up: {unstored_advice(store, system.processor.drain_error)}",
                  file=out, flush=True)
    if system.failure is not None or getattr(system.store, "lost", None) is not None:
        return EXIT_OUT_OF_MEMORY  # 1, as for a store that moved
    return 0 if not left else 1


def unstored_advice(store: str, error: BaseException | None) -> str:
    """What to do about frames ``up`` could not store before it stopped (its bus is in
    the process: nothing replays them)."""
    cause = error.__cause__ if error is not None and error.__cause__ is not None else error
    then = (f"`fleetwatch up --keep --store {store}` continues from the newest sample "
            "stored (the time between is a gap)")
    what = kind(cause, store) if cause is not None else ""
    if what == "full":
        return (f"the frames not stored are lost: the disk holding {store} is full "
                f"({free_space(store)}); free space there, then {then}")
    if what == "limit":
        return (f"the frames not stored are lost: {store} reached the file size limit "
                f"(ulimit -f, systemd LimitFSIZE=); raise it, then {then}")
    return f"the frames not stored are lost; {then}"
