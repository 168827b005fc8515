"""An alert's identity and the evidence every reader of alerts shares.

One alert per (rule, cluster, node, device) at a time (``pipeline.alerts``): the device is
``gpuN`` for a GPU finding, ``host`` for a node finding and ``rack:NAME`` for a rack
finding (whose node is ""). The lifecycle, the sinks, the silences and inhibition name
alerts by these keys and scopes.
"""

from __future__ import annotations

from fleetwatch.models import REVISION, Finding
from fleetwatch.models.room import ROOM
from fleetwatch.pipeline.store.base import Alert, gpu_device

Key = tuple[str, str, str, str]  # (rule, cluster, node, device)
Subject = tuple[str, str, str]   # (cluster, node, device)


def revision(alert: Alert) -> float | None:
    """The alert's ``REVISION`` evidence, None when its detector keeps none."""
    return alert.evidence.get(REVISION) if alert.evidence else None


def finding_device(finding: Finding) -> str:
    """The device part of a finding's alert identity."""
    if finding.scope == "rack":
        return f"rack:{finding.rack}"
    if finding.scope == "node" or finding.gpu is None:
        return "host"
    return gpu_device(finding.gpu)


def alert_key(alert: Alert) -> Key:
    return (alert.rule, alert.cluster, alert.node, alert.device)


# A finding about a cluster's whole room (``models.room``): a rack alert whose rack is
# every rack of its cluster.
ROOM_DEVICE = f"rack:{ROOM}"


def scope_of(alert: Alert) -> str:
    if alert.device.startswith("rack:"):
        return "rack"
    return "node" if alert.device == "host" else "gpu"
