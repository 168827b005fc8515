"""The ``node_silent`` finding: a node that has sent nothing for longer than its limit
(judged by ``NodeSilence``, node_silence.py), and how the node's interval that sets the
limit is learned from the gaps between its frames."""

from __future__ import annotations

import time

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.models import KEEP_FIRING, Finding

# A gap longer than this many of a node's intervals is an outage, not a sample of its
# interval (a node that dies again soon after must be paged as soon as the first time);
# two such gaps in a row are an agent that now reports this slowly.
OUTAGE_INTERVALS = 3.0
# The host metric in which an agent's frames say its own interval (``agent.interval_s``):
# where it is, the node is judged on it, not on the gaps learned (older agents').
SAID_INTERVAL = "host_agent_interval_s"


def learned(interval: float, long: bool, gap: float) -> tuple[float, bool]:
    """A node's interval (NaN: none yet) learned from a ``gap`` between two of its frames,
    and whether that gap was an outage (``long``: the last one was): a moving average, but
    an outage (over ``OUTAGE_INTERVALS`` of it) is not learned, unless it is the second in
    a row (the agent now reports this slowly)."""
    iv = interval
    is_long = bool(iv == iv and gap > OUTAGE_INTERVALS * iv)
    if iv != iv or (is_long and long):
        interval = gap
    elif not is_long:
        interval = iv + 0.1 * (gap - iv)
    return interval, is_long and not long


def silence_limits(intervals: np.ndarray, c: DetectorsConfig) -> np.ndarray:
    """Each node's silence limit: ``silent_intervals`` of its interval, at least
    ``silent_min_s``. A node whose interval is not known yet (one frame, or none since
    this processor took it over) is given the fleet's usual one: agents share a
    configuration."""
    known = intervals[~np.isnan(intervals)]
    usual = float(np.median(known)) if len(known) else c.silent_min_s / c.silent_intervals
    return np.maximum(c.silent_min_s, c.silent_intervals * np.nan_to_num(intervals, nan=usual))


def silent_node(cluster: str, rack: str, node: str, at: float, gap: float, interval: float,
                skew: float, last_ts: float, since: float, fired_since: bool) -> Finding:
    """The finding at ``at`` of a node not heard of for ``gap`` seconds: it reports every
    ``interval`` seconds (NaN: not known), its clock was ``skew`` seconds off the fleet's
    when last heard of, its newest frame is stamped ``last_ts``; silent ``since``."""
    how = (f"it reports every {interval:.0f} s" if interval == interval else
           f"its last frame: {_utc(last_ts)}")
    if skew:  # its frames were not in step with the fleet's when last heard of
        how += (f"; its clock was {_offset(skew)}{' of' if skew > 0 else ''} "
                "the fleet's")
    evidence = {"silent_s": round(gap, 1), KEEP_FIRING: 0.0}
    if interval == interval:  # not known (none learned since a start): not said as 0
        evidence["interval_s"] = round(interval, 2)
    return Finding(
        "node_silent", cluster, rack, node, None, at, gap,
        f"{node} has sent nothing for {gap:.0f} s ({how})", "critical", 0.0, 0.0,
        # Ends with the node's first frame back, not alerts.keep_firing_s later
        # (that is for readings hovering at a limit): a node that sends is not
        # silent, and the fleet page would count it silent meanwhile.
        evidence,
        "Check the node: is it up, is its agent running (systemctl status "
        "fleetwatch-agent), can it reach the brokers?", "node",
        # Silent since its limit passed, as a processor watching then would have
        # said: one that starts later (a restart, a partition taken over) finds a
        # node down for hours, not one that went down at its detection.
        since=since,
        # One taken over silent fired then too (a processor watching then would have
        # paged it); one watched here fires as it is found, as always.
        fired_since=fired_since)


def _offset(seconds: float) -> str:
    """A clock's offset in words: "2 h ahead", "90 s behind"."""
    size = abs(seconds)
    amount = f"{size / 3600:.1f} h" if size >= 3600 else f"{size:.0f} s"
    return f"{amount} {'ahead' if seconds > 0 else 'behind'}"


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
