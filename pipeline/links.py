"""Where a person opens an alert: the dashboard page about its subject.

One function for every sink (Alertmanager's ``generatorURL``, the webhook's and the Kafka
topic's ``link``), so a notification tapped at 3 a.m. lands on the GPU, not the fleet:

* a GPU alert: its node's page in its cluster, the GPU brought forward
  (``/node/NODE?cluster=C&gpu=N``; node names repeat across clusters);
* a node alert: the node's page (``/node/NODE?cluster=C``);
* a job alert (its message names the job, as the job rules write it): ``/job/ID?cluster=C``;
* a rack alert: the fleet page of its cluster (``/?cluster=C``), the dashboard having
  no page of its own for a rack.

The addresses are those the dashboard's own links use (``dashboards.components``).
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode

from fleetwatch.pipeline.store.base import Alert, gpu_index

# How the job rules name the job in a message: "GPU 3 on n1 (job 42) lags ...",
# "job 42 on n1: ...".
_NAMED_JOB = (re.compile(r"\(job ([^\s()]+)\)"), re.compile(r"^job ([^\s()]+) "))


def alert_job(a: Alert) -> str | None:
    """The job an alert's message names, as the job rules write it; None if it names none."""
    for pattern in _NAMED_JOB:
        m = pattern.search(a.message)
        if m:
            return m.group(1)
    return None


def alert_path(a: Alert) -> str:
    """The dashboard's path and query for this alert's subject (see the module)."""
    cluster = [("cluster", a.cluster)] if a.cluster else []
    if a.device.startswith("rack:") or not a.node:
        return "/" + ("?" + urlencode(cluster) if cluster else "")
    job = alert_job(a) if a.rule.startswith("job_") else None
    if job:
        return f"/job/{quote(job, safe='')}" + ("?" + urlencode(cluster) if cluster else "")
    gpu = gpu_index(a.device)
    params = cluster + ([("gpu", str(gpu))] if gpu is not None else [])
    return f"/node/{quote(a.node, safe='')}" + ("?" + urlencode(params) if params else "")


def alert_url(base: str, a: Alert) -> str:
    """``base`` (the dashboard's address as users reach it, ``alerts.dashboard_url``) joined
    with ``alert_path``; "" when there is no base: no link rather than a relative one that
    opens nothing from a chat or a pager."""
    return base.rstrip("/") + alert_path(a) if base else ""
