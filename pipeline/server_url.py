"""A server's URL taken apart: where requests go, what messages name, the credentials it carried.

One rule for every HTTP client of the pipeline (the store's writer and queries, the
Alertmanager and webhook sinks): a ``user:password@`` in a URL is taken out of it and
sent as HTTP basic auth, and messages name the URL as ``fleetwatch config`` shows it
(the password masked; for a webhook, whose path is often its secret, the path too).
"""

from __future__ import annotations

import base64
import urllib.parse
from dataclasses import dataclass, replace

# The masking ``fleetwatch config`` shows: one rule for what of a URL is secret.
from fleetwatch.config import ConfigError
from fleetwatch.config import _masked_url as masked_url

__all__ = ["ServerURL", "masked_url"]


@dataclass(frozen=True)
class ServerURL:
    """Where requests go (``base``: no ``user:password@``), what messages name (``shown``:
    the password masked) and the basic-auth credentials the URL carried."""

    base: str
    shown: str
    basic: str = ""  # "user:password", or empty
    secret_path: bool = False  # messages show its path as ``***`` (a webhook's)

    @classmethod
    def of(cls, url: str, path_is_secret: bool = False) -> ServerURL:
        """``url`` as it is (a trailing ``/`` kept: a webhook's path is the receiver's),
        its credentials taken out; ``path_is_secret``: messages show its path as ``***``."""
        shown = masked_url(url, path_is_secret)
        split = urllib.parse.urlsplit(url)
        if "@" not in split.netloc:
            return cls(url, shown, secret_path=path_is_secret)
        userinfo, _, host = split.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        basic = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
        return cls(urllib.parse.urlunsplit(split._replace(netloc=host)), shown, basic,
                   path_is_secret)

    @classmethod
    def parse(cls, url: str, token: str = "") -> ServerURL:
        """The store's URL (``store.url``, a trailing ``/`` dropped). Raises ``ConfigError``
        when it carries credentials and ``token`` is another one: one ``Authorization``
        header cannot carry both."""
        server = cls.of(url.rstrip("/"))
        if server.basic and token and token != server.basic:
            raise ConfigError(
                f"store.url = {server.shown!r} carries a user and password (sent as HTTP "
                "basic auth) and store.token is set to another credential: one request "
                "carries only one; keep the user:password in store.url and empty "
                "store.token, or take them out of store.url")
        return server

    def join(self, path: str) -> ServerURL:
        """This server with ``path`` appended (to where requests go and to what is shown)."""
        return replace(self, base=self.base + path, shown=self.shown + path)

    def basic_header(self) -> dict[str, str]:
        if not self.basic:
            return {}
        return {"Authorization": "Basic " + base64.b64encode(self.basic.encode()).decode()}
