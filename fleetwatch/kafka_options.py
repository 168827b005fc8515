"""kafka-python client options from the config: ``[bus.kafka_producer]`` and
``[bus.kafka_consumer]`` tables, checked at load against the installed kafka-python.

A Kafka platform team tunes its clients (timeouts, batch and fetch sizes, compression)
without a code change. Only keys kafka-python's ``KafkaProducer`` / ``KafkaConsumer``
accept (their ``DEFAULT_CONFIG``) and values of the type kafka-python expects pass; a
key fleetwatch must own (the bootstrap servers, the group, the commits, the serializers,
the delivery guarantees, the security settings that ``bus.*`` keys already give every
client) is refused, saying why and which key to set instead. Pure logic: the defaults
are passed in, so that loading a config that sets no option never imports kafka-python.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from fleetwatch.config_fields import ConfigError

log = logging.getLogger(__name__)

Role = Literal["producer", "consumer"]

_SECURITY = ("the bus.security_protocol, bus.sasl_* and bus.ssl_* keys set it for every "
             "Kafka client fleetwatch makes (the topic checks' too); set those instead")
_OBJECT = "its value is a Python object, which a config file cannot give"

# Keys fleetwatch sets itself, and why (both clients).
_OWNED: dict[str, str] = {
    "bootstrap_servers": "set bus.bootstrap instead",
    "security_protocol": _SECURITY,
    "kafka_client": _OBJECT,
}
_OWNED_BY: dict[str, dict[str, str]] = {
    "producer": {
        "key_serializer": "fleetwatch sends bytes it encoded itself",
        "value_serializer": "fleetwatch sends bytes it encoded itself",
        "acks": "a frame counts as sent only once every in-sync replica has it "
                "(acks=all): the agent's spool drops it then",
        "enable_idempotence": "fleetwatch keeps it off: an idempotent kafka-python "
                              "producer fails every send after a broker restart",
        "max_in_flight_requests_per_connection": "fleetwatch keeps one request in flight "
                                                 "so that retries do not reorder frames",
        "transactional_id": "fleetwatch does not use transactions",
        "allow_auto_create_topics": "fleetwatch creates its topics with bus.partitions "
                                    "partitions; the broker's auto-creation would not",
    },
    "consumer": {
        "group_id": "set bus.group instead",
        "group_instance_id": "every processor worker would claim the same static member",
        "key_deserializer": "fleetwatch decodes the bytes itself",
        "value_deserializer": "fleetwatch decodes the bytes itself",
        "enable_auto_commit": "fleetwatch commits a batch's offsets only once it is stored",
        "auto_commit_interval_ms": "fleetwatch commits a batch's offsets only once it is "
                                   "stored (no auto-commit)",
        "auto_offset_reset": "a new group starts at the earliest offset, so that nothing "
                             "already sent is skipped",
        "session_timeout_ms": "set bus.session_timeout_s instead",
        "heartbeat_interval_ms": "it is a third of bus.session_timeout_s",
        "check_crcs": "fleetwatch keeps it on: a record corrupted on a disk or a link "
                      "would otherwise be stored, a flipped bit in a reading passing the "
                      "codec's checks",
    },
}

# The type of keys whose kafka-python default is None (others: the default's type).
_NONE_DEFAULT_TYPES: dict[str, type] = {
    "client_id": str, "compression_type": str, "receive_buffer_bytes": int,
    "send_buffer_bytes": int, "proxy_url": str, "socks5_proxy": str,
}
# kafka-python writes its integer options into the Kafka protocol's INT32 fields (a
# FetchRequest's max_bytes, say): a larger value fails every request it is in, with a
# struct.error, long after start-up.
INT32_MAX = 2**31 - 1
# Options that must be above 0: a zero timeout fails every request at once (said as a
# broker that cannot be reached), a zero size or count fetches or sends nothing.
_POSITIVE = ("request_timeout_ms", "delivery_timeout_ms", "max_block_ms",
             "connections_max_idle_ms", "max_poll_interval_ms", "metadata_max_age_ms",
             "bootstrap_timeout_ms", "transaction_timeout_ms", "max_request_size",
             "max_partition_fetch_bytes", "fetch_max_bytes", "max_poll_records",
             "receive_message_max_bytes", "buffer_memory", "consumer_timeout_ms")
# Options that send all Kafka traffic, SASL's credentials included, through another host:
# accepted (a network may only reach its brokers so), but said at every load.
PROXIES = ("socks5_proxy", "proxy_url")

# Text values kafka-python accepts; compression_type's are the installed codecs
# (``choices``).
_CHOICES: dict[str, tuple[str, ...]] = {
    "isolation_level": ("read_uncommitted", "read_committed"),
    "client_dns_lookup": ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
}


def check(table: Any, role: Role, defaults: Mapping[str, Any], origin: str,
          choices: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """``table`` (``[bus.kafka_<role>]``) as kafka-python keyword arguments, or a
    ``ConfigError`` naming every wrong key or value and what to do about it.

    ``defaults``: kafka-python's ``DEFAULT_CONFIG`` for the role; ``choices``: more
    allowed values by key (``compression_type``: the installed codecs)."""
    section = f"bus.kafka_{role}"
    if not isinstance(table, dict):
        raise ConfigError(f"{origin}: {section} is a table of kafka-python Kafka{role.title()} "
                          f"options, set in the TOML file: [{section}] with e.g. "
                          "request_timeout_ms = 30000 (not from the environment)")
    if not table:
        return {}
    allowed = {**_CHOICES, **(choices or {})}
    problems = [p for key, value in table.items()
                if (p := _problem(key, value, role, defaults, allowed)) is not None]
    if not problems:
        problems = _cross_problems(table, role, defaults)
    if problems:
        where = origin.replace(f"[bus] kafka_{role}", f"[{section}]")
        raise ConfigError("; ".join(f"{where} {p}" for p in problems))
    return dict(table)


def _problem(key: str, value: Any, role: Role, defaults: Mapping[str, Any],
             choices: Mapping[str, tuple[str, ...]]) -> str | None:
    """What is wrong with one option, or None."""
    owned = _OWNED.get(key) or _OWNED_BY[role].get(key)
    if key.startswith(("ssl_", "sasl_")):
        owned = _SECURITY
    if owned is not None:
        return f"{key}: fleetwatch sets this kafka-python option itself ({owned})"
    if key not in defaults:
        near = sorted(k for k in defaults if key in k or k in key)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        return (f"{key}: not an option of kafka-python's Kafka{role.title()}{hint}; "
                "see its documentation for the keys it takes")
    default = defaults[key]
    typ = _NONE_DEFAULT_TYPES.get(key) if default is None else type(default)
    if typ not in (bool, int, float, str):
        return f"{key}: fleetwatch cannot set this kafka-python option ({_OBJECT})"
    ok = (isinstance(value, bool) if typ is bool else
          isinstance(value, int) and not isinstance(value, bool) if typ is int else
          isinstance(value, int | float) and not isinstance(value, bool) if typ is float else
          isinstance(value, str))
    kind = {bool: "true or false", int: "an integer", float: "a number",
            str: "a string (in quotes)"}[typ]
    if not ok:
        return f"{key} = {value!r}: must be {kind}"
    if typ in (int, float) and value < 0:
        return f"{key} = {value!r}: must be at least 0"
    if typ in (int, float) and value <= 0 and key in _POSITIVE:
        return f"{key} = {value!r}: must be above 0 (0 fails or empties every request)"
    if typ is int and value > INT32_MAX:
        return (f"{key} = {value!r}: must be at most {INT32_MAX} (the Kafka protocol's "
                "32-bit field; kafka-python would fail every request with it)")
    if typ is str and not value.isprintable():
        return (f"{key} = {value!r}: must hold printable characters only (it is sent to "
                "the brokers and written in their logs)")
    if key in choices and value not in choices[key]:
        return f"{key} = {value!r}: must be one of {', '.join(map(str, choices[key]))}"
    return None


def _cross_problems(table: Mapping[str, Any], role: Role,
                    defaults: Mapping[str, Any]) -> list[str]:
    """The rules between options that kafka-python checks only when a client is made
    (in the agent, long after start-up, and said as an outage)."""
    if role != "consumer":
        return []
    get = {**defaults, **table}.__getitem__
    wait, request, idle = (get("fetch_max_wait_ms"), get("request_timeout_ms"),
                           get("connections_max_idle_ms"))
    if wait < request < idle:
        return []
    return [f"fetch_max_wait_ms ({wait}) < request_timeout_ms ({request}) < "
            f"connections_max_idle_ms ({idle}) must hold (kafka-python's rule): change "
            "one of them"]


def producer_defaults() -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """The installed kafka-python's producer options, and the compression codecs it has."""
    from kafka import KafkaProducer

    codecs = tuple(c for c in KafkaProducer._COMPRESSORS if c is not None)
    return dict(KafkaProducer.DEFAULT_CONFIG), {"compression_type": codecs}


def consumer_defaults() -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """The installed kafka-python's consumer options."""
    from kafka import KafkaConsumer

    return dict(KafkaConsumer.DEFAULT_CONFIG), {}


def from_config(key: str, value: Any, origin: str) -> dict[str, Any]:
    """The config's ``bus.kafka_producer`` / ``bus.kafka_consumer`` (``key``) table,
    checked against the installed kafka-python (imported only when it sets something)."""
    role: Role = "producer" if key == "kafka_producer" else "consumer"
    if not value:
        return check(value, role, {}, origin)
    defaults, choices = producer_defaults() if role == "producer" else consumer_defaults()
    got = check(value, role, defaults, origin, choices)
    for proxy in (k for k in PROXIES if got.get(k)):
        log.warning("[bus.kafka_%s] %s = %r: all of this client's Kafka traffic, SASL "
                    "credentials included, goes through that host; use bus.security_protocol "
                    "SSL or SASL_SSL so that it cannot read or change it", role, proxy,
                    got[proxy])
    return got
