"""The address a person opens: ``http://HOST:PORT/`` with an IPv6 host in brackets."""

from __future__ import annotations


def http_url(host: str, port: int, path: str = "/") -> str:
    """``http_url("::1", 8050)`` is ``http://[::1]:8050/`` (RFC 3986: an IPv6 literal in a URL
    is bracketed; ``http://::1:8050/`` opens nothing)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"
