"""Benchmark: the processor at steady state, as a live fleet feeds it.

A simulated fleet (``--nodes`` nodes of 8 GPUs, default 1,000) reports every
``--interval`` seconds (default 5, the agent's), its frames spread evenly over
the interval as independent agents would send them, through a Tansu broker into
one processor writing to VictoriaMetrics, both started here on free 127.0.0.1
ports. For ``--seconds`` (default 60) per run it measures the processor
thread's CPU (the thread that decodes, runs the detectors and drives the alerts;
the store's writer threads are not counted) and the size of the batches its
polls return, with the one first rule and with every detector, interleaved
``--repeats`` times. ``benchmarks/pipeline.py`` measures how fast a backlog
drains, where batches are as large as a poll allows; here they are as large as
the fleet makes them, and the detectors' fixed cost per batch shows.
Last line JSON.

    python benchmarks/pipeline_steady.py [--nodes 1000] [--interval 5] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.servers: the same server helpers as the tests

from pipeline_processor import TimedConsumer  # noqa: E402  (beside this script)

from fleetwatch.codec import encode  # noqa: E402
from fleetwatch.collectors.sim import FleetSim, SimParams  # noqa: E402
from fleetwatch.config import DetectorsConfig  # noqa: E402
from fleetwatch.models.rules import GpuTemperatureLimit  # noqa: E402
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic  # noqa: E402
from fleetwatch.pipeline.processor import Processor  # noqa: E402
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore  # noqa: E402
from fleetwatch.wiring import detectors  # noqa: E402
from tests.servers import kafka_broker, victoria_metrics  # noqa: E402

SENDS_PER_S = 10  # the fleet's frames go out in this many bursts a second


def run(kind: str, run_no: int, broker: str, url: str,
        ticks: list[list[tuple[bytes, bytes]]], rate: float) -> dict[str, Any]:
    """One run: the fleet's frames at ``rate`` frames/s; the processor thread's CPU."""
    topic = f"steady-{kind}-{run_no}"
    ensure_topic(broker, topic, 4)
    store = VictoriaMetricsStore(url)
    dets = [GpuTemperatureLimit()] if kind == "one_rule" else detectors(DetectorsConfig())
    proc = Processor(store, dets)
    consumer = TimedConsumer(KafkaConsumer(broker, topic, f"steady-{kind}-{run_no}",
                                              session_timeout_ms=6000,
                                              heartbeat_interval_ms=2000))
    stop = threading.Event()
    thread = threading.Thread(target=proc.run, args=(consumer, stop), daemon=True)
    thread.start()
    producer = KafkaProducer(broker, linger_ms=5)
    time.sleep(3)  # joined its group, assigned its partitions
    me = psutil.Process()

    def cpu() -> float:
        return sum(t.user_time + t.system_time for t in me.threads() if t.id == thread.native_id)

    frames = [m for tick in ticks for m in tick]
    burst = max(1, round(rate / SENDS_PER_S))
    t0, cpu0, sent = time.monotonic(), cpu(), 0
    for i in range(0, len(frames), burst):
        for key, m in frames[i:i + burst]:
            producer.send(topic, m, key)  # keyed by node, as agents send
        sent += len(frames[i:i + burst])
        producer.flush(10)
        time.sleep(max(0.0, t0 + sent / rate - time.monotonic()))
    deadline = time.monotonic() + 30
    while proc.stats.frames < sent and time.monotonic() < deadline:
        time.sleep(0.02)
    wall, used = time.monotonic() - t0, cpu() - cpu0
    stop.set()
    thread.join()
    producer.close()
    consumer.inner.close()
    store.close()
    if proc.stats.frames < sent:
        raise RuntimeError(f"{kind}: the processor stored {proc.stats.frames} of {sent} frames "
                           "within 30 s of the last send: it does not keep up")
    sizes = consumer.sizes
    return {"frames": proc.stats.frames, "seconds": round(wall, 1), "cpu_s": round(used, 2),
            "core_share": round(used / wall, 3), "batches": len(sizes),
            "batch_median": statistics.median(sizes),
            "batch_mean": round(statistics.mean(sizes), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000, help="nodes of 8 GPUs (default 1000)")
    ap.add_argument("--interval", type=float, default=5.0,
                    help="seconds between a node's frames (default 5)")
    ap.add_argument("--seconds", type=int, default=60, help="seconds per run (default 60)")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each (default 2)")
    args = ap.parse_args()
    if not (1 <= args.nodes <= 20_000 and 1 <= args.interval <= 300
            and args.interval <= args.seconds <= 3600 and 1 <= args.repeats <= 10):
        ap.error("want 1..20000 nodes, an interval of 1..300 s, --seconds from the interval "
                 "to 3600, 1..10 repeats")
    sim = FleetSim(SimParams(nodes=args.nodes, gpus=8, interval_s=args.interval),
                   time.time() - 3600)
    ticks = []
    for _ in range(int(args.seconds / args.interval)):
        sim.step()
        ticks.append([(f.node.encode(), encode(f)) for f in sim.frames()])
    rate = args.nodes / args.interval
    runs: dict[str, list[dict[str, Any]]] = {"one_rule": [], "every_detector": []}
    with tempfile.TemporaryDirectory(prefix="fleetwatch-steady-") as tmp:
        broker = kafka_broker(Path(tmp)).start()
        vm = victoria_metrics(Path(tmp)).start()
        try:
            for r in range(args.repeats):
                for kind in (("one_rule", "every_detector") if r % 2 == 0
                             else ("every_detector", "one_rule")):
                    got = run(kind, r, broker.address, f"http://127.0.0.1:{vm.port}", ticks, rate)
                    runs[kind].append(got)
                    print(f"{kind}, run {r + 1}: {got['frames']:,} frames in {got['seconds']} s; "
                          f"processor thread {got['cpu_s']} CPU s = {got['core_share']:.0%} of a "
                          f"core; {got['batches']} batches, median {got['batch_median']:.0f} "
                          "frames", file=sys.stderr, flush=True)
        finally:
            broker.stop()
            vm.stop()
    print(json.dumps({"nodes": args.nodes, "gpus": args.nodes * 8, "interval_s": args.interval,
                      "frames_per_s": rate, "runs": runs,
                      **{f"{k}_core_share_median": statistics.median(x["core_share"] for x in v)
                         for k, v in runs.items()}}))


if __name__ == "__main__":
    main()
