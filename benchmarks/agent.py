"""CPU per tick and memory of the node agent (8 fake GPUs + this host), against a naive baseline.

    .venv/bin/python benchmarks/agent.py [--ticks 3000] [--gpus 8]

Agent: ``node_source(..., fake_gpus=8)`` -> one Frame per tick -> ``codec.encode``
-> one Kafka message per node per tick through fleetwatch's ``KafkaProducer``
(lz4, acks=all, flushed every tick as the agent loop does), and the ``/metrics``
exporter's update. Baseline: what a user writes first: one NVML call per metric
(no field batching, no caching of what never changes, no memo of unsupported
calls), psutil for the host, and one JSON Kafka message per metric through a
default kafka-python producer, flushed every tick. Both send to a real
Kafka-protocol broker (Tansu, started here on 127.0.0.1); CPU time is the
whole process's, so the Kafka clients' sender threads count too.

FakeNvml answers from precomputed data, but its calls still cost Python time.
That cost is excluded from both sides: each side's exact call sequence is
recorded in a separate run and replayed against the fake alone, and the replay
time (less the replay loop's own overhead) is subtracted. The two sides run in
alternating rounds and each keeps its quietest (CPU time still picks up cache
and scheduler noise on a shared machine). The last line printed
is JSON: agent_cpu_ms_per_tick, baseline_cpu_ms_per_tick, agent_rss_mb.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pynvml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.servers

from fleetwatch import codec  # noqa: E402
from fleetwatch.collectors.exporter import Exporter  # noqa: E402
from fleetwatch.collectors.nvml import FakeNvml  # noqa: E402
from fleetwatch.collectors.nvml import backend as b  # noqa: E402
from fleetwatch.collectors.nvml.fields import FIELDS, GPM, NVLINK_FIELDS  # noqa: E402
from fleetwatch.config import AgentConfig, Config, NodeConfig  # noqa: E402
from fleetwatch.pipeline.bus.kafka import KafkaProducer  # noqa: E402
from tests.servers import kafka_broker  # noqa: E402

Call = tuple[Callable[..., Any], tuple[Any, ...]]
TOPIC = "bench.frames"


class Recorder:
    """Wraps a FakeNvml and remembers every call (bound method, args) made through it."""

    def __init__(self, fake: FakeNvml) -> None:
        self._fake = fake
        self.calls: list[Call] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fake, name)
        if not callable(attr):
            return attr

        def call(*args: Any) -> Any:
            self.calls.append((attr, args))
            return attr(*args)
        return call


def replay(calls: list[Call]) -> float:
    """CPU seconds to make ``calls`` again, straight to the fake."""
    t0 = time.process_time()
    for fn, args in calls:
        with contextlib.suppress(pynvml.NVMLError):
            fn(*args)
    return time.process_time() - t0


def idle(*_: Any) -> None:
    return None


def config() -> Config:
    # No kernel log: the benchmark measures the agent, not this machine's /dev/kmsg rights.
    return Config(node=NodeConfig("bench", "rack-00", "node-000"), agent=AgentConfig(kernel_log=""))


def make_fake(gpus: int) -> FakeNvml:
    nv = FakeNvml.of(gpus)
    for g in nv.gpus:
        g.pids = [os.getpid()]  # one process per GPU: job attribution runs as on a busy node
    return nv


# -- the agent -----------------------------------------------------------------
class AgentRun:
    """The agent's tick: frame from the node source, encoded, handed to the exporter."""

    def __init__(self, nv: Any, bootstrap: str) -> None:
        from fleetwatch.collectors.node import node_source

        self.source = node_source(config(), nvml=nv)
        self.exporter = Exporter()
        self.producer = KafkaProducer(bootstrap)
        self.ts = time.time()
        [frame] = self.source.frames(self.ts)  # discovery, first samples, first connection:
        self.producer.send(TOPIC, codec.encode(frame), frame.node.encode())  # start-up
        self.producer.flush(30)
        if isinstance(nv, Recorder):
            nv.calls.clear()

    def round(self, ticks: int) -> float:
        """CPU seconds per tick over ``ticks`` ticks."""
        source, exporter, producer, ts = self.source, self.exporter, self.producer, self.ts
        t0 = time.process_time()
        for k in range(ticks):
            [frame] = source.frames(ts + k)
            producer.send(TOPIC, codec.encode(frame), frame.node.encode())
            producer.flush(30)
            exporter.update(frame)
        return (time.process_time() - t0) / ticks


