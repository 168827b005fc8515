"""One backoff policy for every loop that waits on something to come back.

The processor waiting for its store or broker, the store's writer retrying a
request, the agent's spool retrying the broker: all take their delays from a
``Backoff`` (exponential, capped, with jitter so that a thousand agents do not
retry in step) and, where they retry a call in place, from ``retry``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Backoff:
    """Delays of ``first_s``, ``first_s * factor``, ... capped at ``max_s``.

    Each delay is reduced by up to ``jitter`` of itself at random. ``reset()``
    after a success starts again from ``first_s``.
    """

    def __init__(self, first_s: float = 0.5, max_s: float = 30.0, factor: float = 2.0,
                 jitter: float = 0.2, rng: random.Random | None = None) -> None:
        if not (0 < first_s <= max_s) or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("backoff needs 0 < first_s <= max_s, factor >= 1, 0 <= jitter < 1")
        self.first_s, self.max_s, self.factor, self.jitter = first_s, max_s, factor, jitter
        self._rng = rng or random.Random()
        self.failures = 0

    def next(self) -> float:
        """The delay before the next try; counts one more failure."""
        base = min(self.max_s, self.first_s * self.factor ** min(self.failures, 64))
        self.failures += 1
        return base * (1.0 - self.jitter * self._rng.random())

    def peek(self) -> float:
        """The un-jittered delay ``next()`` would start from, without counting a failure."""
        return min(self.max_s, self.first_s * self.factor ** min(self.failures, 64))

    def reset(self) -> None:
        self.failures = 0


def retry(call: Callable[[], T], *, retryable: tuple[type[BaseException], ...],
          attempts: int = 3, deadline_s: float | None = None, backoff: Backoff | None = None,
          delay_of: Callable[[BaseException], float | None] | None = None,
          on_retry: Callable[[BaseException, int, float], None] | None = None,
          sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> T:
    """``call()``, tried up to ``attempts`` times while it raises a ``retryable`` error.

    Stops early when the next delay would pass ``deadline_s`` (from now). The
    last error is raised as it is; any other error at once. ``delay_of(exc)``
    may name the delay the other side asked for (an HTTP ``Retry-After``);
    ``on_retry(exc, attempt, delay)`` is called before each wait.
    """
    backoff = backoff or Backoff(0.25, 4.0)
    backoff.reset()
    deadline = None if deadline_s is None else clock() + deadline_s
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except retryable as exc:
            asked = delay_of(exc) if delay_of is not None else None
            delay = asked if asked is not None else backoff.next()
            if attempt >= attempts or (deadline is not None and clock() + delay > deadline):
                raise
            if on_retry is not None:
                on_retry(exc, attempt, delay)
            sleep(delay)
