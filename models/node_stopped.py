"""``agent_stopped``: a node whose agent stopped cleanly (its last frame said so:
``frame.AGENT_STOPPED``, on SIGTERM, SIGINT, SIGHUP) and has sent nothing since for
``detectors.agent_stopped_grace_s``. A clean stop is not paged (a drain, a scale-down), but
one not followed by a new agent (a DaemonSet rollout whose new pod never starts, a unit
left stopped) leaves the node unwatched: a warning, to chat, not a page. It ends at the
node's next frame, or when the node is forgotten (``node_forget``)."""

from __future__ import annotations

import time

from fleetwatch.models import KEEP_FIRING, Finding

RULE = "agent_stopped"
ACTION = ("If the node was removed on purpose (drained, scaled down, retired), ignore this "
          "or silence it; else check its agent: the fleetwatch agent DaemonSet's pod on that "
          "node (kubectl get pods -o wide, kubectl describe pod: CrashLoopBackOff, "
          "ImagePullBackOff) or its systemd unit (systemctl status fleetwatch-agent)")


def agent_stopped(cluster: str, rack: str, node: str, at: float, stopped_ts: float,
                  gap: float, since: float) -> Finding:
    """The finding at ``at`` of a node whose agent stopped cleanly at ``stopped_ts`` (its
    last frame), ``gap`` seconds before; the alert starts at ``since`` (its grace over)."""
    return Finding(
        RULE, cluster, rack, node, None, at, gap,
        f"{node} has sent nothing since its agent stopped cleanly at {_utc(stopped_ts)} "
        f"({_span(gap)} ago); no agent has started on it since", "warning",
        # Ends with its first frame back, as node_silent.
        evidence={"stopped_s": round(gap, 1), "stopped_ts": stopped_ts, KEEP_FIRING: 0.0},
        action=ACTION, scope="node", since=since)


def _span(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
