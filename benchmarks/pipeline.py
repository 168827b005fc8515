"""How fast frames go from a Kafka topic into the store, and how fresh they are.

    .venv/bin/python benchmarks/pipeline.py [--steps 480] [--cpus split|shared] [--workers N]
                                            [--shapes sim,agent] [--fresh-s 30] [--repeats 3]
                                            [--profile]

Starts its own Tansu broker and VictoriaMetrics on free 127.0.0.1 ports and
measures two shapes of frame of a 125-node x 8-GPU fleet, each on its own topic
(encoded with ``fleetwatch.codec``):

- ``sim``: the simulator's frames: 36 metrics a GPU, 5 host metrics, no ports,
  no XIDs (it had 11 metrics a GPU when docs/scale.md's first figures were taken);
- ``agent``: frames as the node agent makes them: ``node_source`` over
  ``FakeNvml`` (8 H100s: about 40 metrics a GPU, the GPUs' info) and the host
  fixture of the tests (host metrics, NICs, InfiniBand ports, RAPL), read a few
  times and given each node's name and tick.

For each shape, on that same data:

a. the processor: ``Processor`` + ``KafkaConsumer`` → ``VictoriaMetricsStore``, one
   process, with the one first rule (die >= 85 °C for 60 s), with every detector, and
   with every detector and the learned models over a trained model, ``--repeats``
   runs of each interleaved (figures: the medians, each run's figure beside them, and
   each pair's ratio; ``pipeline_processor.py``), and ``fleetwatch process`` with ``--workers N``
   (N = the processor's cores by default, ``--workers``): N consumer-group members
   as child processes, timed by their committed offsets. The topics have
   ``max(2, N)`` partitions so that every worker has one;
b. a naive consumer as a user would write it: one message at a time,
   decoded, one influxdb-client ``Point`` per metric, each written synchronously
   (on the first frames holding ``--naive-samples`` GPU samples: it is ~100x slower);
c. the raw limits: a bare kafka-python loop that only counts messages, and a
   bare bulk write of the same rows (pre-encoded line protocol) into VictoriaMetrics;
d. freshness (once, on the simulator's frames): 1,000 GPUs sampled every second
   for ``--fresh-s`` seconds through the processor; per tick, the seconds from the
   frame's timestamp until all of its 1,000 GPUs are queryable.

Where the CPUs go (``--cpus``): ``split`` (the default) gives the servers,
Tansu and VictoriaMetrics, the upper half of the cores and the processor (and
this script) the lower half, as in a real deployment, where the store runs on
its own hosts: (a) and (c) then measure the processor and the store on equal
resources, per-core figures that ``docs/scale.md`` sizes with. ``shared`` lets
every process run on every core: the raw store write then has every core for
the store, while in (a) the store and the processor take turns on them, so the
ratio (a)/(c) says how the processor's CPU per sample compares with the
store's rather than how fast it goes; it also varies with the store's CPU per
row, which moves by a third from run to run on the same rows.

A sample is one metric of one GPU at one instant (host and port metrics are
written too, and checked as stored, but not counted). Progress goes to stderr;
the last line on stdout is the JSON summary: the figures of each shape under
``shapes``, and for each its processor / raw-store ratio (target >= 50%).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

import kafka
import lz4.frame

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.servers: the same server helpers as the tests

from pipeline_frames import (  # noqa: E402
    GPUS,
    NODES,
    describe,
    frame_points,
    make_agent_frames,
    make_frames,
)
from pipeline_freshness import GROUP_OPTS, percentile, run_freshness  # noqa: E402  (beside this script)
from pipeline_processor import alone_and_with_models, every_over_one_rule, trained_models  # noqa: E402, I001
from pipeline_store import check_received, rows_received, settle  # noqa: E402
from pipeline_workers import run_workers  # noqa: E402

from fleetwatch.codec import decode, encode  # noqa: E402
from fleetwatch.config import DetectorsConfig  # noqa: E402
from fleetwatch.frame import Frame  # noqa: E402
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic  # noqa: E402
from fleetwatch.pipeline.processor import Processor  # noqa: E402
from fleetwatch.pipeline.store.lineproto import FrameEncoder  # noqa: E402
from fleetwatch.pipeline.store.lpwriter import LineProtocolWriter  # noqa: E402
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore  # noqa: E402
from fleetwatch.wiring import detectors  # noqa: E402
from tests.servers import kafka_broker, victoria_metrics  # noqa: E402

SHAPES = ("sim", "agent")
CPUS = sorted(os.sched_getaffinity(0))
PARTITIONS = 2  # max(2, --workers): every worker has a partition


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def gpu_samples(frames: list[Frame]) -> int:
    return sum(len(g.metrics) for f in frames for g in f.gpus)


def produce(bootstrap: str, topic: str, frames: list[Frame]) -> list[bytes]:
    producer = KafkaProducer(bootstrap, linger_ms=20)
    values = [encode(f) for f in frames]
    for i, (f, v) in enumerate(zip(frames, values, strict=True), 1):
        producer.send(topic, v, f.node.encode())
        if i % 10_000 == 0:  # within the producer's bound on unacknowledged bytes
            producer.flush(60)
    producer.flush(60)
    producer.close()
    return values


def run_naive(bootstrap: str, topic: str, url: str, n_frames: int) -> tuple[float, int]:
    from influxdb_client import InfluxDBClient, Point, WritePrecision
    from influxdb_client.client.write_api import SYNCHRONOUS

    client = InfluxDBClient(url=url, token="-", org="fleetwatch")
    write = client.write_api(write_options=SYNCHRONOUS)
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="naive",
                                   auto_offset_reset="earliest", **GROUP_OPTS)
    samples, started = 0, None
    for frames, record in enumerate(consumer, 1):
        started = started or time.perf_counter()
        frame = decode(record.value)
        ts = round(frame.ts * 1000)
        for g in frame.gpus:
            for name, value in g.metrics.items():
                point = (Point("naive").tag("cluster", frame.cluster).tag("node", frame.node)
                         .tag("gpu", str(g.index)).field(name, value).time(ts, WritePrecision.MS))
                write.write("fleetwatch", record=point)
                samples += 1
        if frames >= n_frames:
            break
    seconds = time.perf_counter() - (started or 0.0)
    consumer.close()
    client.close()
    return seconds, samples


def run_raw_consume(bootstrap: str, topic: str, n_frames: int) -> float:
    """Partitions assigned by hand: no group join, so the clock starts at the first fetch."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, max_poll_records=2000,
                                   enable_auto_commit=False)
    parts = [kafka.TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    seen, started = 0, time.perf_counter()
    while seen < n_frames:
        batches = consumer.poll(timeout_ms=200, max_records=2000)
        seen += sum(len(records) for records in batches.values())
    seconds = time.perf_counter() - started
    consumer.close()
    return seconds


def run_raw_store(url: str, frames: list[Frame]) -> float:
    """The same rows as the processor writes, as line protocol made beforehand, sent in bulk."""
    relabelled = [dataclasses.replace(f, cluster=f"raw-{f.cluster}") for f in frames]
    encoder = FrameEncoder()
    blocks = [encoder.encode(relabelled[i:i + 200]) for i in range(0, len(relabelled), 200)]
    writer = LineProtocolWriter(url, batch_lines=10_000)
    started = time.perf_counter()
    writer.write_blocks(blocks)
    seconds = time.perf_counter() - started
    writer.close()
    return seconds


def profile_processor(bootstrap: str, topic: str, url: str, n_frames: int) -> str:
    """cProfile of the whole processor loop (poll, decode, store, detect, commit) over the
    benchmark's topic, in this thread; a watcher stops it once every frame is in."""
    store = VictoriaMetricsStore(url)
    proc = Processor(store, detectors(DetectorsConfig()))
    consumer = KafkaConsumer(bootstrap, topic, "profile", **GROUP_OPTS)
    stop = threading.Event()

    def watch() -> None:
        while proc.stats.frames < n_frames:
            time.sleep(0.01)
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    profiler = cProfile.Profile()
    profiler.enable()
    proc.run(consumer, stop)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(r"fleetwatch|pipeline|codec|kafka/consumer", 25)
    stats.sort_stats("tottime").print_stats(15)
    consumer.close()
    store.close()
    return out.getvalue()


def measure(shape: str, frames: list[Frame], bootstrap: str, url: str,
            args: argparse.Namespace, say) -> dict[str, object]:
    """(a), (b), (c) on one shape of frame, on a topic of its own; its figures as a dict."""
    n, samples, points = len(frames), gpu_samples(frames), frame_points(frames)
    topic = f"frames-{shape}"
    ensure_topic(bootstrap, topic, PARTITIONS)
    t = time.perf_counter()
    values = produce(bootstrap, topic, frames)
    say(f"[{shape}] produced {n} frames ({samples} GPU samples, {points} points; "
        f"{describe(frames)}) in {time.perf_counter() - t:.1f}s")
    sizes = sorted(len(v) for v in values)
    one = values[len(values) // 2]
    batch = b"".join(values[:NODES])
    size = {"frame_msgpack_bytes": sizes[len(sizes) // 2],
            "frame_lz4_bytes": len(lz4.frame.compress(one)),
            "batch_of_125_lz4_bytes_per_frame": len(lz4.frame.compress(batch)) / NODES}
    say(f"[{shape}] sizes: {size}")

    secs = run_raw_consume(bootstrap, topic, n)
    raw_consume = samples / secs
    say(f"[{shape}] raw consume: {n} messages in {secs:.2f}s = {raw_consume:,.0f} samples/s")
    received = rows_received(url)
    settle(url, f"[{shape}] the raw store write", say)
    secs = run_raw_store(url, frames)
    raw_store = samples / secs
    say(f"[{shape}] raw store: {secs:.2f}s = {raw_store:,.0f} samples/s")
    received = check_received(url, received, points, f"[{shape}] raw store", say)
    runs, received = alone_and_with_models(shape, bootstrap, topic, url, n, samples, points,
                                           received, args.models_dir, args.repeats, say)
    rules = [r[0] for r in runs["rules"]]
    models = [r[0] for r in runs["models"]]
    against_one_rule = every_over_one_rule(shape, runs, say)
    single, with_models = median(rules), median(models)
    single_steady = median([r[1] for r in runs["rules"]])
    pairs = [m / r for r, m in zip(rules, models, strict=True)]
    rules_cpu = [r[2] for r in runs["rules"]]
    models_cpu = [r[2] for r in runs["models"]]
    cpu_ratio = median(models_cpu) / median(rules_cpu)
    say(f"[{shape}] per CPU second: rules alone median {median(rules_cpu):,.0f} GPU samples "
        f"({min(rules_cpu):,.0f}..{max(rules_cpu):,.0f}); with the learned models "
        f"{median(models_cpu):,.0f} ({min(models_cpu):,.0f}..{max(models_cpu):,.0f}) = "
        f"{cpu_ratio:.0%} of the rules alone")
    say(f"[{shape}] processor, one process, {args.repeats} runs each: rules alone median "
        f"{single:,.0f} GPU samples/s ({min(rules):,.0f}..{max(rules):,.0f}); with the learned "
        f"models median {with_models:,.0f} ({min(models):,.0f}..{max(models):,.0f}) = "
        f"{with_models / single:.0%} of the rules alone (target >= 80%; run by run "
        f"{', '.join(f'{p:.0%}' for p in pairs)})")
    processor, how = single, "one process"
    multi = multi_steady = None
    if args.workers > 1:
        settle(url, f"[{shape}] the processor's workers", say)
        fps, steady_fps, before = run_workers(bootstrap, topic, url, n, f"workers-{shape}",
                                              args.workers, PARTITIONS)
        multi, multi_steady = fps * samples / n, steady_fps * samples / n
        received = check_received(url, received, points, f"[{shape}] processor, workers", say)
        say(f"[{shape}] processor, fleetwatch process --workers {args.workers} "
            f"({PARTITIONS} partitions): {multi:,.0f} GPU samples/s from the group's join on; "
            f"steady state from when every worker had stored a batch ({before} of {n} "
            f"frames): {multi_steady:,.0f}")
        processor, how = multi, f"--workers {args.workers}"
    how += f", cpus {args.cpus}"
    per_frame = samples / n  # the same work for either shape: an agent frame holds ~4x more
    naive_frames = min(n, max(1, round(args.naive_samples / per_frame)))
    secs, naive_samples = run_naive(bootstrap, topic, url, naive_frames)
    naive = naive_samples / secs
    say(f"[{shape}] naive: {naive_samples} samples in {secs:.2f}s = {naive:,.0f} samples/s")
    if args.profile:
        say(f"[{shape}] profile of the processor loop:\n"
            + profile_processor(bootstrap, topic, url, n))
    ratio = processor / raw_store
    say(f"[{shape}] processor ({how}) / naive = {processor / naive:.1f}x (target >= 10); "
        f"processor / raw store = {ratio:.0%} (target >= 50%); processor / raw consume = "
        f"{processor / raw_consume:.0%}")
    return {
        **describe(frames),
        "frames": n,
        "gpu_samples": samples,
        "points": points,
        **size,
        "processor_samples_per_s": round(processor),
        "processor_points_per_s": round(processor * points / samples),
        "processor_mode": how,
        "processor_one_process_samples_per_s": round(single),
        **against_one_rule,
        "processor_with_models_samples_per_s": round(with_models),
        "models_over_rules_one_process": round(with_models / single, 3),
        # Medians above; each run here, in the order run (interleaved), and each pair's ratio.
        "processor_one_process_runs_samples_per_s": [round(r) for r in rules],
        "processor_with_models_runs_samples_per_s": [round(r) for r in models],
        "models_over_rules_runs": [round(p, 3) for p in pairs],
        # The same per CPU second of the processor's process: steadier on a shared machine.
        "processor_one_process_samples_per_cpu_s": round(median(rules_cpu)),
        "processor_with_models_samples_per_cpu_s": round(median(models_cpu)),
        "models_over_rules_cpu": round(cpu_ratio, 3),
        "processor_one_process_runs_samples_per_cpu_s": [round(r) for r in rules_cpu],
        "processor_with_models_runs_samples_per_cpu_s": [round(r) for r in models_cpu],
        "processor_one_process_steady_samples_per_s": round(single_steady),
        "processor_workers_samples_per_s": round(multi) if multi is not None else None,
        "processor_workers_steady_samples_per_s":
            round(multi_steady) if multi_steady is not None else None,
        "naive_samples_per_s": round(naive),
        "raw_consume_samples_per_s": round(raw_consume),
        "raw_store_samples_per_s": round(raw_store),
        "processor_over_raw_store": round(ratio, 3),
        "target_met": ratio >= 0.5,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=480, help="1 s ticks of the 1,000-GPU fleet")
    ap.add_argument("--naive-samples", type=int, default=150 * 88,
                    help="GPU samples the naive consumer writes (default: 150 simulator frames)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of the one-process processor without and with the learned "
                    "models, interleaved; the figures are the medians (default 3)")
    ap.add_argument("--fresh-s", type=int, default=30)
    ap.add_argument("--warmup-s", type=int, default=12)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help="which frames to measure, comma-separated: sim (the simulator's), "
                    "agent (as the node agent makes them); default both")
    ap.add_argument("--cpus", choices=("split", "shared"), default=None,
                    help="split (default with 2 or more cores): the servers on the upper half "
                    "of the cores, the processor on the lower half; shared: every process on "
                    "every core")
    ap.add_argument("--workers", type=int, default=None,
                    help="fleetwatch process --workers N for the processor figure (default: the "
                    "processor's cores); 1 measures the single process only")
    args = ap.parse_args()
    args.shapes = [x for x in args.shapes.split(",") if x]
    if not args.shapes or set(args.shapes) - set(SHAPES):
        ap.error(f"--shapes: a comma-separated choice of {', '.join(SHAPES)}")
    if args.cpus is None:
        args.cpus = "split" if len(CPUS) >= 2 else "shared"
    if args.cpus == "split" and len(CPUS) < 2:
        ap.error("--cpus split needs at least 2 cores")
    if args.cpus == "split":
        server_cpus, processor_cpus = set(CPUS[len(CPUS) // 2:]), set(CPUS[:len(CPUS) // 2])
    else:
        server_cpus = processor_cpus = set(CPUS)
    if args.workers is None:
        args.workers = len(processor_cpus)
    global PARTITIONS
    PARTITIONS = max(2, args.workers)

    tmp = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-"))
    # The servers inherit this thread's CPUs when they start; then this process
    # (and the processors it starts: threads and child processes) moves.
    os.sched_setaffinity(0, server_cpus)
    broker = kafka_broker(tmp).start()
    vm = victoria_metrics(tmp).start()
    os.sched_setaffinity(0, processor_cpus)
    url = f"http://{vm.address}"
    try:
        say(f"broker {broker.address}, VictoriaMetrics {vm.address}; cpus {args.cpus}: servers "
            f"on {sorted(server_cpus)}, processor on {sorted(processor_cpus)}")
        figures: dict[str, dict[str, object]] = {}
        args.models_dir = trained_models("bench-sim")
        say(f"learned models trained on 2 h of the simulated fleet: {args.models_dir}")
        for k, shape in enumerate(args.shapes):
            make = make_frames if shape == "sim" else make_agent_frames
            # Each shape in its own cluster and hour, so that no row overwrites another's.
            frames = make(args.steps, f"bench-{shape}", time.time() - (k + 1) * 7200)
            figures[shape] = measure(shape, frames, broker.address, url, args, say)
        say(f"freshness: {args.warmup_s}s warm-up, then {args.fresh_s}s of 1,000 GPUs at 1 Hz")
        lags = run_freshness(broker.address, url, args.fresh_s, args.warmup_s, PARTITIONS,
                             NODES, GPUS, say)
        p50, p99 = percentile(lags, 0.50), percentile(lags, 0.99)
        say(f"freshness over {len(lags)} ticks: p50 {p50:.2f}s, p99 {p99:.2f}s, "
            f"max {max(lags):.2f}s")
        print(json.dumps({
            "cpus": args.cpus,
            "server_cpus": len(server_cpus),
            "processor_cpus": len(processor_cpus),
            "processor_workers": args.workers,
            "steps": args.steps,
            "shapes": figures,
            "freshness_p50_s": round(p50, 3),
            "freshness_p99_s": round(p99, 3),
        }))
    finally:
        broker.stop()
        vm.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
