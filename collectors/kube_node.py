"""A node's rack from its Kubernetes node label, for an agent running as a DaemonSet pod.

Rack cooling is judged per rack (``models/rack.py``): many GPUs of one rack's
nodes warming together is one cooling alert. On bare metal the rack is set per
node (``FLEETWATCH_NODE_RACK`` in the node's environment file). A DaemonSet has
one pod template for every node, and the downward API gives a pod its node's
name but not the node's labels, so with ``node.rack_label`` set (e.g.
``fleetwatch.io/rack``, put on each node with ``kubectl label node gpu-017
fleetwatch.io/rack=r12``) the agent reads its node object once at start, as
any in-cluster client does: ``GET /api/v1/nodes/NAME`` on
``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`` with the pod's
service-account token, verified against the service account's CA. The
DaemonSet's ClusterRole grants ``get`` on nodes and nothing else.

A node without the label, or an API that cannot be reached, keeps
``node.rack`` and says so once: the agent must sample whatever the API does.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_S = 5.0


class KubeApiError(RuntimeError):
    """The node object could not be read (not in a pod, refused, unreachable)."""


def node_labels(node: str, env: Mapping[str, str] | None = None,
                service_account: Path | None = None,
                timeout_s: float = TIMEOUT_S) -> dict[str, str]:
    """The labels of node ``node``, read with this pod's service account."""
    env = os.environ if env is None else env
    service_account = SERVICE_ACCOUNT if service_account is None else service_account
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    if not host:
        raise KubeApiError("not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST)")
    port = env.get("KUBERNETES_SERVICE_PORT", "443")
    try:
        token = (service_account / "token").read_text("utf-8").strip()
        context = ssl.create_default_context(cafile=str(service_account / "ca.crt"))
    except (OSError, ssl.SSLError) as exc:
        raise KubeApiError(f"no service account in {service_account} ({exc}): mount its "
                           "token (automountServiceAccountToken)") from exc
    where = f"[{host}]" if ":" in host else host  # an IPv6 service address
    url = f"https://{where}:{port}/api/v1/nodes/{urllib.parse.quote(node, safe='')}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}",
                                                   "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as answer:
            body = json.load(answer)
    except urllib.error.HTTPError as exc:
        why = {401: "the token was refused", 403: "the service account may not get nodes "
               "(the ClusterRole in deploy/kubernetes grants it)",
               404: f"no node named {node!r} (node.node must be spec.nodeName)"}
        raise KubeApiError(f"GET {url}: HTTP {exc.code}: {why.get(exc.code, exc.reason)}"
                           ) from exc
    except (OSError, ValueError) as exc:  # URLError, TLS, timeouts, a body that is no JSON
        raise KubeApiError(f"GET {url}: {exc}") from exc
    labels = (body.get("metadata") or {}).get("labels") or {} if isinstance(body, dict) else {}
    return {str(k): str(v) for k, v in labels.items()}


def rack_from_label(node: str, label: str, fallback: str, **kw: object) -> str:
    """The value of ``label`` on this node, else ``fallback`` (said once, in the log)."""
    try:
        labels = node_labels(node, **kw)  # type: ignore[arg-type]
    except KubeApiError as exc:
        log.warning("rack of %s: cannot read its node label %s (%s); using node.rack = %r",
                    node, label, exc, fallback)
        return fallback
    rack = labels.get(label, "").strip()
    if not rack:
        log.warning("rack of %s: the node has no label %s; using node.rack = %r (label it: "
                    "kubectl label node %s %s=RACK)", node, label, fallback, node, label)
        return fallback
    log.info("rack of %s: %s (node label %s)", node, rack, label)
    return rack
