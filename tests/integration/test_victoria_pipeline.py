"""The production path end to end: a Kafka consumer group into VictoriaMetrics.

Small batches and small requests, so that many store writes overlap across
batches (``concurrent_writes``); afterwards the server holds every sample once.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid

import pytest

from fleetwatch.codec import encode
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.run_until import process_frames
from tests.servers import Server
from tests.store.helpers import cluster_name, force_flush, frames, minute_ago

pytestmark = pytest.mark.kafka


def count_samples(address: str, cluster: str) -> int:
    """Metric samples of ``cluster`` (not the processor's own records: events, energy)."""
    query = (f'sum(count_over_time({{cluster="{cluster}",'
             f'__name__!~"fleetwatch_.*"}}[3h]))')
    url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as r:
        result = json.load(r)["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def test_every_sample_reaches_victoriametrics_once_through_overlapping_writes(
        kafka: Server, victoria: Server) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"frames-vm-{run}"
    ensure_topic(kafka.address, topic, 2)
    cluster = cluster_name()
    sent = frames(cluster, minute_ago(60), 300, nodes=10, gpus=2)  # 3,000 frames
    producer = KafkaProducer(kafka.address, linger_ms=5)
    for f in sent:
        producer.send(topic, encode(f), f.node.encode())
    producer.flush(30)
    producer.close()
    per_frame = 2 * 2 + 1 + 1  # two GPUs of two metrics, one host metric, one port metric

    store = VictoriaMetricsStore(f"http://{victoria.address}", batch_lines=500)
    assert store.concurrent_writes == 2
    processor = Processor(store)
    try:
        process_frames(processor, kafka.address, topic, f"g-{run}", len(sent),
                       timeout_s=120)
    finally:
        store.close()
    assert processor.stats.frames == len(sent)
    assert processor.stats.points == len(sent) * per_frame
    assert processor.stats.store_errors == 0
    force_flush(victoria.address)
    deadline = time.monotonic() + 30  # new series become searchable within ~10 s
    while (n := count_samples(victoria.address, cluster)) < len(sent) * per_frame:
        assert time.monotonic() < deadline, f"{n} of {len(sent) * per_frame} samples"
        time.sleep(1)
    assert n == len(sent) * per_frame
