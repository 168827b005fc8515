"""Where frames travel and rest: the [bus] (Kafka, with its TLS and SASL settings) and
[store] sections, their defaults and ranges, and the bus's checks of its certificate files.

Part of ``fleetwatch.settings`` (whose ``Config`` holds both sections), kept apart as the
settings of the two backends the agent, the processor and the dashboard connect to;
``fleetwatch.config`` loads and checks them with the rest.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetwatch.config_fields import ConfigError, Secret, http_url, kafka_topic, ranged, required


@dataclass(frozen=True)
class BusConfig:
    kind: Literal["memory", "kafka"] = "memory"
    bootstrap: str = required("127.0.0.1:9092")
    topic: str = kafka_topic("fleetwatch.frames")
    # Partitions of the topics (the most processors that can share them): a topic with fewer
    # gets the rest by CreatePartitions where the broker can, else is used as it is; never
    # deleted (agents and processors with different settings share it).
    partitions: int = ranged(12, 1, 10_000)
    # Replicas of each partition when fleetwatch creates a topic; 0: min(3, brokers).
    replication_factor: int = ranged(0, 0, 32)
    dead_letter_topic: str = kafka_topic("fleetwatch.frames.dead")
    alert_topic: str = kafka_topic("fleetwatch.alerts")
    group: str = required("fleetwatch-processor")
    # Seconds a processor may go silent before the group gives its partitions to the others
    # (a killed member's partitions wait this long); heartbeats go every third of it.
    session_timeout_s: float = ranged(10.0, 6.0, 1800.0)
    security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"] = "PLAINTEXT"
    # The SASL mechanisms a user name and password configure (kafka-python's OAUTHBEARER,
    # GSSAPI and AWS_MSK_IAM need settings fleetwatch does not have).
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    sasl_username: str = ""
    sasl_password: Secret = Secret("")
    # TLS (security_protocol SSL or SASL_SSL): PEM files, "" for none. The CA that signed
    # the brokers' certificates ("": the system's trust store); a client certificate and its
    # key for brokers that require one (mTLS; the key may also sit in ssl_certfile).
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    # Check that a broker's certificate names the host it was reached at.
    ssl_check_hostname: bool = True
    # kafka-python options for every Kafka producer / consumer fleetwatch makes, from the
    # [bus.kafka_producer] / [bus.kafka_consumer] tables: checked at load against the
    # installed kafka-python (fleetwatch.kafka_options), over fleetwatch's own values.
    kafka_producer: dict[str, Any] = field(default_factory=dict)
    kafka_consumer: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Checked at load, as the key names them: a missing file would otherwise be
        # reported as "cannot reach Kafka" by every client, at every retry.
        files = {k: getattr(self, k) for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")}
        given = [k for k, v in files.items() if v]
        if given and self.security_protocol not in ("SSL", "SASL_SSL"):
            raise ConfigError(f"bus.{given[0]} is set but bus.security_protocol is "
                              f"{self.security_protocol!r}, which does not use TLS: set "
                              'security_protocol = "SSL" (or "SASL_SSL"), or remove it')
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ConfigError("bus.ssl_keyfile is set without bus.ssl_certfile: set the client "
                              "certificate it belongs to")
        for key in given:
            try:
                with open(files[key], "rb") as f:
                    f.read(1)
            except OSError as exc:
                raise ConfigError(f"bus.{key} = {files[key]!r}: cannot read it "
                                  f"({exc.strerror or exc}); give a PEM file this user can "
                                  "read") from None

    def open_to_anyone(self) -> str | None:
        """What a Kafka bus without client authentication to brokers beyond this machine
        lets anyone on the network do, and what to do (None: clients authenticate, SASL or a
        TLS client certificate, or every broker is on loopback)."""
        if self.kind != "kafka" or self.security_protocol not in ("PLAINTEXT", "SSL") \
                or self.security_protocol == "SSL" and self.ssl_certfile:
            return None
        hosts = [e.strip().rpartition(":")[0].strip("[]") or e.strip()
                 for e in self.bootstrap.split(",") if e.strip()]
        if all(_loopback(h) for h in hosts):
            return None
        return (f"bus.security_protocol = {self.security_protocol!r}: the brokers at "
                f"{self.bootstrap} do not know who writes, so anyone who can reach them can "
                "forge any node's frames, stops and alerts (pages made or hidden); on a "
                "shared cluster use SASL_SSL with a credential per agent and ACLs (README: "
                "\"Who may write to the frames topic\")")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class StoreConfig:
    kind: Literal["sqlite", "influx", "victoriametrics"] = "sqlite"
    path: str = required("fleetwatch.db")
    # At least 0.1 h: a minute's raw rows make its rollup once it is 2 min old (a shorter
    # retention deleted them first, and every rollup was lost).
    raw_retention_h: float = ranged(14 * 24.0, 0.1, 1_000_000.0)
    rollup_retention_d: float = ranged(400.0, 0.0, 100_000.0, above=True)
    url: str = http_url("http://127.0.0.1:8428")
    org: str = required("fleetwatch")
    bucket: str = required("fleetwatch")
    token: Secret = Secret("")
    # kind = "influx": which write API. "auto" asks the server's /ping at the first write
    # (1.x: "v1", else "v2"). On 1.x (v1) bucket is the database, org is not used and
    # token is "username:password" (empty when its auth is off).
    influx_api: Literal["auto", "v1", "v2"] = "auto"
