"""One typed configuration: a TOML file plus ``FLEETWATCH_<SECTION>_<KEY>`` overrides.

Read and checked once at start. A wrong value stops start-up with a message
that names the key and where it came from. Secrets are ``Secret`` values:
they never appear in a repr, a log line or ``fleetwatch config``. The sections,
their defaults and ranges are in ``fleetwatch.settings`` (bus and store in
``fleetwatch.settings_backends``, energy and carbon in ``fleetwatch.settings_energy``);
the checks of one value (type, range, text rule) in ``fleetwatch.config_values``; unknown,
moved and retired keys in ``fleetwatch.config_keys``; rules across values in
``fleetwatch.config_rules``.
This module reads the file and the environment and builds the sections.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleetwatch import kafka_options
from fleetwatch.carbon_units import G_PER_KWH, unit_in_name
from fleetwatch.config_env import service_link
from fleetwatch.config_fields import (
    ConfigError,
    Secret,
    http_url,
    kafka_topic,
    ranged,
    required,
)
from fleetwatch.config_keys import MOVED, RETIRED, key_problems, refuse_keys
from fleetwatch.config_rules import carbon_problems, rule_problems, store_problems
from fleetwatch.config_secrets import inline_secrets, public_view
from fleetwatch.config_secrets import masked_url as _masked_url  # noqa: F401  (server_url)
from fleetwatch.config_values import PLACEHOLDER, coerce  # noqa: F401  (PLACEHOLDER, as before)
from fleetwatch.settings import (
    DETECTORS,
    ENV_PREFIX,
    AgentConfig,
    AlertsConfig,
    Config,
    DashboardConfig,
    DetectorsConfig,
    ModelsConfig,
    NodeConfig,
    ProcessorConfig,
    SimConfig,
    T,
)
from fleetwatch.settings_backends import BusConfig, StoreConfig
from fleetwatch.settings_energy import (
    CARBON_GRID_KEYS,
    CARBON_PUE_KEYS,
    CarbonConfig,
    EnergyConfig,
)

log = logging.getLogger(__name__)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "ENV_PREFIX",
    "T",
    "ConfigError",
    "ranged",
    "required",
    "kafka_topic",
    "http_url",
    "Secret",
    "NodeConfig",
    "AgentConfig",
    "BusConfig",
    "ProcessorConfig",
    "StoreConfig",
    "AlertsConfig",
    "ModelsConfig",
    "DETECTORS",
    "DetectorsConfig",
    "DashboardConfig",
    "SimConfig",
    "EnergyConfig",
    "CarbonConfig",
    "Config",
    "load",
    "override",
    "options",
    "public_view",
]


def load(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read the TOML file (if any), apply environment overrides, check every value."""
    env = os.environ if env is None else env
    raw: dict[str, dict[str, tuple[Any, str]]] = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(_read_text(p))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML: {exc}") from None
        for section, values in data.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{p}: [{section}] must be a table")
            for key, value in values.items():
                raw.setdefault(section, {})[key] = (value, f"{p} [{section}] {key}")
        _warn_readable(p, raw)
    sections = {f.name for f in dataclasses.fields(Config)}
    problems = key_problems(raw)            # the file's and the environment's, all named
    from_env: dict[str, dict[str, tuple[Any, str]]] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "CONFIG":
            continue
        if service_link(name, value, ENV_PREFIX):  # kubelet's, for a Service: no setting
            log.debug("environment %s=%s is a Kubernetes service link; not a setting, "
                      "ignored", name, value)
            continue
        section, _, key = name[len(ENV_PREFIX):].lower().partition("_")
        if section not in sections or not key:
            problems.append(f"environment {name}: no such setting (sections: "
                            f"{', '.join(sorted(sections))})")
            continue
        from_env.setdefault(section, {})[key] = (value, f"environment {name}")
    problems += key_problems(from_env)
    refuse_keys(problems, [raw, from_env])
    for section, values in from_env.items():
        raw.setdefault(section, {}).update(values)
    return _build(raw)


