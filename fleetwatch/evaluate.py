"""``fleetwatch evaluate``: score every detector against a labelled simulated fleet.

Two runs of the simulator over the same fleet: one with a labelled schedule
of every fault kind the simulator knows (each as a drift and as a sudden
fault where it has both), one with no fault at all. Each detector set (a
"column": rules alone, rules plus models, ...) runs through its own
``Processor`` and ``AlertBook``, fed the same frames, one tick per batch as a
live processor sees them; the alert transitions are scored against the
ground truth by ``fleetwatch.scoring`` (its docstring states the matching
rules). Nothing is stored: the processor writes into a ``RecordingStore``.

The simulator's fault schedule and ground-truth fields are read defensively,
so this runs on a simulator with one fault kind as well as on one with many:
``random_schedule`` when the simulator has one, else a schedule built here
from the kinds ``Fault`` accepts.

With ``--models`` a second column runs the rules plus the learned detectors
(thermal health, fleet anomaly, lemon nodes), over a model trained here first,
as in real life: on a healthy history that *precedes* the evaluated day
(``train_hours``, default 24 h, ending where the evaluated runs start). That
history is the same fleet, the same GPUs (each GPU's thermal resistance, power
curve, lifelong hot offset, its rack's and node's air: all drawn from
``seed``), run through *other* jobs, air drift and noise (``SimParams.jobs_seed``),
with no fault at all. The training never sees a frame of the evaluated runs,
faulty or healthy, nor any fault. What the frames would carry goes straight
into per-minute grids (``fleetwatch.history.FrameDays.add_samples``: the same
features ``fleetwatch train`` reads from a store's minute rollups), because
writing a store, or building the frames, would not fit the time budget. It has
no events, so lemon scores start from nothing, as on a fleet's first day.
Limitation: the training history is simulated by the same simulator as the
evaluated day: a model trained on it learns the simulator's physics, which real
fleets only approximate.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.collectors.sim import faults as sim_faults
from fleetwatch.config import AlertsConfig
from fleetwatch.evaluate_training import Progress, train_models
from fleetwatch.models import Detector
from fleetwatch.pipeline.processor import Processor
from fleetwatch.recording import RecordingStore
from fleetwatch.scoring import (
    GRACE_S,
    Truth,
    false_alarms_per_1000_gpu_days,
    notified,
    score,
)
from fleetwatch.scoring_noise import noise

DetectorSet = Callable[[], Sequence[Detector]]


@dataclass(frozen=True)
class EvalOptions:
    gpus: int = 1000
    hours: float = 24.0
    seed: int = 0
    per_kind: int = 10           # faults of each kind (split between drift and sudden)
    kinds: tuple[str, ...] = ()  # () = every kind the simulator knows
    gpus_per_node: int = 8
    nodes_per_rack: int = 4
    interval_s: float = 15.0
    grace_s: float = GRACE_S
    start_ts: float = 1_767_225_600.0  # 2026-01-01 00:00 UTC: a fixed day, so runs repeat
    # With models: hours of healthy history, ending at start_ts, that the models train on.
    train_hours: float = 24.0
    part: str = "a100"                 # the simulated GPU (collectors/sim/hardware.py)
    keep_firing_s: float = AlertsConfig().keep_firing_s  # as the processors run
    # The room's inlet air (°C) of both runs, and of a third, healthy run in a hot room
    # (None: none): false alarms in summer, not only in a room held at 22 °C.
    inlet_c: float = 22.0
    hot_inlet_c: float | None = 32.0


def detector_sets(config: Any, models: bool = False) -> dict[str, DetectorSet]:
    """The columns: the configured rules, and with ``models`` the rules plus the learned
    detectors over a model that ``evaluate`` trains first (``WithModels``)."""
    from fleetwatch.wiring import detectors

    sets: dict[str, DetectorSet] = {"rules": lambda: detectors(config.detectors)}
    if models:
        sets["rules+models"] = WithModels(config)
    return sets


@dataclass
class WithModels:
    """The rules plus the learned detectors, over the model file in ``model_dir``
    (set by ``evaluate`` once it has trained one)."""

    config: Any
    model_dir: str | None = None

    def __call__(self) -> Sequence[Detector]:
        from fleetwatch.wiring import detectors, learned_detectors, linked

        if self.model_dir is None:
            raise RuntimeError("rules+models: evaluate() trains the model before the runs")
        models = dataclasses.replace(self.config.models, dir=self.model_dir, enabled=True)
        return linked([*detectors(self.config.detectors), *learned_detectors(models)])


def sim_params(o: EvalOptions, seed: int) -> SimParams:
    nodes = math.ceil(o.gpus / o.gpus_per_node)
    return SimParams(nodes=nodes, gpus=o.gpus_per_node, nodes_per_rack=o.nodes_per_rack,
                     seed=seed, interval_s=o.interval_s, part=o.part, inlet_c=o.inlet_c)


def known_kinds() -> tuple[str, ...]:
    return tuple(getattr(sim_faults, "KINDS", ("cooling",)))


# The shortest evaluation: each run warms up for half an hour before its first fault
# (``schedule.WARMUP_S``: jobs and temperatures settle), and faults of a few minutes, shorter
# than the rules' for-durations and a drift's ramp, would score the schedule, not the
# detectors. ``--hours`` must be at least this.
MIN_HOURS = 1.0


def check(o: EvalOptions) -> None:
    """A ``ValueError`` naming the flag, for options no schedule can be drawn for."""
    if not o.hours >= MIN_HOURS:
        raise ValueError(f"--hours {o.hours:g}: an evaluation needs at least {MIN_HOURS:g} h: "
                         "each run warms up for 30 min before its first fault, and the faults "
                         "need the time after it (the default, 24 h, lets slow drifts ripen)")


def schedule(params: SimParams, o: EvalOptions) -> list[Any]:
    """Faults to inject: the simulator's own ``random_schedule`` if it has one.

    A schedule that does not fit the fleet and the hours is a ``ValueError`` that
    names the flags and, where it can find them, values that do fit.
    """
    check(o)
    kinds = o.kinds or known_kinds()
    duration = o.hours * 3600.0
    for where in (sim_faults, __import__("fleetwatch.collectors.sim", fromlist=["x"])):
        make = getattr(where, "random_schedule", None)
        if make is not None:
            try:
                return list(make(params, duration, o.seed, kinds, o.per_kind))
            except ValueError as exc:
                raise ValueError(_no_room(o, params, str(exc), make)) from None
    # Today's simulator: faults of the kinds ``Fault`` accepts, on distinct GPUs,
    # starting after a warm-up and ending before the run does.
    rng = random.Random(o.seed)
    slots = rng.sample(range(params.nodes * params.gpus), len(kinds) * o.per_kind)
    out = []
    warm = min(1800.0, duration / 4)  # the fleet settles into its jobs first
    for i, kind in enumerate(k for k in kinds for _ in range(o.per_kind)):
        node, gpu = divmod(slots[i], params.gpus)
        length = rng.uniform(min(1800.0, duration / 4), min(3 * 3600.0, duration / 2))
        start = rng.uniform(warm, duration - length - warm / 2)
        out.append(sim_faults.Fault(kind, f"node-{node:03d}", gpu, start, length,  # type: ignore[arg-type]
                                    rng.uniform(1.6, 2.5)))
    return out


def _no_room(o: EvalOptions, params: SimParams, why: str, make: Callable[..., Any]) -> str:
    """What to change when ``o``'s schedule does not fit: the flags, and the nearest
    --gpus, --hours and --per-kind that do fit (tried: a schedule is drawn in
    milliseconds)."""
    kinds = o.kinds or known_kinds()

    def fits(gpus: int = o.gpus, hours: float = o.hours, per_kind: int = o.per_kind) -> bool:
        tried = dataclasses.replace(o, gpus=gpus, hours=hours, per_kind=per_kind)
        try:
            make(sim_params(tried, tried.seed), hours * 3600.0, o.seed, kinds, per_kind)
        except ValueError:
            return False
        return True

    ways = []
    gpus = next((g for g in (o.gpus * 2 ** k for k in range(1, 12)) if g <= 200_000
                 and fits(gpus=g)), None)
    if gpus is not None:
        ways.append(f"--gpus {gpus}")
    hours = next((h for h in (2, 3, 6, 12, 24, 48, 96, 168, 336, 744) if h > o.hours
                  and fits(hours=h)), None)
    if hours is not None:
        ways.append(f"--hours {hours}")
    per_kind = next((k for k in range(o.per_kind - 1, 0, -1) if fits(per_kind=k)), None)
    if per_kind is not None:
        ways.append(f"--per-kind {per_kind}")
    if not o.kinds:
        ways.append("fewer kinds with --kinds")
    what = "each kind and mode" + (f" of {', '.join(o.kinds)}" if o.kinds else "")
    first = why.split(": ", 1)[-1].split(" without overlaps", 1)[0]  # "no room for 10 x ..."
    return (f"{o.per_kind} faults of {what} (--per-kind) do not fit on {o.gpus:,} GPUs "
            f"(--gpus: {params.nodes:,} nodes of {params.gpus}, {params.nodes_per_rack} a rack) "
            f"in {o.hours:g} h (--hours) without two at once on one GPU, node or rack "
            f"({first}); this would fit: "
            f"{', or '.join(ways) if ways else 'a larger fleet and more hours'}")


def truths(sim: FleetSim) -> list[Truth]:
    """The simulator's ground truth as the scorer reads it (new fields optional)."""
    rack_of = dict(zip(getattr(sim, "node_names", ()), getattr(sim, "_node_racks", ())))
    out = []
    for r in sim.ground_truth:
        node = getattr(r, "node", "") or ""
        rack = getattr(r, "rack", None) or rack_of.get(node, "")
        first = next((getattr(r, n) for n in ("first_faulty_ts", "first_sample_ts", "first_ts")
                      if getattr(r, n, None) is not None), None)
        out.append(Truth(r.kind, getattr(r, "mode", None) or "drift", rack, node,
                         getattr(r, "gpu", None), r.onset_ts, r.end_ts,
                         r.onset_ts if first is None else first, first is not None,
                         tuple(getattr(r, "nodes", ()) or ())))
    return out


