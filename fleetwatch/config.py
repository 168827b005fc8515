"""One typed configuration: a TOML file plus ``FLEETWATCH_<SECTION>_<KEY>`` overrides.

Read and checked once at start. A wrong value stops start-up with a message
that names the key and where it came from. Secrets are ``Secret`` values:
they never appear in a repr, a log line or ``fleetwatch config``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENV_PREFIX = "FLEETWATCH_"


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


class Secret(str):
    """A string that does not print itself."""

    def __repr__(self) -> str:
        return "Secret('***')" if self else "Secret('')"

    def reveal(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return "***" if self else ""


@dataclass(frozen=True)
class NodeConfig:
    cluster: str = "default"
    rack: str = "rack0"
    node: str = field(default_factory=socket.gethostname)


@dataclass(frozen=True)
class AgentConfig:
    interval_s: float = 5.0
    # What to do when NVML is missing or fails at start: error (exit 1),
    # ignore (run host-only), retry (host-only, try NVML again each minute).
    nvml_policy: Literal["error", "ignore", "retry"] = "retry"
    spool_dir: str = "/var/lib/fleetwatch/spool"
    spool_max_mb: float = 512.0
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9400
    kernel_log: str = "/dev/kmsg"
    proc_root: str = "/proc"
    sys_root: str = "/sys"


@dataclass(frozen=True)
class BusConfig:
    kind: Literal["memory", "kafka"] = "memory"
    bootstrap: str = "127.0.0.1:9092"
    topic: str = "fleetwatch.frames"
    # Partitions of the topic when fleetwatch creates it: the most processors that can share it.
    partitions: int = 12
    # Replicas of each partition when fleetwatch creates a topic; 0: min(3, brokers).
    replication_factor: int = 0
    dead_letter_topic: str = "fleetwatch.frames.dead"
    alert_topic: str = "fleetwatch.alerts"
    group: str = "fleetwatch-processor"
    security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"] = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    sasl_password: Secret = Secret("")


@dataclass(frozen=True)
class ProcessorConfig:
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9401
    max_batch: int = 2000          # messages per poll, and so per store write
    maintain_every_s: float = 30.0
    workers: int = 1               # consumer-group members run as child processes


@dataclass(frozen=True)
class StoreConfig:
    kind: Literal["sqlite", "influx", "victoriametrics"] = "sqlite"
    path: str = "fleetwatch.db"
    raw_retention_h: float = 14 * 24.0
    rollup_retention_d: float = 400.0
    url: str = "http://127.0.0.1:8428"
    org: str = "fleetwatch"
    bucket: str = "fleetwatch"
    token: Secret = Secret("")


@dataclass(frozen=True)
class AlertsConfig:
    gpu_temp_limit_c: float = 85.0
    for_s: float = 60.0
    webhook_url: str = ""


@dataclass(frozen=True)
class DashboardConfig:
    host: str = "127.0.0.1"
    port: int = 8050
    refresh_s: float = 5.0


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 4
    gpus: int = 8
    nodes_per_rack: int = 2
    seed: int = 0
    job_mean_s: float = 3 * 3600.0
    idle_mean_s: float = 20 * 60.0


@dataclass(frozen=True)
class Config:
    node: NodeConfig = field(default_factory=NodeConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    bus: BusConfig = field(default_factory=BusConfig)
    processor: ProcessorConfig = field(default_factory=ProcessorConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    sim: SimConfig = field(default_factory=SimConfig)


def load(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read the TOML file (if any), apply environment overrides, check every value."""
    env = os.environ if env is None else env
    raw: dict[str, dict[str, tuple[Any, str]]] = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text("utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {p} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML: {exc}") from None
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{p}: [{section}] must be a table")
            for key, value in values.items():
                raw.setdefault(section, {})[key] = (value, f"{p} [{section}] {key}")
    sections = {f.name for f in dataclasses.fields(Config)}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "CONFIG":
            continue
        section, _, key = name[len(ENV_PREFIX):].lower().partition("_")
        if section not in sections or not key:
            raise ConfigError(f"environment {name}: no such setting (sections: "
                              f"{', '.join(sorted(sections))})")
        raw.setdefault(section, {})[key] = (value, f"environment {name}")
    return _build(raw)


