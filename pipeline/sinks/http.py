"""One JSON POST with the standard library, its failures told apart."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from fleetwatch.pipeline.sinks.base import SinkError, SinkRejected


def post_json(url: str, body: Any, timeout_s: float, what: str) -> None:
    """POST ``body``; ``SinkError`` for a connection failure, a timeout or 5xx/429,
    ``SinkRejected`` for any other 4xx (the receiver's text in the message)."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        text = exc.read(2000).decode("utf-8", "replace").strip()
        if exc.code >= 500 or exc.code == 429:
            raise SinkError(f"{what} {url} answered {exc.code}: {text}") from exc
        raise SinkRejected(f"{what} {url} refused the alerts ({exc.code}): {text}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise SinkError(f"{what} {url} unreachable: {exc}") from exc
