"""The one place that turns configuration into implementations.

Which bus (in-process or Kafka), which store (SQLite or a line-protocol
server) and which detectors: chosen here from ``Config`` and nowhere else.
Backends with optional dependencies are imported only when chosen.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence

from fleetwatch import __version__, commit
from fleetwatch.config import (
    BusConfig,
    Config,
    DetectorsConfig,
    EnergyConfig,
    ModelsConfig,
    NodeConfig,
    StoreConfig,
    _masked_url,
)
from fleetwatch.models import Detector
from fleetwatch.models.registry import build
from fleetwatch.pipeline.bus import Consumer, Producer
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.group_check import GroupCheck, MemberSettings
from fleetwatch.pipeline.sinks import AlertSink, Notifier
from fleetwatch.pipeline.store.base import Notification, Store

log = logging.getLogger(__name__)


def open_store(config: StoreConfig, read_only: bool = False) -> Store:
    if config.kind == "sqlite":
        from fleetwatch.pipeline.store.sqlite import SqliteStore

        return SqliteStore(config.path, config.raw_retention_h, config.rollup_retention_d,
                           read_only=read_only)
    from fleetwatch.pipeline.store.lineproto import open_lineproto_store

    return open_lineproto_store(config)


def store_name(config: StoreConfig) -> str:
    """The store as messages name it: the file, or the server's kind and URL (a password
    in it masked, as ``fleetwatch config`` shows it)."""
    return (config.path if config.kind == "sqlite" else
            f"{config.kind} at {_masked_url(config.url, False)}")


def store_target(config: StoreConfig) -> str:
    """Where the store is: the SQLite file (absolute), or the server's URL with a password
    masked and, for InfluxDB, what selects the data within that server (the database on
    1.x; org and bucket on 2.x, and with ``influx_api = "auto"``, which may be either):
    members writing to other databases of one server must differ here.
    VictoriaMetrics has one data space per URL (a cluster's tenant is in the URL's path)."""
    if config.kind == "sqlite":
        return os.path.abspath(config.path)
    url = _masked_url(config.url.rstrip("/"), False)
    if config.kind == "influx":
        return (f"{url} database={config.bucket}" if config.influx_api == "v1" else
                f"{url} org={config.org} bucket={config.bucket}")
    return url


def alerts_instance(config: Config) -> str:
    """This deployment's name in Alertmanager (``alerts.instance``), else one derived from
    its store: every processor of one store gets the same, on every start, while the store
    stays where it is (``store_target``: a password in a URL masked, so changing it keeps
    the name); another store, another name."""
    if config.alerts.instance:
        return config.alerts.instance
    digest = hashlib.sha256(store_target(config.store).encode()).hexdigest()[:10]
    return f"{config.store.kind}-{digest}"


def _hash(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()
                          ).hexdigest()[:12]


# ``node.cluster`` left unset: the agents' cluster then, never a deployment's own claim.
_DEFAULT_CLUSTER = next(f.default for f in dataclasses.fields(NodeConfig) if f.name == "cluster")


def deployment_clusters(config: Config) -> list[str]:
    """The clusters the configuration names as this deployment's: ``alerts.clusters``, and
    its own ``node.cluster`` (the agents' and processors' shared file) where it is set, not
    left at its default: a processor's file may leave that agent setting out, and
    "default" may then be another deployment's that only shares the store. With several
    processors, a rack of one of them is judged by its judge even where no frame of its
    cluster came to that member (``pipeline.rack_judges``)."""
    own = [] if config.node.cluster == _DEFAULT_CLUSTER else [config.node.cluster]
    return sorted({*own, *config.alerts.clusters})


def settings_parts(config: Config) -> dict[str, str]:
    """Short hashes of what members of one consumer group must share, one per part
    (``pipeline.group_check.PARTS``): equal wherever the settings are, and never the
    settings themselves (a webhook URL may hold a token). ``detectors``: the
    ``[detectors]`` section (``enabled`` is a set: hashed sorted). ``alert_sinks``: where
    alerts go and what decides when they fire and resolve there (the sinks, the alert
    topic, keep-firing, the Alertmanager instance and clusters, the remedy label): a
    member without the webhook would take over pages it can neither resolve nor send.
    The instance is hashed as set (``alerts.instance``), not as derived from the store
    when unset (``alerts_instance``): a store difference is the ``store`` part's alone,
    not also blamed on the alert settings. ``store``: its kind and where it is."""
    section = dataclasses.asdict(config.detectors)
    section["enabled"] = sorted(set(section["enabled"]))
    a = config.alerts
    sinks = {"webhook_url": a.webhook_url, "alertmanager_url": a.alertmanager_url.rstrip("/"),
             "alert_topic": config.bus.alert_topic if config.bus.kind == "kafka" else "",
             "keep_firing_s": a.keep_firing_s, "instance": a.instance,
             "clusters": sorted(set(a.clusters)), "xid_remedy_label": a.xid_remedy_label}
    return {"detectors": _hash(section), "alert_sinks": _hash(sinks),
            "store": _hash([config.store.kind, store_target(config.store)])}


def member_settings(config: Config) -> MemberSettings:
    """This member's fingerprint for its group (``pipeline.group_check``), named by host
    and pid."""
    return MemberSettings(f"{socket.gethostname()} pid {os.getpid()}", settings_parts(config))


def processor_info(config: Config) -> dict[str, str]:
    """The labels of ``fleetwatch_processor_info``: the release it runs (``version``, and
    ``commit`` from a git checkout, else ""), and what members of one consumer group must
    share, or the group splits the fleet's data between stores (each member writes the
    nodes of its partitions), judges nodes by different rules, or notifies them
    elsewhere or not at all: ``detectors`` and ``alert_sinks``, short hashes of those
    settings (``settings_parts``)."""
    parts = settings_parts(config)
    return {"group": config.bus.group, "store_kind": config.store.kind,
            "store_target": store_target(config.store),
            "detectors": parts["detectors"], "alert_sinks": parts["alert_sinks"],
            "version": __version__, "commit": commit()}


def open_producer(config: BusConfig, memory: MemoryBus | None = None, *,
                  prepare: Callable[[], object] | None = None,
                  auto_create_topics: bool = True) -> Producer:
    """``prepare``, on Kafka: called before each new client connects (the agent ensures its
    topics there, ``ensure_topics``); ``auto_create_topics`` False: a missing topic fails the
    send instead of being created by the broker with its default partition count."""
    if config.kind == "memory":
        if memory is None:
            raise ValueError("the in-process bus only works inside `fleetwatch up`; "
                             "set bus.kind = \"kafka\" for separate agents and processors")
        return memory.producer()
    from fleetwatch.pipeline.bus.kafka import KafkaProducer
    from fleetwatch.pipeline.bus.kafka_access import kafka_security

    return KafkaProducer(config.bootstrap, security=kafka_security(config), prepare=prepare,
                         auto_create_topics=auto_create_topics, options=config.kafka_producer)


def ensure_topics(config: BusConfig, quiet: bool = False, failed_level: int = logging.WARNING,
                  timeout_s: float = 10.0) -> bool:
    """Create the frames, dead-letter and alert topics with ``bus.partitions`` if missing,
    and give one with fewer the rest (``ensure_topic``); True if every one was checked.
    Agents and processors both call it before they produce or consume, so whichever comes
    first creates them as configured. A cluster may forbid creating topics: then said at
    ``failed_level``, and the topics must be made with the cluster's tools."""
    from fleetwatch.pipeline.bus import BusError
    from fleetwatch.pipeline.bus.kafka import ensure_topic
    from fleetwatch.pipeline.bus.kafka_access import kafka_security

    ok = True
    topics = [t for t in (config.topic, config.dead_letter_topic, config.alert_topic) if t]
    for i, topic in enumerate(topics):
        try:
            n = ensure_topic(config.bootstrap, topic, config.partitions, kafka_security(config),
                             timeout_s=timeout_s, replication_factor=config.replication_factor)
            if n > config.partitions:
                # Made by a member with a larger bus.partitions, or by hand: fine as it is.
                log.log(logging.DEBUG if quiet else logging.INFO, "topic %s has %d partitions, "
                        "more than bus.partitions = %d here: used as it is", topic, n,
                        config.partitions)
            else:
                log.log(logging.DEBUG if quiet else logging.INFO, "topic %s has %d partitions",
                        topic, n)
        except (BusError, OSError) as exc:
            ok = False
            if unreachable(exc):
                # The broker is the problem, not the topics: said once for those left, which
                # are not tried (each would wait out its own timeout, holding the caller).
                log.log(failed_level, "could not check or create %s %s (%s): %s; %s "
                        "checked, and created if missing, once it can be reached",
                        "topics" if i < len(topics) - 1 else "topic", ", ".join(topics[i:]),
                        exc, "no broker by that name" if "no address for host" in str(exc)
                        else "the broker is down or cannot be reached from here",
                        "they are" if i < len(topics) - 1 else "it is")
                break
            # A broker that refused fleetwatch (SASL, credentials, TLS) says what to fix; the
            # hint to make the topic by hand is for a broker that answered but did not make it.
            refused = ("refused fleetwatch's connection" in str(exc)
                       or str(exc).startswith("no Kafka at "))
            log.log(failed_level, "could not check or create %s %s (%s)%s",
                    "topic" if not refused or i == len(topics) - 1 else "topics",
                    ", ".join(topics[i:]) if refused else topic, exc,
                    "" if refused else "; create it with your Kafka tools if it does not exist")
            if refused:
                break  # the connection itself was refused: each other topic would wait for it
    return ok