def _build(raw: dict[str, dict[str, tuple[Any, str]]]) -> Config:
    hints = typing.get_type_hints(Config)
    built = {}
    for section, values in raw.items():
        if section not in hints:
            origin = next(iter(values.values()))[1]
            raise ConfigError(f"{origin}: unknown section [{section}]")
        cls = hints[section]
        fields = typing.get_type_hints(cls)
        kwargs = {}
        for key, (value, origin) in values.items():
            if key.endswith("_file") and key[:-5] in fields:
                key, value = key[:-5], _read_secret_file(value, origin)
            if key not in fields:
                raise ConfigError(f"{origin}: unknown key {section}.{key} (known: "
                                  f"{', '.join(sorted(fields))})")
            kwargs[key] = _coerce(value, fields[key], f"{section}.{key}", origin)
        built[section] = cls(**kwargs)
    config = Config(**built)
    _check(config)
    return config


def _read_secret_file(path: Any, origin: str) -> str:
    try:
        return Path(str(path)).read_text("utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{origin}: cannot read secret file: {exc}") from None


def _coerce(value: Any, typ: Any, key: str, origin: str) -> Any:
    where = f"{origin}: {key}"
    if typing.get_origin(typ) is Literal:
        choices = typing.get_args(typ)
        if value not in choices:
            raise ConfigError(f"{where} = {value!r}; must be one of {', '.join(map(str, choices))}")
        return value
    if typ is Secret:
        return Secret(str(value))
    if typ is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where} = {value!r}; must be true or false")
    if typ in (int, float):
        try:
            if isinstance(value, bool):
                raise ValueError
            number = typ(value)
        except (TypeError, ValueError):
            kind = "an integer" if typ is int else "a number"
            raise ConfigError(f"{where} = {value!r}; must be {kind}") from None
        if number < 0:
            raise ConfigError(f"{where} = {value!r}; must not be negative")
        return number
    if typ is str or isinstance(typ, types.UnionType):
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where} = {value!r}; must be a string")
        return str(value)
    raise ConfigError(f"{where}: unsupported type {typ}")  # pragma: no cover


def _check(config: Config) -> None:
    """Cross-field rules and ranges that a type alone cannot say."""
    rules = [
        (config.agent.interval_s >= 0.05, "agent.interval_s must be at least 0.05"),
        (0 < config.agent.metrics_port < 65536, "agent.metrics_port must be a TCP port"),
        (0 < config.dashboard.port < 65536, "dashboard.port must be a TCP port"),
        (0 <= config.processor.metrics_port < 65536,
         "processor.metrics_port must be a TCP port (0: no /metrics)"),
        (config.processor.max_batch >= 1, "processor.max_batch must be at least 1"),
        (config.processor.workers >= 1, "processor.workers must be at least 1"),
        (config.bus.partitions >= 1, "bus.partitions must be at least 1"),
        (config.bus.replication_factor >= 0,
         "bus.replication_factor must be 0 (min(3, brokers)) or a replica count"),
        (config.dashboard.refresh_s >= 0.5, "dashboard.refresh_s must be at least 0.5"),
        (config.sim.nodes >= 1 and config.sim.gpus >= 1, "sim.nodes and sim.gpus must be >= 1"),
        (config.sim.gpus <= 64, "sim.gpus must be at most 64"),
        (config.sim.nodes_per_rack >= 1, "sim.nodes_per_rack must be >= 1"),
        (config.sim.job_mean_s >= 60, "sim.job_mean_s must be at least 60"),
        (config.store.raw_retention_h > 0, "store.raw_retention_h must be above 0"),
        (config.alerts.gpu_temp_limit_c > 0, "alerts.gpu_temp_limit_c must be above 0"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(message)


def public_view(config: Config) -> dict[str, dict[str, Any]]:
    """The config as plain data with secrets masked, for ``fleetwatch config``."""
    out: dict[str, dict[str, Any]] = {}
    for section in dataclasses.fields(config):
        values = dataclasses.asdict(getattr(config, section.name))
        out[section.name] = {k: ("***" if isinstance(v, Secret) and v else v)
                             for k, v in values.items()}
    return out
