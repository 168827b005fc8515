"""A notifying sink's group interval (the webhook's ``alerts.webhook_group_interval_s``):
changes that come close together are posted together.

A storm with one cause (a PDU trip silencing 30 nodes) reaches the processor over a few
seconds, in many small batches; posted one per batch, a receiver that pages per POST
(PagerDuty, Slack, a ticketing webhook) pages once per node or two. Alertmanager's
group_wait and group_interval are the model, without the wait: the first change after a
quiet spell is posted at once (a lone page is never delayed); the changes that come within
``interval_s`` of a post are held, in their order, and posted together when it ends. 0:
each batch its own post.

Pure: the lane (``delivery.Lane``) asks with its clock, and posts what it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.pipeline.silences import Notice


class Grouping:
    """Batches held for one post: ``offer`` each batch, post what it returns, and post
    ``take`` once ``due`` (or at close)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = max(0.0, interval_s)
        self._posted = float("-inf")   # when the last post went (the lane's clock)
        self._held: list[Notice] = []
        self.batches = 0               # batches held now

    @property
    def held(self) -> list[Notice]:
        """The changes held, oldest first (what the lane gives up if it is cut at close)."""
        return list(self._held)

    def offer(self, notices: Sequence[Notice], now: float) -> list[Notice] | None:
        """A batch: what to post now (what was held, then it), or None: held until ``due``."""
        self._held.extend(notices)
        self.batches += 1
        if now < self._posted + self.interval_s:
            return None
        return self.take(now)

    def due(self) -> float | None:
        """When what is held is to be posted; None: nothing held."""
        return self._posted + self.interval_s if self.batches else None

    def take(self, now: float) -> list[Notice]:
        """Everything held, in order, posted now: the next interval starts now."""
        out, self._held, self.batches = self._held, [], 0
        self._posted = now
        return out
