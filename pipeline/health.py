"""The processor's own health as Prometheus metrics.

A custom collector reads the processor's counters (events stored by kind
among them), the partitions it owns, the consumer's lag and the alert
notifier's counters per sink at scrape time, so nothing on the hot path
touches prometheus-client.

Two more for the group as a whole: ``fleetwatch_processor_info`` (always 1) labels
the member with its group, store and hashes of its detectors' and alert sinks'
settings, so that a rule can see members of one group that would split the data
between stores, judge it by different rules or notify it elsewhere;
``fleetwatch_processor_group_members_differing{part}`` says how many other members
this one found differing at the last rebalance (``pipeline.group_check``);
``fleetwatch_processor_topic_partitions_missing`` says how many
partitions a topic lacks that this member found short and could not grow.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fleetwatch.pipeline.bus import Consumer
from fleetwatch.pipeline.bus.topics import topic_partitions
from fleetwatch.pipeline.clock_skew import MAX_NODES
from fleetwatch.pipeline.group_check import GroupCheck
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier

# Per-sink counters of the notifier: (SinkCounts field, metric suffix, help).
_SINK_COUNTERS = (
    ("sent", "sent", "Batches of alert changes delivered to the sink"),
    ("failed", "failed", "Batches of alert changes not delivered to the sink after the last "
                         "attempt, or refused by it; each logged"),
    ("dropped", "dropped", "Batches of alert changes never tried because the sinks were "
                           "too far behind"),
    ("retries", "retries", "Attempts to deliver to the sink that failed and were retried"),
)


class ProcessorCollector(Collector):
    def __init__(self, processor: Processor, consumer: Consumer,
                 notifier: Notifier | None = None, info: dict[str, str] | None = None,
                 check: GroupCheck | None = None) -> None:
        """``info``: the labels of ``fleetwatch_processor_info`` (``wiring.processor_info``);
        ``check``: the comparison of this member's settings with its group's."""
        self.check = check
        self.processor = processor
        self.consumer = consumer
        self.notifier = notifier
        self.info = dict(info or {})

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.processor.stats
        yield CounterMetricFamily("fleetwatch_processor_frames", "Frames decoded and stored",
                                  value=s.frames)
        yield CounterMetricFamily("fleetwatch_processor_samples",
                                  "Samples (one metric of one device at one instant) stored",
                                  value=s.points)
        dead = CounterMetricFamily("fleetwatch_processor_dead_letters",
                                   "Messages dead-lettered, by the field at fault "
                                   "(store: refused by the store; clock: stamped further "
                                   "ahead of the processor's clock than "
                                   "processor.max_clock_ahead_s)",
                                   labels=["field"])
        for field, n in sorted(s.by_reason.items()):
            dead.add_metric([field], n)
        yield dead
        dropped = CounterMetricFamily("fleetwatch_processor_readings_dropped",
                                      "Readings left out of frames otherwise stored: not "
                                      "finite, or outside their metric's possible range "
                                      "(a failing sensor or counter), by metric",
                                      labels=["metric"])
        for metric, n in sorted(s.readings_dropped.items()):
            dropped.add_metric([metric], n)
        yield dropped
        unknown = CounterMetricFamily("fleetwatch_processor_unknown_metrics",
                                      "Readings left out of frames otherwise stored because "
                                      "this processor does not know their metric id (an "
                                      "agent of a later release: upgrade the processors), by "
                                      "scope and id (at most 32 ids, the rest id=\"other\")",
                                      labels=["scope", "id"])
        for name, n in sorted(s.unknown_metrics.items()):
            scope, _, key = name.rpartition(":")
            unknown.add_metric([scope, key], n)
        yield unknown
        yield from _clock_metrics(self.processor)
        yield CounterMetricFamily("fleetwatch_processor_dead_letters_lost",
                                  "Dead letters not delivered to the dead-letter topic "
                                  "(unreachable for a minute); each logged with its offset",
                                  value=s.dead_letters_lost)
        yield CounterMetricFamily("fleetwatch_processor_store_rejected",
                                  "Frames the store refused for good, dead-lettered",
                                  value=s.store_rejected)
        refused = CounterMetricFamily("fleetwatch_processor_records_refused",
                                      "Events, alert changes and energy ledger rows the "
                                      "store refused for good (a series limit, another "
                                      "writer's field type): counted, logged, not retried",
                                      labels=["record"])
        for record, n in sorted(s.records_refused.items()):
            refused.add_metric([record], n)
        yield refused
        yield CounterMetricFamily("fleetwatch_processor_errors",
                                  "Unexpected errors (bugs), each logged with its traceback",
                                  value=s.errors)
        yield CounterMetricFamily("fleetwatch_processor_store_errors",
                                  "Store writes that failed and were retried", value=s.store_errors)
        yield CounterMetricFamily("fleetwatch_processor_alert_changes",
                                  "Alert state changes written: an alert opened (pending, "
                                  "or firing at once), fired or resolved",
                                  value=s.alerts_changed)
        yield CounterMetricFamily("fleetwatch_processor_alert_writes",
                                  "Alert rows written: state changes, and refreshes of an "
                                  "open alert's value (at most one a minute each)",
                                  value=s.alerts_written)
        yield GaugeMetricFamily("fleetwatch_processor_batch_seconds",
                                "Time to decode, store and evaluate the last batch",
                                value=s.last_batch_s)
        yield GaugeMetricFamily("fleetwatch_processor_alert_delay_seconds",
                                "Seconds from the newest frame of the last batch whose alert "
                                "changes were sent to their sending (a batch held while the "
                                "store was away, or a backlog, shows here)",
                                value=s.alert_delay_s)
        yield GaugeMetricFamily("fleetwatch_processor_paused",
                                "1 while the store is away: frames wait unstored (those "
                                "in hand still judged, alert changes sent); consuming "
                                "stops beyond 20,000 messages held",
                                value=1.0 if s.paused else 0.0)
        events = CounterMetricFamily("fleetwatch_processor_events",
                                     "Events (XIDs, GPU state, throttle and job changes, node "
                                     "state) stored, by kind", labels=["kind"])
        for kind, n in sorted(s.events.items()):
            events.add_metric([kind], n)
        yield events
        steps = CounterMetricFamily("fleetwatch_processor_clock_steps",
                                    "Clock steps of nodes the energy ledger met: back, "
                                    "forward, error (a jump over 7 days), overlap (samples "
                                    "stamped again over stored ones); see README",
                                    labels=["kind"])
        energy = self.processor.energy
        for kind, n in sorted((energy.clock.counts if energy is not None else {}).items()):
            steps.add_metric([kind], n)
        yield steps
        yield GaugeMetricFamily("fleetwatch_processor_event_nodes",
                                "Nodes whose last state the event tracker holds (the nodes "
                                "of this member's partitions that sent a frame)",
                                value=len(self.processor.events.nodes()))
        if self.notifier is not None:
            yield from _sink_metrics(self.notifier)
        # Only read here: the polling thread changes it (in the consumer's listener).
        # None: no assignment yet (or no listener), so none owned as far as we know.
        owned = self.processor.ownership.owned
        yield GaugeMetricFamily("fleetwatch_processor_partitions_owned",
                                "Partitions of the frames topic this member owns; 0: it "
                                "consumes nothing (a spare member, or stuck joining its group)",
                                value=len(owned or ()))
        # A member that owns nothing has nothing waiting: 0, whatever the consumer last
        # measured (a join that hangs keeps an old figure), so that the series stays.
        if owned is not None and not owned:
            lag: int | None = 0
        else:
            lag = self.consumer.lag()
            if lag is None and owned is None:
                lag = 0  # nothing assigned yet
        if lag is not None:
            yield GaugeMetricFamily("fleetwatch_processor_consumer_lag",
                                    "Messages in this member's partitions not yet consumed "
                                    "(the broker's high watermark less the position); absent "
                                    "while unknown (a poll stuck for over 60 s)",
                                    value=lag)
        # Only a Kafka consumer meets batches it cannot decode (pipeline.bus.kafka_batches).
        passed = getattr(self.consumer, "passed_over", None)
        if isinstance(passed, int):
            yield CounterMetricFamily("fleetwatch_processor_undecodable_messages",
                                      "Offsets passed over in record batches the Kafka "
                                      "client could not decode (a codec missing, a corrupt "
                                      "batch): neither stored nor dead-lettered; the log "
                                      "names topic, partition and offsets", value=passed)
        reset = getattr(self.consumer, "offsets_reset", None)
        if isinstance(reset, int):
            yield CounterMetricFamily("fleetwatch_processor_offsets_reset",
                                      "Partitions read again from their log's start because "
                                      "the broker's log ended below this member's position "
                                      "or the topic's id changed (the broker came back "
                                      "empty, or the topic was re-created); the log names "
                                      "them", value=reset)
        if self.info:
            yield info_family(self.info)
        if self.check is not None:
            differ = GaugeMetricFamily(
                "fleetwatch_processor_group_members_differing",
                "Other members of this processor's consumer group that run with different "
                "settings of a part that must agree (detectors, alert_sinks, store), as of "
                "the last rebalance; each difference is logged as a WARNING naming them",
                labels=["part"])
            for part, count in self.check.differing.items():
                differ.add_metric([part], count)
            yield differ
            yield GaugeMetricFamily(
                "fleetwatch_processor_group_members_unchecked",
                "Other members of this processor's consumer group, of an older release, "
                "whose settings could not be compared at the last rebalance (so a 0 in "
                "group_members_differing does not cover them)", value=self.check.older)
        yield from topic_families()


def _clock_metrics(processor: Processor) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """Agents' clocks against the processor's (``pipeline.clock_skew``): frames off, and
    the nodes off now with their offsets, at most ``MAX_NODES`` (the furthest off)."""
    s = processor.stats
    skewed = CounterMetricFamily("fleetwatch_processor_clock_skewed_frames",
                                 "Frames stamped more than 10 s ahead of the processor's "
                                 "clock (dead-lettered or not), and batches in which a node's "
                                 "frames were steadily far behind the others'",
                                 labels=["direction"])
    skewed.add_metric(["ahead"], s.clock_ahead)
    skewed.add_metric(["behind"], s.clock_behind)
    yield skewed
    offsets = GaugeMetricFamily("fleetwatch_processor_node_clock_offset_seconds",
                                "Nodes whose clocks are off now: seconds ahead of the "
                                "processor's clock (positive) or behind the other nodes' "
                                f"(negative); at most {MAX_NODES}, the furthest off",
                                labels=["cluster", "node"])
    for (cluster, node), offset in sorted(dict(processor.clocks.offsets).items()):
        offsets.add_metric([cluster, node], offset)
    yield offsets


def topic_families() -> Iterator[GaugeMetricFamily]:
    """Per topic this process checked, the partitions it lacks of ``bus.partitions`` (0:
    as configured), from ``topics.topic_partitions``."""
    family = GaugeMetricFamily("fleetwatch_processor_topic_partitions_missing",
                               "Partitions a topic lacks of bus.partitions: it was created "
                               "with fewer and this broker cannot add them",
                               labels=["topic"])
    for topic, (has, wanted) in sorted(topic_partitions.items()):
        family.add_metric([topic], max(wanted - has, 0))
    yield family


def _sink_metrics(notifier: Notifier) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    counts = dict(notifier.stats.sinks)  # a copy: the delivery thread may add a sink's entry
    for attr, suffix, text in _SINK_COUNTERS:
        family = CounterMetricFamily(f"fleetwatch_alert_sink_{suffix}", text, labels=["sink"])
        for name, c in sorted(counts.items()):
            family.add_metric([name], getattr(c, attr))
        yield family
    # An outage as it goes on: the counters above move only when held changes are given
    # up (alerts.sink_retry_s, 10 min), too late to learn that pages reach nobody.
    outages = notifier.outages()
    gauges = (("up", "1 while the sink takes deliveries; 0 from a delivery or re-send that "
                     "failed every attempt until one goes through"),
              ("held_changes", "Alert changes held for the sink while it is down (the latest "
                               "per alert), retried until alerts.sink_retry_s"),
              ("oldest_held_seconds", "How long the oldest alert change held for the sink "
                                      "has waited (0: none held)"))
    for i, (suffix, text) in enumerate(gauges):
        gauge = GaugeMetricFamily(f"fleetwatch_alert_sink_{suffix}", text, labels=["sink"])
        for name, (down, held, oldest) in sorted(outages.items()):
            gauge.add_metric([name], (0.0 if down else 1.0, float(held), oldest)[i])
        yield gauge
    # Mirroring silences and acknowledgements into Alertmanager (its sink's own count).
    mirrors = [(s.name, s.silence_errors) for s in notifier.sinks
               if isinstance(getattr(s, "silence_errors", None), int)]
    if mirrors:
        family = CounterMetricFamily(
            "fleetwatch_alert_sink_silence_errors",
            "Passes that could not mirror fleetwatch's silences and acknowledgements into "
            "Alertmanager (unreachable, or a silence refused); tried again at the next pass",
            labels=["sink"])
        for name, n in mirrors:
            family.add_metric([name], n)
        yield family


def info_family(info: dict[str, str]) -> GaugeMetricFamily:
    """``fleetwatch_processor_info``: the same family whether the processor is waiting for
    its broker or consuming."""
    family = GaugeMetricFamily("fleetwatch_processor_info",
                               "Always 1: this member's group, store and detectors "
                               "settings (hash), which members of one group must "
                               "agree on, and its release (version, git commit)",
                               labels=list(info))
    family.add_metric(list(info.values()), 1)
    return family