def _warn_readable(p: Path, raw: dict[str, dict[str, tuple[Any, str]]]) -> None:
    """A file that every user of the machine may read and that holds a secret itself (a
    GPU node's job users could read the brokers' password): said, with what to do."""
    try:
        mode = p.stat().st_mode
    except OSError:
        return
    held = inline_secrets(raw) if mode & 0o004 else []
    if held:
        log.warning("%s is readable by every user of this machine (mode %04o) and holds %s: "
                    "make it readable by the service's user only (chmod 640, group of that "
                    "user), or put each secret in a file of its own named by %s", p,
                    mode & 0o7777, ", ".join(held), ", ".join(f"{k}_file" for k in held))


def _read_text(p: Path) -> str:
    """The file's text; every way it can fail to be read is a ``ConfigError`` naming it.

    Anything else would be a traceback and exit status 1, which the systemd units
    restart every few seconds; a configuration error (exit 2) stops them.
    """
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {p} is a directory; give the path of the TOML "
                          "file in it") from None
    except PermissionError:
        raise ConfigError(f"config file {p} cannot be read by this user (permission "
                          "denied); make it readable (chmod o+r, or a group of the "
                          "service's user)") from None
    except OSError as exc:
        raise ConfigError(f"config file {p} cannot be read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{p}: not UTF-8 text (byte 0x{data[exc.start]:02x} on line "
                          f"{line}); TOML files are UTF-8: save it as UTF-8") from None


def _build(raw: dict[str, dict[str, tuple[Any, str]]]) -> Config:
    """The config of ``raw``; one ``ConfigError`` naming every bad value and masked secret
    (a file printed by ``fleetwatch config`` masks several at once), as unknown keys are."""
    hints = typing.get_type_hints(Config)
    built = {}
    problems: list[str] = []
    for section, values in raw.items():
        if section not in hints:
            origin = next(iter(values.values()))[1]
            raise ConfigError(f"{origin}: unknown section [{section}]")
        built[section] = _section(hints[section], section, values, problems=problems)
    origins = {f"{section}.{key}": origin for section, values in raw.items()
               for key, (_, origin) in values.items()}
    alerts = built.get("alerts", AlertsConfig())
    if alerts is not None:  # its rules too, in the same error as the bad values
        problems += rule_problems(alerts, origins)
    store = built.get("store", StoreConfig())
    if store is not None:
        problems += store_problems(store, origins)
    refuse_keys(problems, [raw])
    config = Config(**built)
    for problem in carbon_problems(config.carbon, origins):
        # An energy-report figure must not stop alerting: said at start, refused where
        # carbon is computed (``carbon.model_from_config``: the report, the energy page).
        log.error("%s; alerting is not affected, but CO2e is unknown until it is fixed "
                  "(fleetwatch report refuses, the energy page shows no CO2e)", problem)
    return config


def _section(cls: Any, section: str, values: Mapping[str, tuple[Any, str]],
             base: Any = None, problems: list[str] | None = None) -> Any:
    """``cls`` (or ``base`` with these values replaced), every value coerced and range-checked.
    With ``problems``, a bad value is added there and the others still checked (None is
    returned if any was bad); without, the first one raises."""
    fields = typing.get_type_hints(cls)
    specs = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    tables = None
    had = len(problems) if problems is not None else 0
    for key, (value, origin) in values.items():
        if cls is CarbonConfig and key == "clusters":
            tables = (value, origin)  # resolved on the section's other values, below
            continue
        if cls is BusConfig and key in ("kafka_producer", "kafka_consumer"):
            try:
                kwargs[key] = kafka_options.from_config(key, value, origin)
            except ConfigError as exc:
                if problems is None:
                    raise
                problems.append(str(exc))
            continue
        if cls is CarbonConfig and key == "intensity_csv_unit" and isinstance(value, str):
            # As a column's name spells it (gCO2/kWh, gCO2e/kWh, gCO₂eq/kWh): that unit.
            value = value if value in G_PER_KWH else unit_in_name(value) or value
        if key.endswith("_file") and key[:-5] in fields:
            key, value = key[:-5], _read_secret_file(value, origin)
        if (section, key) in RETIRED:
            log.warning("%s: %s.%s is no longer used and is ignored: %s; remove it", origin,
                        section, key, RETIRED[section, key])
            continue
        if (section, key) in MOVED:
            raise ConfigError(f"{origin}: {section}.{key} is now {MOVED[section, key]}: "
                              "move it there")
        if key not in fields:
            raise ConfigError(f"{origin}: unknown key {section}.{key} (known: "
                              f"{', '.join(sorted(fields))})")
        try:
            kwargs[key] = coerce(value, fields[key], f"{section}.{key}", origin,
                                 specs[key].metadata.get("range"),
                                 specs[key].metadata.get("text"))
        except ConfigError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
    if problems is not None and len(problems) > had:
        return None
    built = cls(**kwargs) if base is None else dataclasses.replace(base, **kwargs)
    if tables is not None:
        built = dataclasses.replace(built, clusters=_carbon_clusters(built, *tables))
    return built


