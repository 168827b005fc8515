"""The nodes of partitions taken over that have sent nothing yet, and when the log may
name them (``ownership``). Right after an assignment nothing has been polled yet, and
naming every node then reads as "these nodes are silent": the line waits ``grace_s``
(two of the fleet's usual intervals, at least ``MIN_GRACE_S``) on the processor's clock
or the frames'.

Pure: the clock is the caller's, and so is the log."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline.stored_nodes import NodeKey

# (cluster, rack, node, last frame's time, whether that frame said its agent stopped
# cleanly) of a node this member now owns that has sent it nothing yet.
Expected = tuple[str, str, str, float, bool]

# The wait before nodes of partitions taken over that have sent nothing are named in the
# log: two of the fleet's usual intervals (learned from its frames), at least this, and
# this many seconds while no interval is known yet.
MIN_GRACE_S = 5.0
UNKNOWN_GRACE_S = 30.0


class QuietNodes:
    """Nodes taken over that have sent nothing yet, and the fleet's usual interval."""

    def __init__(self) -> None:
        # Named in the log once the grace is over (``line``): when, on the processor's
        # clock and on the frames'.
        self._quiet: dict[NodeKey, Expected] = {}
        self._quiet_due: tuple[float, float] = (0.0, 0.0)
        self._newest_ts = 0.0        # the newest frame's time seen
        self._last_ts: dict[NodeKey, float] = {}
        self._usual_s: float | None = None  # the fleet's usual interval (moving average)

    def learn(self, key: NodeKey, ts: float) -> None:
        """A frame of ``key`` at ``ts``: the fleet's usual interval learns from it."""
        last = self._last_ts.get(key)
        self._last_ts[key] = ts if last is None else max(last, ts)
        self._newest_ts = max(self._newest_ts, ts)
        if last is not None and 0.0 < ts - last < 3600.0:
            gap = ts - last
            self._usual_s = gap if self._usual_s is None else \
                self._usual_s + 0.05 * (gap - self._usual_s)

    def drop(self, key: NodeKey) -> None:
        """Forget a node (no longer this member's, or gone for good)."""
        self._quiet.pop(key, None)
        self._last_ts.pop(key, None)

    @property
    def grace_s(self) -> float:
        """How long nodes taken over may send nothing before the log names them."""
        if self._usual_s is None:
            return UNKNOWN_GRACE_S
        return max(MIN_GRACE_S, 2.0 * self._usual_s)

    def line(self, frames: Sequence[Frame], expected: list[Expected],
             monotonic: Callable[[], float], clusters: Collection[str]) -> str | None:
        """Keep the newly ``expected`` nodes; forget those that sent a frame since; the
        log line that names the rest once the grace is over on either clock (then they
        are named no more), else None."""
        if expected:
            if not self._quiet:
                grace = self.grace_s
                self._quiet_due = (monotonic() + grace, self._newest_ts + grace)
            # A node whose agent stopped cleanly is not awaited: it left on purpose.
            self._quiet.update({(e[0], e[2]): e for e in expected if not e[4]})
        if not self._quiet:
            return None
        for f in frames:
            self._quiet.pop((f.cluster, f.node), None)
        due_wall, due_ts = self._quiet_due
        if self._quiet and (monotonic() >= due_wall or self._newest_ts >= due_ts):
            line = expected_line(sorted(self._quiet.values(), key=lambda e: e[:3]), clusters)
            self._quiet = {}
            return line
        return None


def expected_line(expected: Sequence[Expected], clusters: Collection[str]) -> str:
    """The log line for nodes of partitions taken over that have sent nothing yet, named
    cluster/node. Those of clusters this member has no frame from are told apart: with a
    topic per cluster, their names land in its partitions by chance, and their own
    cluster's processors judge them (``NodeSilence`` pages only nodes of its clusters)."""
    ours = sorted(f"{e[0]}/{e[2]}" for e in expected if e[0] in clusters)
    others = sorted({e[0] for e in expected if e[0] not in clusters})
    line = ""
    if ours:
        line = (f"{len(ours)} node(s) of the partitions taken over have sent nothing yet: "
                + ", ".join(ours[:10]) + (", ..." if len(ours) > 10 else ""))
    if others:
        rest = len(expected) - len(ours)
        line += ("; " if line else "") + (
            f"{rest} node(s) the store holds of cluster(s) {', '.join(others[:10])}"
            f"{', ...' if len(others) > 10 else ''} map to the partitions taken over but "
            "no frame of those clusters has come here yet: each is judged silent only once "
            "a frame of its cluster comes (else its cluster's own processors judge it)")
    return line
