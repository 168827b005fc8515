"""The agent's own health on its ``/metrics`` (beside the GPUs' series of ``exporter``):
frames sent, spooled and dropped, NVML errors, input passed over, GPU state changes,
tick times, and at each scrape the spool's backlog, the broker's reachability and the
send queue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.metrics_core import Metric

from fleetwatch import __version__, commit

TICK_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class AgentHealth:
    """The agent loop's own counters; the loop calls these, ``/metrics`` shows them."""

    def __init__(self) -> None:
        self._sent = Counter("fleetwatch_agent_frames_sent", "Frames published to the bus",
                             registry=None)
        self._spooled = Counter("fleetwatch_agent_frames_spooled",
                                "Frames written to the local spool while the bus was away",
                                registry=None)
        self._dropped = Counter("fleetwatch_agent_frames_dropped",
                                "Frames lost (spool full or unwritable, send queue full, "
                                "refused by the broker)", registry=None)
        self._nvml = Counter("fleetwatch_agent_nvml_errors", "NVML calls that failed, by error",
                             ["kind"], registry=None)
        self._input_dropped = Counter(
            "fleetwatch_agent_input_dropped",
            "Input read and not used, by reason (an XID on a PCI address that is no GPU of "
            "this node, a malformed XID line, an unreadable kernel log)", ["reason"],
            registry=None)
        self._gpu_state = Counter("fleetwatch_agent_gpu_state_changes",
                                  "GPUs that became lost or ok again (opened, re-probed, XID 79)",
                                  ["state"], registry=None)
        self._tick = Histogram("fleetwatch_agent_tick_seconds",
                               "Wall time of one agent tick (read, encode, publish)",
                               buckets=TICK_BUCKETS, registry=None)
        self._spool: Any = None
        self._sender: Any = None
        self.agent: Any = None  # the loop, for its tick counters

    def watch(self, spool: Any, sender: Any) -> None:
        """Report the spool's backlog and reachability and the send queue at each scrape."""
        self._spool, self._sender = spool, sender

    def spool_event(self, name: str, n: int) -> None:
        """``SpoolingProducer``'s ``on_event``: acknowledged frames, spooled, dropped."""
        if name in ("sent", "replayed"):
            self.sent(n)
        elif name == "spooled":
            self.spooled(n)
        elif name == "dropped":
            self.dropped(n)

    def sent(self, n: int = 1) -> None:
        self._sent.inc(n)

    def spooled(self, n: int = 1) -> None:
        self._spooled.inc(n)

    def dropped(self, n: int = 1) -> None:
        self._dropped.inc(n)

    def gpu_state(self, state: str) -> None:
        self._gpu_state.labels(state=state).inc()

    def input_dropped(self, reason: str) -> None:
        self._input_dropped.labels(reason=reason).inc()

    def nvml_error(self, kind: str) -> None:
        self._nvml.labels(kind=kind).inc()

    def tick(self, seconds: float) -> None:
        self._tick.observe(seconds)

    def collect(self) -> Iterator[Metric]:
        info = Metric("fleetwatch_agent_info", "Always 1: the release this agent runs "
                      "(version, and the git commit of a checkout, else \"\")", "gauge")
        info.add_sample("fleetwatch_agent_info", {"version": __version__, "commit": commit()},
                        1.0)
        yield info
        for m in (self._sent, self._spooled, self._dropped, self._nvml, self._input_dropped,
                  self._gpu_state, self._tick):
            yield from m.collect()
        gauges: list[tuple[str, str, float]] = []
        if self._spool is not None:
            gauges += [
                ("fleetwatch_agent_spool_frames", "Frames waiting in the on-disk spool",
                 float(self._spool.backlog)),
                ("fleetwatch_agent_spool_bytes", "Bytes the spooled frames take on disk",
                 float(self._spool.backlog_bytes)),
                ("fleetwatch_agent_broker_up",
                 "1 while the broker acknowledges frames, 0 from a failed send until it does",
                 1.0 if self._spool.reachable and getattr(self._sender, "reachable", True)
                 else 0.0),
                ("fleetwatch_agent_spool_write_errors",
                 "Writes to the spool that failed (disk full, read-only, a file size limit): "
                 "the frames of each are lost, and frames pile up in the send queue",
                 float(getattr(self._spool, "write_errors", 0)))]
        if self._sender is not None:
            gauges.append(("fleetwatch_agent_send_queue_frames",
                           "Frames sampled and waiting for the sender thread",
                           float(self._sender.queued)))
        if self.agent is not None:
            gauges.append(("fleetwatch_agent_ticks_missed",
                           "Sampling ticks skipped because a tick took longer than the interval",
                           float(self.agent.missed_ticks)))
        for name, doc, value in gauges:
            counter = name.endswith(("_missed", "_errors"))
            fam = Metric(name, doc, "counter" if counter else "gauge")
            fam.add_sample(name + ("_total" if counter else ""), {}, value)
            yield fam
