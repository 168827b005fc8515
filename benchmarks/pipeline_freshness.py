"""The freshness part of ``benchmarks/pipeline.py``: 1,000 GPUs sampled every
second through the processor; per tick, the seconds from the frame's timestamp
until all of its GPUs can be read back from the store.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable

from fleetwatch.codec import encode
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.config import DetectorsConfig
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from fleetwatch.wiring import detectors

GROUP_OPTS = dict(session_timeout_ms=6000, heartbeat_interval_ms=2000)


def count_at(url: str, cluster: str, tick_ms: int) -> int:
    """How many GPUs' temperature at ``tick_ms`` (or later) can be read now."""
    query = (f'count(tlast_over_time(gpu_temp_c{{cluster="{cluster}"}}[30s]) '
             f'>= {tick_ms / 1000:.3f})')
    params = urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=5) as r:
        result = json.loads(r.read())["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def run_freshness(bootstrap: str, url: str, seconds: int, warmup_s: int, partitions: int,
                  nodes: int, gpus: int, say: Callable[[str], None]) -> list[float]:
    """Frames every second, stamped with the wall clock; per tick, the lag until queryable."""
    topic, cluster = "fresh", "fresh"
    ensure_topic(bootstrap, topic, partitions)
    store = VictoriaMetricsStore(url)
    proc = Processor(store, detectors(DetectorsConfig()))
    consumer = KafkaConsumer(bootstrap, topic, "fresh", **GROUP_OPTS)
    stop = threading.Event()
    worker = threading.Thread(target=proc.run, args=(consumer, stop), daemon=True)
    worker.start()
    producer = KafkaProducer(bootstrap, linger_ms=5)
    start = float(int(time.time()) + 1)
    sim = FleetSim(SimParams(nodes=nodes, gpus=gpus, interval_s=1.0, cluster=cluster),
                   start - 1.0)
    ticks: list[float] = []
    lags: list[float] = []
    pending: list[float] = []
    total = warmup_s + seconds
    for k in range(total):
        sim.step()
        frames = sim.frames()  # stamped sim.ts == the wall-clock second it is sent in
        time.sleep(max(0.0, sim.ts - time.time()))
        for f in frames:
            producer.send(topic, encode(f), f.node.encode())
        producer.flush(10)
        ticks.append(sim.ts)
        if k >= warmup_s:  # the first ticks create series, which VM indexes in ~10 s
            pending.append(sim.ts)
        # Until the next tick is due (after the last: up to 10 s), look for readable ticks.
        last = k == total - 1
        deadline = sim.ts + (10.0 if last else 1.0)
        while time.time() < deadline and (pending or not last):
            for tick in list(pending):
                if count_at(url, cluster, round(tick * 1000)) >= nodes * gpus:
                    lags.append(time.time() - tick)
                    pending.remove(tick)
            time.sleep(0.02)
    if pending:
        say(f"freshness: {len(pending)} ticks never became readable within 10 s")
        lags.extend([float("inf")] * len(pending))
    stop.set()
    worker.join()
    producer.close()
    consumer.close()
    store.close()
    return lags


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
