"""Topics of the Kafka bus: created as configured, and repaired when a broker lost them.

Agents and processors both ensure the topics (``ensure_topic``) before they produce or
consume, so whichever starts first creates them with ``bus.partitions``, never the
broker's auto-creation with its default count. A topic left with fewer partitions (it
cannot be grown here) is used as it is, never deleted: logged as a warning once, then at
most once an hour, and kept in ``topic_partitions`` (every topic checked) for the
processor's ``/metrics``.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

import kafka
import kafka.errors as kerr
from kafka.admin import NewPartitions

from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.bus.kafka_access import cannot_reach, check_listener

log = logging.getLogger("fleetwatch.pipeline.bus.kafka")

# Every topic this process checked: topic -> (partitions it has, bus.partitions); fewer:
# found short and not grown. Read by the processor's /metrics.
topic_partitions: dict[str, tuple[int, int]] = {}
# How often a topic that stays short is said again at ERROR (else DEBUG).
REPEAT_S = 3600.0
_said_at: dict[str, float] = {}
# Who else makes a topic before fleetwatch does, for the messages.
_CAUSES = ("created before fleetwatch could create it as configured: by the broker's "
           "auto-creation (its default partition count) when a client sent to it first, "
           "such as an agent of an older fleetwatch, or by a broker that lost its data")


# Refusals of CreateTopics that leave an existing topic usable as it is.
_FORBIDDEN = (kerr.TopicAuthorizationFailedError, kerr.ClusterAuthorizationFailedError,
              kerr.PolicyViolationError)


def topic_spec(partitions: int, replication_factor: int, brokers: int) -> dict[str, Any]:
    """What ``ensure_topic`` asks for: replication 0 means min(3, brokers).

    With two or more replicas, ``min.insync.replicas`` is one less than the
    replication factor, so an ``acks=all`` write (the agent's) is durable on
    at least two brokers with three replicas and still goes through while one
    broker is down.
    """
    replicas = replication_factor or max(1, min(3, brokers))
    spec: dict[str, Any] = {"num_partitions": partitions, "replication_factor": replicas}
    if replicas > 1:
        spec["configs"] = {"min.insync.replicas": str(replicas - 1)}
    return spec


def ensure_topic(bootstrap: str, topic: str, partitions: int,
                 security: dict[str, Any] | None = None, timeout_s: float = 10.0,
                 replication_factor: int = 0) -> int:
    """Create ``topic`` with ``partitions`` partitions unless it exists; return its partition count.

    Idempotent. An existing topic with more partitions is left as it is. One
    with fewer (made by the broker's auto-creation, with its default count, for a
    client that sent first: an older agent, or any after the broker lost its data) gets the missing
    partitions (``CreatePartitions``, nothing lost); on a broker without that
    request (Tansu) it is used as it is, with a warning that says what to do (once,
    then at most once per ``REPEAT_S``; ``topic_partitions`` keeps the count). An
    existing topic is never deleted.
    ``replication_factor`` 0 is min(3, the cluster's brokers); see ``topic_spec``.
    """
    check_listener(bootstrap, security)
    since = time.monotonic()
    try:
        admin = _AdminClient(bootstrap_servers=bootstrap, client_id="fleetwatch-admin",
                             request_timeout_ms=int(timeout_s * 1000),
                             bootstrap_timeout_ms=int(timeout_s * 1000), **(security or {}))
    except kerr.KafkaError as exc:
        raise BusError(cannot_reach(bootstrap, exc, since)) from exc
    spec: dict[str, Any] = {}
    try:
        brokers = 0 if replication_factor else len(admin.describe_cluster()["brokers"])
        spec = topic_spec(partitions, replication_factor, brokers)
        forbidden = False
        try:
            admin.create_topics({topic: spec}, timeout_ms=int(timeout_s * 1000),
                                wait_for_metadata=True)
            # Said, so that a misspelt bus.topic is seen: agents and processors then run
            # happily on two topics, neither seeing the other's.
            log.info("created topic %s with %d partitions on %s: it did not exist. If "
                     "agents already run, check that they and the processors name the "
                     "same topics (bus.topic)", topic, partitions, bootstrap)
        except kerr.TopicAlreadyExistsError:
            pass
        except _FORBIDDEN:
            forbidden = True  # fine where the topic exists: made with the cluster's tools
        count = _partitions(admin, topic)
        if forbidden and not count:
            raise BusError(f"topic {topic!r} does not exist on {bootstrap} and this client "
                           "may not create it: create it with your Kafka tools, or let a "
                           "processor create it")
        if 0 < count < partitions and not forbidden:
            count = _grow(admin, bootstrap, topic, count, spec, security, timeout_s)
        topic_partitions[topic] = (count, partitions)
        if count >= partitions:
            _said_at.pop(topic, None)
        return count
    except kerr.KafkaError as exc:
        hint = (f" (bus.replication_factor is {spec['replication_factor']}; the cluster has "
                "fewer brokers?)" if isinstance(exc, kerr.InvalidReplicationFactorError) else "")
        raise BusError(f"cannot create topic {topic!r} on {bootstrap}: {exc}{hint}") from exc
    finally:
        admin.close()


class _AdminClient(kafka.KafkaAdminClient):  # type: ignore[misc]
    """A ``KafkaAdminClient`` that gives back its IO thread and sockets when it cannot
    bootstrap: kafka-python's raises from its constructor with both still open, and its
    ``close`` does nothing for a client that never finished starting. The agent checks
    its topics at every spool retry while the broker is away, so each failed check
    would otherwise keep a thread and a few file descriptors for good."""

    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            self._give_back()
            raise

    def _give_back(self) -> None:
        for part in ("_client", "_net", "_metrics"):  # the order close() uses
            obj = getattr(self, part, None)
            if obj is None:
                continue
            try:
                obj.stop() if part == "_net" else obj.close()
            except Exception:  # noqa: BLE001 - already failing; the first error is raised
                log.debug("closing the admin client's %s failed", part, exc_info=True)
        self._closed = True
        # The sockets of its failed connection attempts are dropped, not closed, inside
        # reference cycles: collect them now, not whenever the collector next runs.
        gc.collect()


def _partitions(admin: kafka.KafkaAdminClient, topic: str) -> int:
    described = admin.describe_topics([topic])
    return len(described[0]["partitions"]) if described else 0


def _grow(admin: kafka.KafkaAdminClient, bootstrap: str, topic: str, count: int,
          spec: dict[str, Any], security: dict[str, Any] | None, timeout_s: float) -> int:
    """Bring ``topic`` from ``count`` partitions to the configured number, losing nothing.

    Only ``CreatePartitions`` (adds partitions, keeps every message). A topic that exists is
    never deleted: processors of a running group hold its partitions, and an agent or a
    processor whose ``bus.partitions`` differs from the others' is ordinary (per-node
    config files), so a recreation would leave the group consuming a topic that is gone.
    """
    wanted = spec["num_partitions"]
    try:
        admin.create_partitions({topic: NewPartitions(wanted)},
                                timeout_ms=int(timeout_s * 1000))
        log.warning("topic %s had %d partitions, fewer than bus.partitions = %d (%s): grown "
                    "to %d", topic, count, wanted, _CAUSES, wanted)
        return _partitions(admin, topic) or wanted
    except (kerr.IncompatibleBrokerVersion, kerr.UnsupportedVersionError):
        pass  # the broker cannot add partitions: the topic is used as it is
    log.log(_level_of_repeat(topic), "topic %s has %d partitions, fewer than "
            "bus.partitions = %d here, and this broker cannot add partitions: it is used as "
            "it is, so at most %d processors share it (said again at most once an hour; "
            "fleetwatch_processor_topic_partitions_missing shows it). It was %s, or by an "
            "agent or processor whose bus.partitions is %d. fleetwatch never deletes a "
            "topic: set the same bus.partitions on every agent and processor, or, once it is "
            "drained and everything is stopped, recreate it with your Kafka tools",
            topic, count, wanted, count, _CAUSES, count)
    return count


def _level_of_repeat(topic: str) -> int:
    """WARNING the first time a topic is found short, then at most once per ``REPEAT_S``."""
    now = time.monotonic()
    said = _said_at.get(topic)
    if said is not None and now - said < REPEAT_S:
        return logging.DEBUG
    _said_at[topic] = now
    return logging.WARNING