def _carbon_clusters(carbon: CarbonConfig, tables: Any, origin: str
                     ) -> dict[str, CarbonConfig]:
    """``[carbon.clusters.NAME]`` tables, each resolved to a whole ``CarbonConfig``: the
    grid keys and the PUE keys (``CARBON_GRID_KEYS``, ``CARBON_PUE_KEYS``) come as a group
    from the table when it sets any of the group, else from ``carbon``."""
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise ConfigError(f"{origin}: carbon.clusters is a table per cluster, set in the "
                          "TOML file: [carbon.clusters.NAME] with country, "
                          "intensity_g_per_kwh, intensity_csv, pue, ... (not from the "
                          "environment)")
    defaults = CarbonConfig()
    out = {}
    for name, table in tables.items():
        where = origin.replace("[carbon] clusters", f"[carbon.clusters.{name}]")
        if "clusters" in table:
            raise ConfigError(f"{where}: carbon.clusters.{name} cannot hold clusters")
        start = {}
        for group in (CARBON_GRID_KEYS, CARBON_PUE_KEYS):
            source = defaults if any(k in table for k in group) else carbon
            start |= {k: getattr(source, k) for k in group}
        out[name] = _section(CarbonConfig, f"carbon.clusters.{name}",
                             {k: (v, f"{where} {k}") for k, v in table.items()},
                             base=CarbonConfig(**start))
    return out


def override(config: Config, section: str, origin: str = "command line",
             **values: object) -> Config:
    """``config`` with these values of one section replaced, checked like the file's.

    Values that are None are left out (an option that was not given). Command-line
    flags go through here, so ``--port 99999`` fails as ``dashboard.port = 99999``
    in the file would.
    """
    given = {k: (v, f"{origin} {_flag(k)}") for k, v in values.items() if v is not None}
    if not given:
        return config
    cls = typing.get_type_hints(Config)[section]
    replaced = dataclasses.replace(config, **{
        section: _section(cls, section, given, base=getattr(config, section))})
    _check(replaced)
    return replaced


def options(cls: type[T], section: str, flags: Mapping[str, str] | None = None,
            origin: str = "command line", **values: object) -> T:
    """A command's own options (a dataclass whose numbers use ``ranged()``), checked like config.

    For flags that are no config key (``up --speed``, ``simulate --days``): their
    ranges are declared once, on the dataclass, and checked by the same code as
    the file's values. ``flags`` names the flag of a field whose name differs
    (``interval_s`` is ``--interval``); values that are None keep their default.
    """
    names = flags or {}
    given = {k: (v, f"{origin} {names.get(k, _flag(k))}") for k, v in values.items()
             if v is not None}
    return _section(cls, section, given, base=cls())


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _read_secret_file(path: Any, origin: str) -> str:
    try:
        return Path(str(path)).read_text("utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{origin}: cannot read secret file: {exc}") from None
    except UnicodeDecodeError:
        # Its bytes are the secret's: the message names the file, never what is in it.
        raise ConfigError(f"{origin}: secret file {path} is not UTF-8 text; write the "
                          "secret as text") from None


def _check(config: Config) -> None:
    """Cross-field rules that a single field's range cannot say; every one broken, in one
    error."""
    refuse_keys(rule_problems(config.alerts, {}) + store_problems(config.store, {}), [])
