"""Alerts an older release wrote read back after an upgrade, whatever their evidence keys.

Before evidence keys were stored ``%XX``-encoded (``field_key``), a key went into the line
as it was: a node named ``gpu%FF`` gave the field ``evidence:last_frame_ts.gpu%FF``. Decoding
every key with a ``%`` made such a row fail to read (``%FF`` is no UTF-8: `fleetwatch
alerts` ended with a traceback and `fleetwatch process` paused consumption for ever), and
``gpu%41`` read back as ``gpuA``: another node. The lines here are as the older release
wrote them, sent to the real servers as they are.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
import uuid

import pytest

from fleetwatch.codec import encode
from fleetwatch.pipeline.bus.kafka import KafkaProducer, ensure_topic
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Store
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.lprecords import field_key, field_key_text
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.run_until import process_frames
from tests.servers import Server
from tests.store.conftest import DATABASE
from tests.store.helpers import cluster_name, force_flush, frames

# Node names of the older release's rows, and how their evidence keys read back.
LEGACY = {"last_frame_ts.gpu%FF": 1.5, "last_frame_ts.gpu%41": 2.5,
          "last_frame_ts.gpuA": 3.5, "last_frame_ts.50%off": 4.5,
          "last_frame_ts.a%2": 5.5, "last_frame_ts.%e2%82": 6.5}


def legacy_line(cluster: str, rack: str, t_ms: int) -> str:
    """A firing ``rack_silent`` alert as the older release's ``alert_line`` wrote it: every
    evidence key as it was (no encoding)."""
    evidence = ",".join(f"evidence:{k}={v!r}" for k, v in
                        {"silent_s": 62.0, "silent_nodes": 6.0, **LEGACY}.items())
    t = t_ms / 1000
    return (f"fleetwatch_alert,cluster={cluster},device=rack:{rack},"
            f"id=rack_silent/{cluster}//rack:{rack}/{t_ms},rack={rack},rule=rack_silent,"
            f"severity=critical state=1.0,started_ts={t - 60!r},updated_ts={t!r},value=6.0,"
            f"fired_ts={t!r},{evidence} {t_ms}")


def test_a_stored_key_reads_as_encoded_only_where_it_was() -> None:
    """Decoded only where encoding the decoded key gives the stored one back exactly."""
    for key in LEGACY:
        assert field_key_text(key) == key
    for key in ("gpu%41", "%", "%22", "50%off", "q\"3", "温%度", "a%2fb", "é\tx"):
        assert field_key_text(field_key(key)) == key
    assert field_key_text("gpu%2541") == "gpu%41"  # this release's "gpu%41"
    assert field_key_text("a%2fb") == "a%2fb"  # not what field_key writes (%2F)


def _post(url: str, body: str) -> None:
    request = urllib.request.Request(url, data=body.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 204


def _legacy_store(kind: str, request: pytest.FixtureRequest, cluster: str, rack: str,
                  t_ms: int) -> Store:
    """The store of ``kind`` holding the older release's line, sent as it wrote it."""
    line = legacy_line(cluster, rack, t_ms)
    if kind == "victoriametrics":
        vm: Server = request.getfixturevalue("victoria")
        _post(f"http://{vm.address}/write?precision=ms", line)
        force_flush(vm.address)
        return VictoriaMetricsStore(f"http://{vm.address}")
    influx: Server = request.getfixturevalue("influxdb")
    query = urllib.parse.urlencode({"db": DATABASE, "precision": "ms"})
    _post(f"http://{influx.address}/write?{query}", line)
    return InfluxQLStore(f"http://{influx.address}", bucket=DATABASE, api="v1")


@pytest.mark.parametrize("kind", ["victoriametrics", "influxdb"])
def test_an_older_releases_alert_reads_back_with_its_keys_as_written(
        kind: str, request: pytest.FixtureRequest) -> None:
    cluster, t_ms = cluster_name(), int(time.time() * 1000) - 5000
    store = _legacy_store(kind, request, cluster, "r1", t_ms)
    try:
        (alert,) = [a for a in store.alerts() if a.cluster == cluster]
    finally:
        store.close()
    assert alert.rule == "rack_silent" and alert.state == "firing"
    assert alert.evidence == {"silent_s": 62.0, "silent_nodes": 6.0, **LEGACY}
    if kind == "victoriametrics":  # its message is rendered from the evidence
        assert "last_frame_ts.gpu%41=" in alert.message and "gpu%FF" in alert.message


@pytest.mark.kafka
def test_a_processor_keeps_consuming_beside_an_older_releases_alert(
        kafka: Server, victoria: Server) -> None:
    """The store read at the first frames (the alerts to take over) read the old row:
    it raised, and the processor paused consumption for ever."""
    run = uuid.uuid4().hex[:8]
    topic = f"frames-legacy-{run}"
    ensure_topic(kafka.address, topic, 1)
    cluster, now_ms = cluster_name(), int(time.time() * 1000)
    _post(f"http://{victoria.address}/write?precision=ms",
          legacy_line(cluster, "rack-0", now_ms - 5000))
    force_flush(victoria.address)
    sent = frames(cluster, now_ms - 30_000, 20, nodes=2, gpus=1)
    producer = KafkaProducer(kafka.address, linger_ms=5)
    for f in sent:
        producer.send(topic, encode(f), f.node.encode())
    producer.flush(30)
    producer.close()
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    processor = Processor(store)
    try:
        process_frames(processor, kafka.address, topic, f"g-{run}", len(sent),
                       timeout_s=90)
    finally:
        store.close()
    assert processor.stats.frames == len(sent)
    held = [a for a in processor.alerts.open if a.cluster == cluster]
    assert [a.evidence.get("last_frame_ts.gpu%FF") for a in held] == [1.5]