# -- the naive baseline ------------------------------------------------------
def naive_gpu_tick(nv: Any, node: str, ts: float, out: Any) -> None:
    def send(gpu: int, uuid: str, metric: str, value: float) -> None:
        out.send(TOPIC, json.dumps({"ts": ts, "node": node, "gpu": gpu, "uuid": uuid,
                                    "metric": metric, "value": value}).encode())

    def q(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    for i in range(nv.device_count()):
        uuid = q(nv.uuid, i)
        name = q(nv.name, i)
        send(i, uuid, "name", name)
        for metric, fn, args in (
            ("gpu_util_pct", nv.utilization, ()), ("gpu_mem_copy_util_pct", nv.utilization, ()),
            ("gpu_fb_total_bytes", nv.memory, ()), ("gpu_fb_free_bytes", nv.memory, ()),
            ("gpu_fb_used_bytes", nv.memory, ()), ("gpu_power_w", nv.power_usage_mw, ()),
            ("gpu_power_limit_w", nv.power_limit_mw, ()), ("gpu_temp_c", nv.temperature_c, ()),
            ("gpu_slowdown_temp_c", nv.temperature_threshold_c, (b.TEMP_THRESHOLD_SLOWDOWN,)),
            ("gpu_shutdown_temp_c", nv.temperature_threshold_c, (b.TEMP_THRESHOLD_SHUTDOWN,)),
            ("gpu_sm_clock_mhz", nv.clock_mhz, (b.CLOCK_SM,)),
            ("gpu_mem_clock_mhz", nv.clock_mhz, (b.CLOCK_MEM,)),
            ("gpu_throttle_reasons", nv.clocks_event_reasons, ()),
            ("gpu_fan_pct", nv.fan_speed_pct, ()),
            ("gpu_pcie_tx_bytes_per_s", nv.pcie_throughput_kib_s, (b.PCIE_TX,)),
            ("gpu_pcie_rx_bytes_per_s", nv.pcie_throughput_kib_s, (b.PCIE_RX,)),
            ("gpu_enc_util_pct", nv.encoder_util_pct, ()),
            ("gpu_dec_util_pct", nv.decoder_util_pct, ()),
            ("pids", nv.compute_pids, ()),
        ):
            v = q(fn, i, *args)
            if v is not None:
                send(i, uuid, metric, v if not isinstance(v, (tuple, list)) else str(v))
        for fid, scope, metric, scale in FIELDS + NVLINK_FIELDS:
            [(code, value)] = q(nv.field_values, i, [(fid, scope)]) or [(1, 0.0)]
            if code == 0:
                send(i, uuid, metric, value * scale)
        for link in range(18):
            v = q(nv.nvlink_active, i, link)
            if v is not None:
                send(i, uuid, f"nvlink_{link}_active", v)
        for mid, metric in GPM:
            res = q(nv.gpm_metrics, i, [mid])
            if res:
                send(i, uuid, metric, res[0][1] / 100)


def naive_host_tick(node: str, ts: float, out: Any) -> None:
    def send(metric: str, value: float, port: str | None = None) -> None:
        out.send(TOPIC, json.dumps({"ts": ts, "node": node, "port": port, "metric": metric,
                                    "value": value}).encode())

    send("host_cpu_util_pct", psutil.cpu_percent())
    send("host_load1", os.getloadavg()[0])
    vm = psutil.virtual_memory()
    send("host_mem_used_bytes", vm.total - vm.available)
    send("host_mem_total_bytes", vm.total)
    for nic, c in psutil.net_io_counters(pernic=True).items():
        for metric, value in (("rx_bytes", c.bytes_recv), ("tx_bytes", c.bytes_sent),
                              ("rx_packets", c.packets_recv), ("tx_packets", c.packets_sent),
                              ("rx_errors", c.errin), ("tx_errors", c.errout)):
            send(metric, value, nic)


class BaselineRun:
    def __init__(self, nv: Any, bootstrap: str) -> None:
        import kafka

        self.nv = nv
        self.ts = time.time()
        self.producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        self.producer.send(TOPIC, b"hello").get(30)  # the first connection is start-up
        nv.init()
        nv.xid_events_open(range(nv.device_count()))
        if isinstance(nv, Recorder):
            nv.calls.clear()

    def round(self, ticks: int) -> float:
        nv, ts, producer = self.nv, self.ts, self.producer
        t0 = time.process_time()
        for k in range(ticks):
            naive_gpu_tick(nv, "node-000", ts + k, producer)
            naive_host_tick("node-000", ts + k, producer)
            producer.flush(30)
            nv.xid_events_drain(256)
        return (time.process_time() - t0) / ticks


def agent_rss_mb(ticks: int, gpus: int, bootstrap: str) -> float:
    """Resident memory of a process that runs only the agent (the baseline would inflate ours)."""
    out = subprocess.run([sys.executable, __file__, "--rss-only", "--ticks", str(ticks),
                          "--gpus", str(gpus), "--bootstrap", bootstrap],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


@contextlib.contextmanager
def broker() -> Iterator[str]:
    """A Tansu Kafka-protocol broker on a free 127.0.0.1 port, for the length of the run."""
    with tempfile.TemporaryDirectory() as tmp:
        server = kafka_broker(Path(tmp)).start()
        try:
            yield server.address
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ticks", type=int, default=500, help="agent ticks per round")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7, help="repeat; keep the quietest")
    ap.add_argument("--rss-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = ap.parse_args()
    n, g, r = args.ticks, args.gpus, args.rounds
    if args.rss_only:
        AgentRun(make_fake(g), args.bootstrap).round(n)
        print(psutil.Process().memory_info().rss / 2**20)
        return
    with broker() as bootstrap:
        measure(n, g, r, bootstrap)


def measure(n: int, g: int, r: int, bootstrap: str) -> None:

    base_n = max(20, n // 10)  # the baseline is slow; fewer ticks give the same mean
    agent = AgentRun(make_fake(g), bootstrap)
    baseline = BaselineRun(make_fake(g), bootstrap)
    # Each side's exact NVML call sequence, to time the fake alone on it.
    rec_a, rec_b = Recorder(make_fake(g)), Recorder(make_fake(g))
    AgentRun(rec_a, bootstrap).round(n)
    BaselineRun(rec_b, bootstrap).round(base_n)
    loop_a = [(idle, args) for _, args in rec_a.calls]  # the replay loop's own cost
    loop_b = [(idle, args) for _, args in rec_b.calls]
    gc.collect()
    # Alternate everything so that all of it sees the same load on a shared machine, and
    # keep the quietest round of each.
    best = dict.fromkeys(("agent", "base", "fake_a", "loop_a", "fake_b", "loop_b"), float("inf"))
    for _ in range(r):
        for key, seconds in (("agent", agent.round(n)), ("base", baseline.round(base_n)),
                             ("fake_a", replay(rec_a.calls) / n), ("loop_a", replay(loop_a) / n),
                             ("fake_b", replay(rec_b.calls) / base_n),
                             ("loop_b", replay(loop_b) / base_n)):
            best[key] = min(best[key], seconds)
    agent_tick, base_tick = best["agent"], best["base"]
    agent_fake = max(0.0, best["fake_a"] - best["loop_a"])
    base_fake = max(0.0, best["fake_b"] - best["loop_b"])
    agent_rss = agent_rss_mb(n, g, bootstrap)

    agent_ms = (agent_tick - agent_fake) * 1e3
    base_ms = (base_tick - base_fake) * 1e3
    print(f"agent:    {agent_tick * 1e3:.3f} ms/tick measured, fake NVML "
          f"{agent_fake * 1e3:.3f} ms/tick excluded -> {agent_ms:.3f} ms/tick")
    print(f"baseline: {base_tick * 1e3:.3f} ms/tick measured, fake NVML "
          f"{base_fake * 1e3:.3f} ms/tick excluded -> {base_ms:.3f} ms/tick")
    print(f"ratio {base_ms / agent_ms:.1f}x less CPU; agent RSS {agent_rss:.1f} MB "
          f"({g} GPUs, {n} ticks)")
    print(json.dumps({"agent_cpu_ms_per_tick": round(agent_ms, 4),
                      "baseline_cpu_ms_per_tick": round(base_ms, 4),
                      "agent_rss_mb": round(agent_rss, 1)}))


if __name__ == "__main__":
    main()
