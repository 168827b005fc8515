"""The learned detectors' scores on the processor's /metrics.

Read at scrape time from the detectors' own state: each GPU's thermal health
score (how far it runs hotter than its load and air explain, in fleet
spreads), each troubled node's lemon score, worst first, the model file in use, and
how many GPUs each learned rule judges (none: a model judging another kind of GPU).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from fleetwatch.models import Detector
from fleetwatch.models.artifact import named_ts


class ModelCollector(Collector):
    def __init__(self, detectors: Sequence[Detector],
                 clock: Callable[[], float] = time.time) -> None:
        self._learned = [d for d in detectors if getattr(d, "name", "") == "learned"]
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        health = GaugeMetricFamily(
            "fleetwatch_gpu_thermal_health_score",
            "How far the GPU runs hotter than its load and air explain, against its own "
            "history, in fleet spreads (0 normal; the learned thermal health)",
            labels=["cluster", "node", "gpu"])
        lemon = GaugeMetricFamily(
            "fleetwatch_node_lemon_score",
            "A node's decayed trouble score (hardware XID incidents, lost GPUs, thermal slowdowns)",
            labels=["cluster", "node"])
        loaded = GaugeMetricFamily("fleetwatch_model_loaded",
                                   "1 when a trained model file is in use", labels=["file"])
        judged = GaugeMetricFamily(
            "fleetwatch_model_gpus_judged",
            "GPUs a learned rule's model judges, of those in this processor's frames of the "
            "last 5 minutes; reason says why where it judges none of them (no_model: the "
            "file has no model for the rule; other_gpu_kind: their power limits are not "
            "the ones it was trained on: a power cap, or another fleet)",
            labels=["rule", "reason"])
        skipped = GaugeMetricFamily(
            "fleetwatch_model_files_skipped",
            "Model files in models.dir newer than the one in use (any, with none in use) "
            "that do not load (damaged, cut short, refused): each said once in the log; the "
            "older model goes on judging")
        trained = GaugeMetricFamily(
            "fleetwatch_model_file_timestamp_seconds",
            "The time in the name of the model file in use (when `fleetwatch train` wrote "
            "it), Unix seconds; absent with none in use")
        given = GaugeMetricFamily(
            "fleetwatch_model_gpus_given",
            "GPUs in this processor's frames of the last 5 minutes, each given to the "
            "learned rules", labels=["rule"])
        for d in self._learned:
            for rule, (n, of, why) in d.judged_now().items():  # type: ignore[attr-defined]
                judged.add_metric([rule, why], n)
                given.add_metric([rule], of)
            # No model (its file deleted): no score, rather than the last ones, frozen.
            scores = d.thermal.scores if d.thermal.model is not None else {}  # type: ignore[attr-defined]
            for key, score in list(scores.items()):
                cluster, node, gpu = key.rsplit("/", 2)
                health.add_metric([cluster, node, gpu.removeprefix("gpu")], score)
            for cluster, node, score in d.lemon.ranking(self._clock(), top=1000):  # type: ignore[attr-defined]
                lemon.add_metric([cluster, node], score)
            path = d.loaded  # type: ignore[attr-defined]
            skipped.add_metric([], float(len(d.skipped)))  # type: ignore[attr-defined]
            stamp = named_ts(path) if path is not None else None
            if stamp is not None and d.thermal.model is not None:  # type: ignore[attr-defined]
                trained.add_metric([], stamp)
            loaded.add_metric([path.name if path is not None else ""],
                              1.0 if d.thermal.model is not None else 0.0)  # type: ignore[attr-defined]
        yield health
        yield lemon
        yield loaded
        yield judged
        yield given
        yield skipped
        yield trained
