"""Frames and server helpers shared by the store tests (and the processors' ones)."""

from __future__ import annotations

import time
import urllib.request
import uuid
from pathlib import Path

from fleetwatch.frame import Frame, GpuReading, HostReading, PortReading
from fleetwatch.pipeline.store.sqlite import SqliteStore

MINUTE_MS = 60_000


def force_flush(address: str) -> None:
    """Make just-written samples searchable now (VictoriaMetrics does it every ~1 s)."""
    with urllib.request.urlopen(f"http://{address}/internal/force_flush", timeout=10) as r:
        r.read()


def minute_ago(minutes: int) -> int:
    """A minute boundary ``minutes`` ago, in ms: old enough for every rollup to be closed."""
    now = int(time.time() * 1000)
    return now - now % MINUTE_MS - minutes * MINUTE_MS


def cluster_name() -> str:
    """A cluster of the test's own, so that tests sharing one server do not see each other."""
    return f"t-{uuid.uuid4().hex[:10]}"


def temp(node: int, gpu: int, tick: int) -> float:
    return 40.0 + node * 10 + gpu + (tick % 17) * 0.5


def frames(cluster: str, t0_ms: int, ticks: int, nodes: int = 2, gpus: int = 2) -> list[Frame]:
    """``nodes`` nodes x ``gpus`` GPUs, one frame per node per second from ``t0_ms``."""
    out = []
    for tick in range(ticks):
        ts = (t0_ms + tick * 1000) / 1000
        for n in range(nodes):
            out.append(Frame(
                cluster, f"rack-{n // 2}", f"node-{n}", ts,
                tuple(GpuReading(g, f"GPU-{n}-{g}", "test", {
                    "gpu_temp_c": temp(n, g, tick),
                    "gpu_power_w": 100.0 + tick + 0.25 * g}) for g in range(gpus)),
                HostReading({"host_cpu_util_pct": float(tick % 100)},
                            (PortReading("eth0", "nic", {"nic_rx_bytes_per_s": 1e6 + tick}),)),
                seq=tick))
    return out


def stored(db: Path) -> int:
    """Samples stored so far, read as the dashboard reads: a read-only handle."""
    store = SqliteStore(db, read_only=True)
    try:
        return store.count()
    finally:
        store.close()


def counters(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        text = r.read().decode()
    wanted = ('vm_rows_inserted_total{type="influx"}', 'vm_rows_invalid_total{type="influx"}',
              'vm_rows_ignored_total{reason="big_timestamp"}',
              'vm_rows_ignored_total{reason="small_timestamp"}', "vm_rows_added_to_storage_total")
    found = {}
    for line in text.splitlines():
        key, _, value = line.rpartition(" ")
        if key in wanted:
            found[key] = float(value)
    assert set(found) == set(wanted), f"counters missing: {set(wanted) - set(found)}"
    return found


def settled_counters(address: str, before: dict[str, float], points: int) -> dict[str, float]:
    """The counters once the server has published this write: they lag it by about a
    second. Waits for the insert counter to reach ``points``, then once more for stragglers."""
    key = 'vm_rows_inserted_total{type="influx"}'
    deadline = time.monotonic() + 15
    while counters(address)[key] - before[key] < points and time.monotonic() < deadline:
        time.sleep(0.25)
    time.sleep(1.5)
    return counters(address)
