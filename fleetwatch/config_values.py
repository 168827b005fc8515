"""One configuration value, coerced to its field's type and checked: its range, its text
rule (a Kafka topic, a URL, a time zone), the sample's placeholder and a masked secret.

Pure: each function takes the value, the field's type and declared limits (from
``fleetwatch.settings``) and where the value came from, and returns the value or raises a
``ConfigError`` that names the key, the origin and the fix. The loader
(``fleetwatch.config``) calls ``coerce`` for every value of the file, the environment and
the command line.
"""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fleetwatch.config_fields import ConfigError, Secret, TextRule
from fleetwatch.config_secrets import encode_hint, refuse_masked
from fleetwatch.config_secrets import masked_url as _masked_url

# The text of the sample configurations (deploy/cluster.toml, the Kubernetes ConfigMap)
# that an administrator must replace: a cluster that starts with it is mislabelled.
PLACEHOLDER = "CHANGE-ME"

# Kafka's own rule (clients/.../common/internals/Topic.java); kafka-python checks the same
# on every send, one ValueError a second, long after start-up.
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def coerce(value: Any, typ: Any, key: str, origin: str,
           bounds: tuple[float | None, float | None, bool] | None = None,
           rule: TextRule | None = None) -> Any:
    """``value`` as a ``typ`` for ``key`` (from ``origin``), within ``bounds`` (a field's
    ``ranged()``) and its text ``rule``; a ``ConfigError`` naming the key otherwise. From
    the environment every value is text: numbers, booleans and lists are parsed from it."""
    where = f"{origin}: {key}"
    from_env = origin.startswith("environment")
    _refuse_placeholder(value, typ, where)
    refuse_masked(value, typ, key, where)
    if typing.get_origin(typ) is Literal:
        choices = typing.get_args(typ)
        if value not in choices:
            shown = ", ".join('""' if c == "" else str(c) for c in choices)  # "" is a choice
            raise ConfigError(f"{where} = {value!r}; must be one of {shown}")
        return value
    if typ is Secret:
        return Secret(str(value))
    if typing.get_origin(typ) is tuple:
        # A TOML array of strings; from the environment, comma-separated text.
        items = value.split(",") if from_env and isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(x, str) for x in items):
            raise ConfigError(f"{where} = {value!r}; must be a list of names in quotes, "
                              'e.g. ["a", "b"]')
        return tuple(x.strip() for x in items if x.strip())
    if typ is bool:
        if isinstance(value, bool):
            return value
        if from_env and str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if from_env and str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where} = {value!r}; must be true or false")
    if typ in (int, float):
        return _number(value, typ, where, from_env, bounds)
    if typ is str or isinstance(typ, types.UnionType):
        if not isinstance(value, str):
            raise ConfigError(f"{where} = {value!r}; must be a string (in quotes)")
        _text(value, rule, where)
        return value
    raise ConfigError(f"{where}: unsupported type {typ}")  # pragma: no cover


def _refuse_placeholder(value: Any, typ: Any, where: str) -> None:
    """A value still holding the sample's CHANGE-ME: refused, whatever its key."""
    items = value if isinstance(value, list | tuple) else [value]
    if not any(isinstance(x, str) and PLACEHOLDER in x for x in items):
        return
    shown = "" if typ is Secret else f" = {value!r}"
    raise ConfigError(f"{where}{shown} still holds the sample configuration's "
                      f"placeholder {PLACEHOLDER}; set it for your cluster")


def _text(value: str, rule: TextRule | None, where: str) -> None:
    """The checks of ``required``, ``kafka_topic`` and ``http_url`` fields (settings.py)."""
    if rule is None:
        return
    if rule == "timezone" or rule == "timezone_or_off" and value != "":
        _time_zone(value, where)
        return
    if rule == "timezone_or_off":
        return
    if rule in ("name", "topic") and not value.strip():
        raise ConfigError(f"{where} = {value!r}; must not be empty: set it, or leave it out "
                          "for the default")
    if rule == "topic" and (not _TOPIC.fullmatch(value) or value in (".", "..")):
        raise ConfigError(f"{where} = {value!r}; not a Kafka topic name: 1 to 249 "
                          "characters of a-z, A-Z, 0-9, '.', '_' and '-' (and not . or ..)")
    if rule == "url_or_off" and value == "":
        return
    if rule in ("url", "url_or_off"):
        off = ', or "" for none' if rule == "url_or_off" else ""
        # Shown as `fleetwatch config` shows it: a password, a query, a webhook's path masked.
        shown = repr(_masked_url(value, where.endswith("webhook_url")))
        hint = encode_hint(value)
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018  # raises for a port that is no number or out of range
        except ValueError as exc:
            # The parser's reason may quote part of a password ("port ... 'w'").
            reason = hint or f" ({exc})"
            raise ConfigError(f"{where} = {shown}; not a valid URL{reason}{off}") from None
        # urlsplit drops spaces and tabs that urllib's requests then trip over.
        if (parts.scheme.lower() not in ("http", "https") or not parts.netloc
                or any(c.isspace() for c in value)):
            bare = _masked_url(value.strip(), where.endswith("webhook_url"))
            example = f"http://{bare}" if "://" not in bare and bare else "http://host:port"
            raise ConfigError(f"{where} = {shown}; must be a URL that starts with http:// "
                              f"or https:// (e.g. {example}){hint}{off}")
        if hint and "@" in parts.path + parts.query + parts.fragment:
            raise ConfigError(f"{where} = {shown}; not a valid URL{hint}{off}")


def _time_zone(value: str, where: str) -> None:
    """An IANA name zoneinfo knows; a fixed offset such as "+01:00" is refused: it has no
    summer time, so its months would be an hour off half the year."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{where} = {value!r}; not an IANA time zone name: give one such as "
                          "\"UTC\", \"Europe/Berlin\" or \"Asia/Tokyo\" (`timedatectl "
                          "list-timezones` lists them; install tzdata where it lists none)"
                          ) from None


def _number(value: Any, typ: type, where: str, from_env: bool,
            bounds: tuple[float | None, float | None, bool] | None) -> int | float:
    kind = "an integer" if typ is int else "a number"
    # A file's "8050" (a string) is a mistake worth naming; environment values are all text.
    if isinstance(value, bool) or (isinstance(value, str) and not from_env) or (
            typ is int and isinstance(value, float)):
        raise ConfigError(f"{where} = {value!r}; must be {kind}"
                          f"{' (without quotes)' if isinstance(value, str) else ''}")
    try:
        number = typ(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where} = {value!r}; must be {kind}") from None
    if not math.isfinite(number):
        raise ConfigError(f"{where} = {value!r}; must be a finite number")
    if bounds is None:
        bounds = (0, None, False)  # undeclared: at least not negative
    lo, hi, above = bounds
    if (lo is not None and (number <= lo if above else number < lo)) or (
            hi is not None and number > hi):
        raise ConfigError(f"{where} = {value!r}; must be {_describe(lo, hi, above)}")
    return number


def _describe(lo: float | None, hi: float | None, above: bool) -> str:
    if lo is not None and hi is not None:
        return f"above {lo:g} and at most {hi:g}" if above else f"between {lo:g} and {hi:g}"
    if lo is not None:
        return f"above {lo:g}" if above else f"at least {lo:g}"
    return f"at most {hi:g}"
