"""The notifying sink the tests hand a ``Notifier``: it keeps what it is handed."""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.base import SinkError


class Recording:
    """A notifying sink (``notify_only``, as a webhook or Alertmanager is) that keeps every
    change it is handed, in order, in ``sent``; with ``fail``, every send fails as a
    receiver that is down does."""

    notify_only = True

    def __init__(self, name: str = "recording", fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.sent: list[Notice] = []

    def send(self, changes: Sequence[Notice]) -> None:
        if self.fail:
            raise SinkError("receiver down")
        self.sent.extend(changes)

    def close(self) -> None:
        pass
