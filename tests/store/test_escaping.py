"""Names of every kind reach the server's own parser and come back exactly as sent.

VictoriaMetrics skips a line it cannot parse with a 204 (counted only in
``vm_rows_invalid_total``), and a badly escaped name quietly becomes other
labels: so the encoder is fuzzed against the real server, and the server's
counters, not what was sent, say what was stored.
"""

from __future__ import annotations

import json
import random
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading, PortReading
from fleetwatch.pipeline.store.base import StoreRejected
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import Server, victoria_metrics
from tests.store.conftest import DATABASE
from tests.store.helpers import counters, force_flush, minute_ago, settled_counters

# What makes line protocol hard, and a little of everything else printable.
_HARD = ['\\', '\\', ',', '=', ' ', '"', "'", '#', '\\,', '\\=', '\\ ', 'é', '温', '🔥', '\t']
_EASY = "abcXYZ019-_./:"


def name(rng: random.Random) -> str:
    while True:
        parts = [rng.choice(_HARD) if rng.random() < 0.45 else rng.choice(_EASY)
                 for _ in range(rng.randrange(1, 9))]
        if rng.random() < 0.3:
            parts.append("\\")  # a trailing backslash: it used to swallow the next tag
        text = "".join(parts)
        if text.isprintable():  # what the codec admits
            return text


def fuzz_frames(seed: int, n: int, t0_ms: int) -> list[Frame]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        temp = float("nan") if rng.random() < 0.2 else 40.0 + i  # the careful path too
        ports = tuple(PortReading(name(rng), "nic", {"nic_rx_bytes_per_s": float(i)})
                      for _ in range(rng.randrange(0, 3)))
        out.append(Frame(name(rng), name(rng), name(rng), (t0_ms + i * 1000) / 1000,
                         (GpuReading(0, "u", "H100", {"gpu_temp_c": temp,
                                                      "gpu_power_w": 300.0 + i}),),
                         HostReading({"host_cpu_util_pct": 1.0}, ports)))
    return out


def expected(frames: list[Frame]) -> set[tuple[str, tuple[tuple[str, str], ...], int]]:
    """(metric, labels, ms) of every finite value, as VictoriaMetrics should name it."""
    out = set()
    for f in frames:
        ms = round(f.ts * 1000)
        devices = [("gpu0", f.gpus[0].metrics), ("host", f.host.metrics)]
        devices += [(p.name, p.metrics) for p in f.host.ports]
        for device, metrics in devices:
            labels = tuple(sorted({"cluster": f.cluster, "rack": f.rack, "node": f.node,
                                   "device": device}.items()))
            out |= {(m, labels, ms) for m, v in metrics.items() if v == v}
    return out


@pytest.fixture
def own_victoria(tmp_path: Path) -> Iterator[Server]:
    """A server of the test's own: its counters and its series are this test's alone."""
    server = victoria_metrics(tmp_path).start()
    yield server
    server.stop()


def test_fuzzed_names_come_back_exactly_and_every_row_is_counted(own_victoria: Server) -> None:
    address = own_victoria.address
    store = VictoriaMetricsStore(f"http://{address}")
    frames = fuzz_frames(seed=9, n=400, t0_ms=minute_ago(30))
    want = expected(frames)
    before = counters(address)
    points = store.write(frames)
    force_flush(address)
    after = settled_counters(address, before, points)
    assert points == len(want)

    query = urllib.parse.urlencode({"match[]": '{__name__=~".+"}'})
    with urllib.request.urlopen(f"http://{address}/api/v1/export?{query}", timeout=30) as r:
        series = [json.loads(line) for line in r.read().splitlines()]
    got = set()
    for s in series:
        labels = dict(s["metric"])
        metric = labels.pop("__name__")
        got |= {(metric, tuple(sorted(labels.items())), ts) for ts in s["timestamps"]}
    assert {m for m, _, _ in got} <= {"gpu_temp_c", "gpu_power_w", "host_cpu_util_pct",
                                      "nic_rx_bytes_per_s"}  # no label became a name
    assert got == want  # every label exactly as sent, no label more or less
    moved = {k: after[k] - before[k] for k in after}
    assert moved['vm_rows_invalid_total{type="influx"}'] == 0  # no line skipped
    assert moved['vm_rows_inserted_total{type="influx"}'] == points
    assert moved["vm_rows_added_to_storage_total"] == points
    assert moved['vm_rows_ignored_total{reason="big_timestamp"}'] == 0
    assert moved['vm_rows_ignored_total{reason="small_timestamp"}'] == 0
    store.close()


