"""The one-process processor runs of ``benchmarks/pipeline.py``: the processor over a
topic into VictoriaMetrics with the one first rule, with every detector, and with every
detector and the learned models, and the interleaved repetitions that compare them
(``alone_and_with_models``)."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable
from statistics import median

from pipeline_frames import GPUS, NODES
from pipeline_freshness import GROUP_OPTS  # beside this script
from pipeline_store import check_received, settle

from fleetwatch.config import DetectorsConfig
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.bus.kafka import KafkaConsumer
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from fleetwatch.wiring import detectors


class TimedConsumer:
    """A Consumer that notes when the first messages arrive (group join is not throughput)
    and how many each poll returned."""

    def __init__(self, inner: KafkaConsumer) -> None:
        self.inner = inner
        self.first: float | None = None
        self.sizes: list[int] = []

    def poll(self, max_messages: int = 500, timeout_s: float = 1.0) -> list[Message]:
        out = self.inner.poll(max_messages, timeout_s)
        if out:
            self.sizes.append(len(out))
            if self.first is None:
                self.first = time.perf_counter()
        return out

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def trained_models(cluster: str) -> str:
    """A model directory with a model trained on two hours of the simulated fleet
    (the same nodes, another history), as ``fleetwatch train`` would write it: of both
    simulated parts, so that it scores the A100s of the simulator's frames and the
    H100s (700 W) of the agent's (a model judges only GPUs of the power limits it was
    trained on)."""
    from fleetwatch.collectors.sim import FleetSim, SimParams
    from fleetwatch.history import FrameDays
    from fleetwatch.train import train_frames

    start = time.time() - 10 * 3600
    sims = [FleetSim(SimParams(nodes=NODES // 2, gpus=GPUS, interval_s=15.0,
                               cluster=f"{cluster}-{part}", jobs_seed=1, part=part), start)
            for part in ("a100", "h100")]
    history = FrameDays(start, start + 7200)
    for _ in range(480):
        for sim in sims:
            sim.step()
            history.add(sim.frames())
    out = tempfile.mkdtemp(prefix="fleetwatch-bench-models-")
    train_frames(history, start, start + 7200, out)
    return out


def run_processor(bootstrap: str, topic: str, url: str, n_frames: int,
                  group: str, models_dir: str | None = None, one_rule: bool = False
                  ) -> tuple[float, float, float, Processor]:
    """Seconds from the first message to the last frame stored, the steady-state
    frames/s from the first stored batch on (as ``run_workers`` measures), and the CPU
    seconds this process spent meanwhile (what a machine shared with other work
    disturbs least: its wall-clock figures move with the others' load). With
    ``models_dir``: the learned detectors too, over the model file there. ``one_rule``:
    instead of every detector, the one rule fleetwatch began with (die >= 85 °C for 60 s),
    the baseline that issue #11 measures every detector against."""
    store = VictoriaMetricsStore(url)
    extra = []
    if models_dir is not None:
        from fleetwatch.config import ModelsConfig
        from fleetwatch.wiring import learned_detectors

        extra = learned_detectors(dataclasses.replace(ModelsConfig(), dir=models_dir))
    rules = [GpuTemperatureLimit()] if one_rule else detectors(DetectorsConfig())
    proc = Processor(store, [*rules, *extra])
    consumer = TimedConsumer(KafkaConsumer(bootstrap, topic, group, **GROUP_OPTS))
    stop = threading.Event()
    thread = threading.Thread(target=proc.run, args=(consumer, stop), daemon=True)
    cpu = time.process_time()  # this process: the processor's threads and the consumer's
    thread.start()
    first: tuple[float, int] | None = None
    while proc.stats.frames < n_frames:
        time.sleep(0.01)
        if first is None and proc.stats.frames:
            first = (time.perf_counter(), proc.stats.frames)
        if not thread.is_alive():
            raise RuntimeError("processor stopped early")
    end = time.perf_counter()
    seconds = end - (consumer.first or 0.0)
    assert first is not None
    steady = (n_frames - first[1]) / (end - first[0])
    cpu = time.process_time() - cpu
    stop.set()
    thread.join()
    consumer.inner.close()
    store.close()
    return seconds, steady, cpu, proc


def alone_and_with_models(shape: str, bootstrap: str, topic: str, url: str, n: int,
                          samples: int, points: int, received: int, models_dir: str,
                          repeats: int, say: Callable[[str], None]
                          ) -> tuple[dict[str, list[tuple[float, float, float]]], int]:
    """The processor with the one first rule, with every detector ("rules"), and with
    every detector and the learned models, one process each, interleaved (one order,
    then the reverse, ...) ``repeats`` times: one run of each is at the mercy of whatever
    else the machine does meanwhile. Returns each kind's (GPU samples/s from the first
    message, steady state from the first stored batch, GPU samples per CPU second) per
    run, in the order run, and the store's row count after them."""
    kinds = ("one_rule", "rules", "models")
    said = {"one_rule": "with the one first rule", "rules": "with every detector",
            "models": "with every detector and the learned models"}
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
    for k in range(repeats):
        for kind in kinds if k % 2 == 0 else kinds[::-1]:
            what = f"[{shape}] processor {said[kind]}"
            settle(url, f"{what}, run {k + 1}", say)
            secs, steady, cpu, proc = run_processor(
                bootstrap, topic, url, n, f"processor-{kind}-{shape}-{k}",
                models_dir if kind == "models" else None, one_rule=kind == "one_rule")
            received = check_received(url, received, points, f"{what}, run {k + 1}", say)
            runs[kind].append((samples / secs, steady * samples / n, samples / cpu))
            say(f"{what}, one process, run {k + 1}: {proc.stats.frames} frames in {secs:.2f}s"
                f" = {samples / secs:,.0f} GPU samples/s; {cpu:.1f} CPU s = "
                f"{samples / cpu:,.0f} GPU samples per CPU second")
    return runs, received


def every_over_one_rule(shape: str, runs: dict[str, list[tuple[float, float, float]]],
                        say: Callable[[str], None]) -> dict[str, object]:
    """Every detector against the one rule fleetwatch began with (issue #11: >= 80%), said
    and as the JSON fields of the shape."""
    first = [r[0] for r in runs["one_rule"]]
    rules = [r[0] for r in runs["rules"]]
    every = median(rules) / median(first)
    every_cpu = median([r[2] for r in runs["rules"]]) / median([r[2] for r in runs["one_rule"]])
    say(f"[{shape}] processor with every detector: {every:.0%} of its throughput with the one "
        f"first rule (median {median(first):,.0f} GPU samples/s; target >= 80%); per CPU "
        f"second {every_cpu:.0%}; run by run "
        f"{', '.join(f'{r / f:.0%}' for f, r in zip(first, rules, strict=True))}")
    return {"processor_one_rule_samples_per_s": round(median(first)),
            "processor_one_rule_runs_samples_per_s": [round(r) for r in first],
            "every_detector_over_one_rule": round(every, 3),
            "every_detector_over_one_rule_cpu": round(every_cpu, 3)}
