"""How a configuration field is declared: its range (``ranged``), its text rule
(``required``, ``kafka_topic``, ``http_url``, ``time_zone``), the ``Secret`` type, and the
``ConfigError`` a wrong value raises.

``fleetwatch.settings`` declares every section with these; ``fleetwatch.config_values``
checks a value against what they recorded in the field's metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, field
from typing import Any, Literal


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


def ranged(default: Any, lo: float | None = None, hi: float | None = None, *,
           above: bool = False) -> Any:
    """A number field with its allowed range, checked at load and on every override.

    ``lo``/``hi`` are inclusive bounds (None: unbounded); ``above=True`` makes
    ``lo`` exclusive (the value must be above it). NaN and infinities are always
    refused. Declare every number this way, so that one place states its range.
    """
    return field(default=default, metadata={"range": (lo, hi, above)})


# How a string field is checked at load (``fleetwatch.config``): ``name`` may not be empty
# or blank, ``topic`` is a name Kafka accepts, ``url`` is an http(s) URL and ``url_or_off``
# the same or "" (the feature is off). A string field without one may be empty.
# ``timezone`` an IANA time zone name that the system's zoneinfo database has,
# ``timezone_or_off`` the same or "" (none).
TextRule = Literal["name", "topic", "url", "url_or_off", "timezone", "timezone_or_off"]


def required(default: Any = MISSING, *, factory: Callable[[], Any] | None = None) -> Any:
    """A string that names something (a cluster, a path, a consumer group): never empty.

    An empty name is not "none": an empty spool directory is the working directory,
    an empty store path SQLite's throw-away database, an empty topic a send that
    fails every second. Leave a key out to keep its default.
    """
    if factory is not None:
        return field(default_factory=factory, metadata={"text": "name"})
    return field(default=default, metadata={"text": "name"})


def kafka_topic(default: str) -> Any:
    """A Kafka topic name: 1 to 249 of ``a-zA-Z0-9._-``, not ``.`` or ``..`` (Kafka's rule)."""
    return field(default=default, metadata={"text": "topic"})


def http_url(default: str, *, optional: bool = False) -> Any:
    """An ``http://`` or ``https://`` URL; with ``optional=True``, "" turns the feature off.

    Checked at load, because a URL without its scheme (``127.0.0.1:8428``) is only
    refused by urllib at the first request, long after start-up said all was well.
    """
    return field(default=default, metadata={"text": "url_or_off" if optional else "url"})


def time_zone(default: str) -> Any:
    """An IANA time zone name (``Europe/Berlin``), checked at load against zoneinfo: a
    misspelt zone would otherwise only fail when the first report is made."""
    return field(default=default, metadata={"text": "timezone"})


def time_zone_or_off(default: str) -> Any:
    """As ``time_zone``, or "" for none."""
    return field(default=default, metadata={"text": "timezone_or_off"})


class Secret(str):
    """A string that does not print itself."""

    def __repr__(self) -> str:
        return "Secret('***')" if self else "Secret('')"

    def reveal(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return "***" if self else ""