def run_fleet(params: SimParams, o: EvalOptions, faults: Sequence[Any],
              sets: Mapping[str, DetectorSet], name: str, progress: Progress | None
              ) -> tuple[list[Truth], dict[str, list[Any]]]:
    """Simulate ``o.hours``; feed every tick to one processor per detector set. Returns the
    ground truth and each set's alert changes."""
    sim = FleetSim(params, o.start_ts, faults)
    stores = {k: RecordingStore() for k in sets}
    processors = [Processor(stores[k], list(make()), keep_firing_s=o.keep_firing_s)
                  for k, make in sets.items()]
    steps = int(o.hours * 3600.0 / params.interval_s)
    every = max(1, steps // 100)
    for i in range(steps):
        sim.step()
        frames = sim.frames()
        for p in processors:
            p.process(frames)
        if progress is not None and (i % every == 0 or i == steps - 1):
            progress(name, (i + 1) / steps)
    return truths(sim), {k: st.changes for k, st in stores.items()}


# What a forked worker runs with: detector factories (closures) cannot be pickled,
# so they are left here before the fork and read back in the child.
_FORKED: dict[str, Any] = {}


def _forked_run(name: str) -> tuple[list[Truth], dict[str, list[Any]]]:
    f = _FORKED
    params = f["params"] if name != "hot" else dataclasses.replace(
        f["params"], inlet_c=f["options"].hot_inlet_c)
    return run_fleet(params, f["options"], f["faults"] if name == "faults" else [],
                     f["sets"], name, f["progress"])


def _runs(params: SimParams, o: EvalOptions, faults: Sequence[Any],
          sets: Mapping[str, DetectorSet], progress: Progress | None, workers: int
          ) -> dict[str, tuple[list[Truth], dict[str, list[Any]]]]:
    """The faulty and the healthy run, and the healthy one in a hot room where
    ``hot_inlet_c`` is set: two at a time in forked processes when ``workers`` >= 2 (each
    is single-threaded Python; the hot run takes the healthy one's place once it is
    done, as the faulty run takes longer), else one after the other."""
    names = ["faults", "healthy"] + (["hot"] if o.hot_inlet_c is not None else [])
    _FORKED.update(params=params, options=o, faults=faults, sets=sets, progress=progress)
    try:
        if workers >= 2 and "fork" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(2, mp_context=ctx) as pool:
                return dict(zip(names, pool.map(_forked_run, names)))
        return {name: _forked_run(name) for name in names}
    finally:
        _FORKED.clear()


def evaluate(o: EvalOptions, sets: Mapping[str, DetectorSet],
             progress: Progress | None = None, workers: int = 1) -> dict[str, Any]:
    """Score each detector set; the top level repeats the last set's scores (with models,
    when asked for: what would run)."""
    started = time.perf_counter()
    params = sim_params(o, o.seed)
    faults = schedule(params, o)
    learned = [s for s in sets.values() if isinstance(s, WithModels)]
    model: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="fleetwatch-eval-models-") as tmp:
        if learned:
            model = train_models(params, o.start_ts - o.train_hours * 3600.0, o.start_ts, o.seed,
                                 tmp, workers, progress)
            for s in learned:
                s.model_dir = tmp
        runs = _runs(params, o, faults, sets, progress, workers)
    (truth, faulty), (_, healthy) = runs["faults"], runs["healthy"]
    hot = runs["hot"][1] if "hot" in runs else None
    gpus = params.nodes * params.gpus
    seconds = o.hours * 3600.0
    columns: dict[str, Any] = {}
    for k in sets:
        s = score(truth, faulty[k], o.grace_s)
        s["false_alarms_per_1000_gpu_days"] = false_alarms_per_1000_gpu_days(
            healthy[k], gpus, seconds)
        s["healthy_alarms"] = _alarm_rules(healthy[k])
        s["noise"] = noise(truth, faulty[k], healthy[k], o.grace_s)
        s["healthy_notified"] = _alarm_rules(notified(healthy[k]))
        if hot is not None:
            s["hot_room"] = {
                "inlet_c": o.hot_inlet_c,
                "false_alarms_per_1000_gpu_days": false_alarms_per_1000_gpu_days(
                    hot[k], gpus, seconds),
                "notified_per_1000_gpu_days": false_alarms_per_1000_gpu_days(
                    notified(hot[k]), gpus, seconds),
                "alarms": _alarm_rules(hot[k]), "notified": _alarm_rules(notified(hot[k]))}
        columns[k] = s
    last = columns[list(sets)[-1]]
    out: dict[str, Any] = {}
    if model is not None:
        out["model"] = {k: model[k] for k in ("range", "gpus", "thermal_regressor",
                                              "thermal_heldout_mae_c", "thermal_spread_c",
                                              "anomaly_phases", "train_s")}
    return {**out, "gpus": gpus, "part": o.part, "hours": o.hours, "interval_s": o.interval_s,
            "faults": len(truth),
            "seconds": round(time.perf_counter() - started, 1), "columns": columns,
            "kinds": {k: {m: v[m] for m in ("recall", "precision", "delay_p50_s", "delay_p95_s",
                                              "delay_first_sample_p50_s", "faults",
                                              "never_visible", "modes")}
                      for k, v in last["kinds"].items()},
            "precision": last["precision"], "noise": last["noise"],
            "false_alarms_per_1000_gpu_days": last["false_alarms_per_1000_gpu_days"],
            "inlet_c": o.inlet_c, **({"hot_room": last["hot_room"]} if "hot_room" in last else {})}


def _alarm_rules(changes: Sequence[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    seen = set()
    for a in changes:
        if a.fired_ts is not None and a.id not in seen:
            seen.add(a.id)
            out[a.rule] = out.get(a.rule, 0) + 1
    return out