def unreachable(exc: BaseException) -> bool:
    """Whether a topic check failed because no broker could be reached at all (down, a
    wrong address, a firewall): ``cannot_reach``'s message, not a broker's refusal."""
    return str(exc).startswith("cannot reach Kafka at ")


def open_consumer(config: BusConfig, memory: MemoryBus | None = None,
                  check: GroupCheck | None = None) -> Consumer:
    """``check``: this member's settings handed to its group, and the group's compared with
    them on each assignment (Kafka only: the in-process bus has one member)."""
    if config.kind == "memory":
        if memory is None:
            raise ValueError("the in-process bus only works inside `fleetwatch up`; "
                             "set bus.kind = \"kafka\" for separate agents and processors")
        return memory.consumer(config.topic, config.group)
    from fleetwatch.pipeline.bus.kafka import KafkaConsumer
    from fleetwatch.pipeline.bus.kafka_access import kafka_security

    session_ms = int(config.session_timeout_s * 1000)
    return KafkaConsumer(config.bootstrap, config.topic, config.group,
                         security=kafka_security(config), session_timeout_ms=session_ms,
                         heartbeat_interval_ms=max(1000, session_ms // 3),
                         options=config.kafka_consumer,
                         member_data=check.mine.encode() if check is not None else b"",
                         on_group=check.assigned if check is not None else None)


def learned_detectors(config: ModelsConfig) -> list[Detector]:
    """The learned detectors over the newest model file in ``models.dir`` (none if disabled)."""
    if not config.enabled:
        return []
    from fleetwatch.models.anomaly import FleetAnomaly
    from fleetwatch.models.learned import LearnedDetectors
    from fleetwatch.models.lemon import LemonScore
    from fleetwatch.models.thermal_health import ThermalHealth

    return [LearnedDetectors(
        config.dir,
        thermal=ThermalHealth(half_life_s=config.thermal_half_life_s,
                              min_excess_c=config.thermal_min_excess_c,
                              min_score=config.thermal_min_score, for_s=config.thermal_for_s,
                              store_every_s=config.thermal_store_every_s),
        anomaly=FleetAnomaly(consecutive=config.anomaly_consecutive),
        lemon=LemonScore(config.lemon_half_life_d, config.lemon_threshold))]


def linked(chosen: list[Detector]) -> list[Detector]:
    """The detectors, the lemon score told when the rack detector's cooling finding
    explains a node's thermal slowdowns (they are the air's, not the board's)."""
    from fleetwatch.models.learned import LearnedDetectors
    from fleetwatch.models.rack import RackCooling

    racks = [d for d in chosen if isinstance(d, RackCooling)]
    for d in chosen:
        if racks and isinstance(d, LearnedDetectors):
            d.lemon.explained = racks[0].explains
    return chosen


def detectors(config: DetectorsConfig) -> list[Detector]:
    """The detectors ``[detectors] enabled`` names, tuned by that section (see models.registry)."""
    return build(config)


def clusters_in(store: Store) -> Callable[[], set[str]]:
    """The clusters the store saw in the last day: of its GPU readings and its alerts."""
    def seen() -> set[str]:
        since = time.time() - 86_400.0
        return ({key.cluster for key, _, _ in store.latest("gpu_temp_c", int(since * 1000))}
                | {a.cluster for a in store.alerts(since_ts=since)})
    return seen


def alert_sinks(config: Config, memory: MemoryBus | None = None,
                clusters_seen: Callable[[], Iterable[str]] = lambda: ()) -> list[AlertSink]:
    """The sinks the config turns on: Alertmanager, webhook, the Kafka alert topic.
    ``clusters_seen``: those the store saw, to warn of an ``alerts.clusters`` entry in none."""
    sinks: list[AlertSink] = []
    a = config.alerts
    if a.alertmanager_url:
        from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink

        am = AlertmanagerSink(a.alertmanager_url, a.alertmanager_resend_s, a.dashboard_url,
                              a.sink_timeout_s, instance=alerts_instance(config),
                              clusters=a.clusters, remedy_label=a.xid_remedy_label,
                              clusters_seen=clusters_seen)
        am.check_clusters()
        sinks.append(am)
        log.info("Alertmanager: this deployment's silences there are made by %s "
                 "(alerts.instance%s)", am.owner, "" if a.instance else ", derived from the store")
    if a.webhook_url:
        from fleetwatch.pipeline.sinks.webhook import WebhookSink

        sinks.append(WebhookSink(a.webhook_url, a.sink_timeout_s, a.dashboard_url,
                                 a.webhook_group_interval_s))
    if config.bus.alert_topic and config.bus.kind == "kafka":
        from fleetwatch.pipeline.sinks.kafka import KafkaAlertSink

        sinks.append(KafkaAlertSink(open_producer(config.bus, memory), config.bus.alert_topic,
                                    a.sink_timeout_s, a.dashboard_url))
    return sinks


def open_notifier(config: Config, store: Store, memory: MemoryBus | None = None) -> Notifier:
    """The processor's alert hook: the configured sinks, with the store's silences and acks
    (every backend keeps them). Give it to the ``Processor`` as ``notifier``: it adopts the
    open alerts of each node as the node's partition is assigned, and forgets them when the
    partition moves away, so that only the node's owner re-sends them."""
    return Notifier(alert_sinks(config, memory, clusters_in(store)), silences=store.silences,
                    acks=store.acks,
                    attempts=config.alerts.sink_attempts, retry_s=config.alerts.sink_retry_s,
                    reload_s=config.alerts.silence_reload_s,
                    record=getattr(store, "write_notifications", None),
                    recorded=_recorded(store))


# The record of notifications is read back to the end of this time (epoch s): an alert's
# records are read by its id, whatever their time, within every backend's range.
_RECORDED_END_S = 4.0e9


def _recorded(store: Store) -> Callable[[Sequence[str]], list[Notification]] | None:
    """The store's notifications of some alerts (``Notifier``'s ``recorded``), if it keeps
    them."""
    read = getattr(store, "notifications", None)
    if not callable(read):
        return None

    def recorded(ids: Sequence[str]) -> list[Notification]:
        ids = list(ids)  # read in chunks: a query's parameters are bounded (SQLite's)
        return [n for i in range(0, len(ids), 500)
                for n in read(0.0, _RECORDED_END_S, ids[i:i + 500])]
    return recorded


def energy_integrator(config: EnergyConfig, store: Store) -> EnergyIntegrator | None:
    """The processor's energy integrator, writing to the store's ledger (if it keeps one)."""
    if not hasattr(store, "write_energy"):
        return None
    return EnergyIntegrator(store, EnergySettings.from_config(config),  # type: ignore[arg-type]
                            clock=time.time)
