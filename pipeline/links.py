"""Where a person opens an alert: the dashboard page about its subject.

One function for every sink (Alertmanager's ``generatorURL``, the webhook's and the Kafka
topic's ``link``), so a notification tapped at 3 a.m. lands on the GPU, not the fleet:

* a GPU alert: its node's page in its cluster, the GPU brought forward
  (``/node/NODE?cluster=C&gpu=N``; node names repeat across clusters);
* a node alert: the node's page (``/node/NODE?cluster=C``);
* a job alert: ``/job/ID?cluster=C``, the job its detector named (``Alert.jobs``), never
  read from the message, whose words a job's name or a rewording could fool; where it is
  about several (a shared GPU's jobs), the node's page, whose "Jobs now" links each (a
  single link cannot, and a comma-joined id is no job). An alert stored by a release
  before ``jobs`` has its jobs read from its message as those releases wrote it (one read
  back from VictoriaMetrics, which keeps no text, names none: its node's page);
* a rack alert: the fleet page of its cluster (``/?cluster=C``), the dashboard having
  no page of its own for a rack.

The addresses are those the dashboard's own links use (``dashboards.components``).
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode

from fleetwatch.pipeline.store.base import Alert, gpu_index


def _named_jobs(message: str, node: str) -> str | None:
    """The job text right after the node, as the job rules write it: "GPU 3 on n1 (job 42)
    lags ...", "job 42 on n1: ...", "job 42 (and 43, 44) hung on n1: ...". Anchored on
    the alert's own node, so a node named "evil (job 999)" names no job of its own."""
    after = re.escape(f" on {node}")
    m = re.search(after + r" \(job (.+?)\)(?::|\s|$)", message)
    if m:
        return m.group(1)
    m = re.match(r"job (.+?)(?: \(and (.+?)\))?(?: hung)?" + after + ":", message)
    if m:
        return m.group(1) + ("," + m.group(2).replace(", ", ",") if m.group(2) else "")
    return None


def alert_jobs(a: Alert) -> tuple[str, ...]:
    """The jobs an alert is about (``Alert.jobs``); for an alert without them (an older
    release's), those its message names after its node, as the job rules and GPU alerts
    wrote them (a shared GPU's jobs comma-joined, each apart here); () if none."""
    if a.jobs:
        return a.jobs
    if not a.node:
        return ()
    named = _named_jobs(a.message, a.node)
    return tuple(j for j in named.split(",") if j) if named else ()


def alert_job(a: Alert) -> str | None:
    """The one job an alert names; None where it names none or several (``alert_jobs``)."""
    jobs = alert_jobs(a)
    return jobs[0] if len(jobs) == 1 else None


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
