"""Secrets in the configuration: how ``fleetwatch config`` shows them (masked: a
``Secret``, a URL's password, query and a webhook's path), and a masked copy refused when
it comes back as a file to load. Pure; the loader (``fleetwatch.config``) calls it."""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any

from fleetwatch.config_fields import ConfigError, Secret
from fleetwatch.settings import Config

# How ``fleetwatch config`` shows a secret; refused where a secret is read (``refuse_masked``).
MASK = "***"


def refuse_masked(value: Any, typ: Any, key: str, where: str) -> None:
    """A secret still as ``fleetwatch config`` printed it (``public_view``): refused, not
    deployed as the password. Only the mask's own forms: a secret that is exactly ``***``,
    a URL's ``user:***@``, ``?***`` or (a webhook's) ``/***``; a real ``a***b`` is kept."""
    if not isinstance(value, str):
        return
    if typ is Secret:
        masked = value == MASK
    elif key.endswith("url"):
        masked = ismasked_url(value)
    else:
        return
    if masked:
        raise ConfigError(f"{where} is the masked value printed by fleetwatch config ({MASK}); "
                          "put the real secret here, or in fleetwatch.env (its FLEETWATCH_ "
                          "variable), which overrides the file")


def ismasked_url(url: str) -> bool:
    import urllib.parse

    if f":{MASK}@" in url:
        return True
    try:
        u = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return False
    return u.query == MASK or u.path == f"/{MASK}"


# ``user:password@`` after ``//`` (or at the start of a URL without a scheme), up to the
# last ``@``: a password may hold any character, the URL's own ``/`` ``@`` ``:`` included.
_USERINFO = re.compile(r"(?P<user>//[^\s:/@]*):(?P<password>\S*)@")
_USERINFO_NO_SCHEME = re.compile(r"^(?P<user>[^\s:/@]*):(?P<password>\S*)@")
_RESERVED = re.compile(r"[:/?#\[\]@]|%(?![0-9A-Fa-f]{2})")


def userinfo(url: str) -> re.Match[str] | None:
    return (_USERINFO if "://" in url else _USERINFO_NO_SCHEME).search(url)


def encode_hint(url: str) -> str:
    """A hint for a password typed with a character a URL reserves, else ""."""
    m = userinfo(url)
    if m is None or not _RESERVED.search(m["password"]):
        return ""
    return ("; its password holds a character a URL reserves: percent-encode the password "
            "(@ as %40, : as %3A, / as %2F, ? as %3F, # as %23, % as %25)")


def public_view(config: Config) -> dict[str, dict[str, Any]]:
    """The config as plain data with secrets masked, for ``fleetwatch config``: secret
    settings, and the secrets URLs carry (a password in ``user:pw@``, a query string, and
    the path of a webhook, which is often its own secret: Slack's ``/services/T../B../X..``)."""
    out: dict[str, dict[str, Any]] = {}
    for section in dataclasses.fields(config):
        values = dataclasses.asdict(getattr(config, section.name))
        out[section.name] = {k: (MASK if isinstance(v, Secret) and v else
                                 masked_url(v, k == "webhook_url") if isinstance(v, str) and
                                 k.endswith("url") else v)
                             for k, v in values.items()}
    for cluster in out["carbon"].get("clusters", {}).values():
        cluster.pop("clusters", None)  # a cluster's table holds no clusters: loading refuses one
    return out


def masked_url(url: str, path_is_secret: bool) -> str:
    """``url`` with its password (and query, and with ``path_is_secret`` its path) as ***.

    The password is found by text, not by parsing (``_USERINFO``), so that one the parser
    cannot split off (an unencoded ``/`` or ``@``, a URL that does not parse) is masked
    too. A URL that parses with a numeric port and no ``@`` in its host part has none.
    """
    import urllib.parse

    masked = url
    m = userinfo(url)
    if m is not None and hasuserinfo(url):
        masked = f"{url[:m.start()]}{m['user']}:{MASK}@{url[m.end():]}"
    if "://" not in masked:
        return masked
    try:
        u = urllib.parse.urlsplit(masked)
    except ValueError:
        return masked
    path = f"/{MASK}" if path_is_secret and u.path not in ("", "/") else u.path
    # urlsplit strips the spaces around a URL, which a message about them must show.
    lead, trail = masked[:len(masked) - len(masked.lstrip())], masked[len(masked.rstrip()):]
    return lead + urllib.parse.urlunsplit(
        (u.scheme, u.netloc, path, MASK if u.query else "", "")) + trail


def hasuserinfo(url: str) -> bool:
    """Whether ``url`` may carry a password: an ``@`` in its host part, or a host part
    the parser rejects (a password's ``/`` ends it early); not ``host:8080/a@b``."""
    import urllib.parse

    if "://" not in url:
        return True
    try:
        u = urllib.parse.urlsplit(url)
        u.port  # noqa: B018
    except ValueError:
        return True
    return "@" in u.netloc


def inline_secrets(raw: dict[str, dict[str, tuple[Any, str]]]) -> list[str]:
    """The secrets a file's settings hold themselves (``section.key``), not by a ``*_file``
    naming another file: a file every user can read gives them away."""
    hints = typing.get_type_hints(Config)
    found = []
    for section, values in raw.items():
        if section not in hints:
            continue
        fields = typing.get_type_hints(hints[section])
        for key, (value, _) in values.items():
            if fields.get(key) is Secret and value:
                found.append(f"{section}.{key}")
    return sorted(found)