def _tag_values(address: str, key: str) -> set[str]:
    params = urllib.parse.urlencode({"db": DATABASE,
                                     "q": f'SHOW TAG VALUES FROM "gpu" WITH KEY = "{key}"'})
    with urllib.request.urlopen(f"http://{address}/query?{params}", timeout=10) as r:
        body = json.loads(r.read())
    return {v for s in body["results"][0].get("series", []) for _, v in s["values"]}


def test_influxdb_1x_gets_its_own_escaping_and_refuses_what_it_cannot_carry(
        influxdb: Server) -> None:
    """InfluxDB 1.x keeps a backslash as it is (doubling it would double it in the store) and
    cannot parse a tag value ending in one: such frames are refused by position, before
    anything is sent, and the others stored with every name exact."""
    store = InfluxQLStore(f"http://{influxdb.address}", bucket=DATABASE, api="v1")
    tag = f"t{time.time_ns()}"
    good = [f"{tag} a\\b", f"{tag},x=1 y", f"{tag} 温\\\\z", f'{tag}"q"#']
    bad = [f"{tag} trailing\\", f"{tag} a\\,b"]
    t0 = minute_ago(10)
    frames = [Frame("c", "r", node, (t0 + i * 1000) / 1000,
                    (GpuReading(0, "u", "m", {"gpu_temp_c": 50.0}),))
              for i, node in enumerate([good[0], bad[0], good[1], bad[1], good[2], good[3]])]
    with pytest.raises(StoreRejected, match="backslash") as refused:
        store.write(frames)
    assert refused.value.indices == (1, 3)
    assert not {v for v in _tag_values(influxdb.address, "node") if v.startswith(tag)}
    kept = [f for i, f in enumerate(frames) if i not in (1, 3)]
    assert store.write(kept) == 4
    got = {v for v in _tag_values(influxdb.address, "node") if re.match(re.escape(tag), v)}
    assert got == set(good)
    store.close()


def test_fuzzed_names_through_influxdb_1x(tmp_path: Path) -> None:
    """The same fuzz through InfluxDB 1.6's parser: every frame it can carry comes back with
    its names exact, the others are refused by position before anything is sent."""
    from fleetwatch.pipeline.store.lineproto import v1_unwritable
    from tests.store.conftest import influxdb_v1

    server = influxdb_v1(tmp_path).start()
    try:
        query = urllib.parse.urlencode({"q": f'CREATE DATABASE "{DATABASE}"'})
        urllib.request.urlopen(urllib.request.Request(
            f"http://{server.address}/query?{query}", method="POST"), timeout=10).read()
        store = InfluxQLStore(f"http://{server.address}", bucket=DATABASE, api="v1")
        frames = fuzz_frames(seed=11, n=150, t0_ms=minute_ago(30))
        unwritable = [i for i, f in enumerate(frames) if any(v1_unwritable(x) for x in (
            f.cluster, f.rack, f.node, *(p.name for p in f.host.ports)))]
        assert 0 < len(unwritable) < len(frames)
        with pytest.raises(StoreRejected) as refused:
            store.write(frames)
        assert refused.value.indices == tuple(unwritable)
        kept = [f for i, f in enumerate(frames) if i not in unwritable]
        points = store.write(kept)
        want = expected(kept)
        assert points == len(want)
        got = set()
        for measurement in ("gpu", "host", "nic"):
            params = urllib.parse.urlencode({"db": DATABASE, "epoch": "ms",
                                             "q": f'SELECT * FROM "{measurement}" GROUP BY *'})
            with urllib.request.urlopen(f"http://{server.address}/query?{params}",
                                        timeout=30) as r:
                body = json.loads(r.read())
            for s in body["results"][0].get("series", []):
                labels = tuple(sorted(s["tags"].items()))
                for row in s["values"]:
                    for column, value in zip(s["columns"], row, strict=True):
                        if column != "time" and value is not None:
                            got.add((f"{measurement}_{column}", labels, row[0]))
        assert got == want  # what the server holds, name by name
        store.close()
    finally:
        server.stop()
