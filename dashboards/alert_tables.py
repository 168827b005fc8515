"""Alerts as the pages' tables: a row per alert with its evidence, since when, and why it
is not notified (``notes``) or what was (``record_notes``); capped in a storm.

Pure functions of records (and ``now`` for "5 min ago"), so the tables' text is tested
without a browser.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from dash import dcc, html

from fleetwatch import alert_view
from fleetwatch.dashboards.components import ago, job_href, node_href, notice, stamp
from fleetwatch.pipeline.links import alert_jobs
from fleetwatch.pipeline.sinks.notified import outcome_text
from fleetwatch.pipeline.store.base import (
    Acknowledgement,
    Alert,
    Notification,
    Silence,
    board_text,
    evidence_value,
    gpu_index,
)


def _device(a: Alert) -> str:
    index = gpu_index(a.device)
    return f"GPU {index}" if index is not None else a.device


# The resolved table shows this many (the newest); the rest are one command away.
RESOLVED_SHOWN = 50
# The active tables show this many (firing first, critical first, as they are sorted): in a
# storm a row per alert was 2 MB a refresh (1,050 alerts) and a browser pinned for minutes.
ACTIVE_SHOWN = 100
# The fleet page shows fewer, above its heatmap: the first screen of the wall says what is
# broken (critical first) and the heatmap stays in view; "all alerts" has the rest.
FLEET_SHOWN = 10


def left_out(alerts: Sequence[Alert]) -> str:
    """The line under a capped active table: how many more, of which rules, and where to
    read them all."""
    rules = Counter(a.rule for a in alerts).most_common()
    named = ", ".join(f"{n:,} {rule}" for rule, n in rules[:4])
    others = sum(n for _, n in rules[4:])
    return (f"and {len(alerts):,} more active: {named}"
            + (f", {others:,} of {len(rules) - 4} other rules" if others else "")
            + " · `fleetwatch alerts` lists them all, `fleetwatch alerts --node NODE` one "
            "node's; a node's page shows its own")


def evidence_text(a: Alert) -> str:
    """What the alert's value means: its evidence with the unit in each name, as
    ``fleetwatch alerts`` prints it (``temp_c=96, slowdown_c=87``; a time, such as an XID's
    ``xid_48_first_ts``, in UTC). The bare value only when the rule left no evidence: a
    throttle bitmask is not a temperature."""
    ident = board_text(a)
    if a.evidence:
        return ", ".join([f"{k}={evidence_value(k, v, '.4g')}" if isinstance(v, (int, float))
                          else f"{k}={v}"
                          for k, v in sorted(a.evidence.items())] + ([ident] if ident else []))
    return f"value={a.value:.4g}" + (f", {ident}" if ident else "")


def notes(alerts: Sequence[Alert], silences: Sequence[Silence],
          acks: Mapping[str, Acknowledgement], now_s: float) -> dict[str, str]:
    """Why each open alert is not notified ("acknowledged by ana", "silenced by ID",
    "inhibited by ID"), decided as ``fleetwatch alerts`` decides it (``alert_view.record``);
    alerts with nothing to say are left out."""
    open_alerts = [a for a in alerts if a.state != "resolved"]
    out = {}
    for a in open_alerts:
        r = alert_view.record(a, open_alerts, silences, acks, now_s)
        kind, _, who = str(r["muted"]).partition(":")
        said = {"silence": f"silenced by {who}", "inhibited": f"inhibited by {who}",
                "ack": f"acknowledged by {who}"}.get(kind, "")
        if r["acked_by"] and kind != "ack":
            said = "; ".join(x for x in (said, f"acknowledged by {r['acked_by']}") if x)
        if said:
            out[a.id] = said
    return out


def record_notes(alerts: Sequence[Alert], acks: Mapping[str, Acknowledgement],
                 notified: Mapping[str, Sequence[Notification]], now_s: float,
                 muted: Mapping[str, str] | None = None) -> dict[str, str]:
    """Per alert, what the store recorded: its acknowledgement (who, when, why) where
    ``muted`` (``notes``) does not already say it, and what was notified at each sink
    (``sink_records``), joined to ``muted``'s note."""
    out = dict(muted or {})
    for a in alerts:
        said = [out[a.id]] if a.id in out else []
        ack = acks.get(a.id)
        if ack is not None and not any("acknowledged" in x for x in said):
            said.append(f"acknowledged by {ack.by} at {stamp(ack.ts, now_s)} UTC"
                        + (f": {ack.comment}" if ack.comment else ""))
        elif ack is not None:
            said = [x.replace(f"acknowledged by {ack.by}", f"acknowledged by {ack.by} at "
                              f"{stamp(ack.ts, now_s)} UTC" + (f": {ack.comment}"
                                                              if ack.comment else ""))
                    for x in said]
        sent = sink_records(notified.get(a.id, ()), now_s)
        if sent:
            said.append("notified: " + sent)
        if said:
            out[a.id] = "; ".join(said)
    return out


# Per sink, at most this many records are shown: the first, then the last ones.
SINK_RECORDS_SHOWN = 4


def sink_records(records: Sequence[Notification], now_s: float) -> str:
    """One alert's notification records, per sink (``; `` between sinks), each with what
    muted it (the silence's id): repeats of one outcome in a row said once with their count,
    and of a long record the first and the last ``SINK_RECORDS_SHOWN - 1``, so a review sees
    the silence that muted it and what each sink got at the end."""
    by_sink: dict[str, list[tuple[Notification, int]]] = {}
    for n in sorted(records, key=lambda r: r.ts):
        runs = by_sink.setdefault(n.sink, [])
        if runs and (runs[-1][0].state, runs[-1][0].outcome, runs[-1][0].muted_by) == (
                n.state, n.outcome, n.muted_by):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((n, 1))
    parts = []
    for runs in by_sink.values():
        said = [f"{n.state} {outcome_text(n)}{f' ({n.muted_by})' if n.muted_by else ''} "
                f"{stamp(n.ts, now_s)}{f' ({k} times)' if k > 1 else ''}" for n, k in runs]
        if len(said) > SINK_RECORDS_SHOWN:
            kept = SINK_RECORDS_SHOWN - 1
            said = [said[0], f"… {len(said) - 1 - kept} more", *said[-kept:]]
        parts.append(", ".join(said))
    return "; ".join(parts)


def _state(a: Alert) -> str:
    """The state as people read it: one resolved without ever firing "pending cleared" (no
    page, nothing resolved: as ``fleetwatch timeline`` says it)."""
    return "pending cleared" if a.state == "resolved" and a.fired_ts is None else a.state


def _since(a: Alert, since: float, now_s: float, ended: alert_view.Ended) -> Any:
    if a.state == "resolved" and a.resolved_ts:
        # Since when it fired, and apart when it ended: the end alone read as its start.
        return [f"{stamp(since, now_s)} UTC", html.Div(
            f"ended {stamp(a.resolved_ts, now_s)} UTC · {ago(a.resolved_ts, now_s)}",
            className="ended-at panel-hint")]
    ended = alert_view.end_of(ended, a.cluster)
    if ended is None or a.state == "resolved":
        return f"{stamp(since, now_s)} UTC · {ago(since, now_s)}"
    return [f"{alert_view.utc(since)} UTC", html.Div(
        f"open when the data ended, {ago(ended, now_s)}; last evidence "
        f"{alert_view.hms(a.updated_ts, ended)}", className="ended-note panel-hint")]


def ended_notice(ended: float | None, now_s: float, notice_id: str, cluster: str = ""
                 ) -> html.Div | None:
    """The banner over open alerts that the data left open, if the data ended (of
    ``cluster``, named, where one of several ended)."""
    if ended is None:
        return None
    named = f"{cluster}: " if cluster else ""
    return notice(f"{named}No data since {alert_view.utc(ended)} UTC ({ago(ended, now_s)}): open "
                  "alerts are as the data left them (a replay store, `fleetwatch up` still "
                  "catching up, or the collectors or processor stopped)", notice_id)


def lag_notice(newest: float | None, now_s: float, notice_id: str, cluster: str = ""
               ) -> html.Div | None:
    """The amber banner over alerts that may not be current: no new sample for a minute
    (``alert_view.lagging``), the processor perhaps stopped; None while data arrive.
    ``cluster``: named, where one of several lags."""
    if newest is None or not alert_view.lagging(newest, now_s):
        return None
    text = alert_view.lag_text(newest, now_s)
    return html.Div(f"{cluster + ': ' if cluster else ''}{text[:1].upper() + text[1:]}",
                    id=notice_id, className="notice stale")


def alert_table(alerts: Sequence[Alert], now_s: float, table_id: str,
                empty: str = "No active alerts", link_nodes: bool = True,
                rng: str | None = None, muted: Mapping[str, str] | None = None,
                more: str = "", ended: alert_view.Ended = None,
                limit: int | None = None, clusters: bool | None = None) -> html.Div:
    """Alerts as a table, in the order given; the message links to the GPU on its node's
    page (over time range ``rng``; a rack's alert, of no node, has no link). One link per
    row and plain text elsewhere: a table of hundreds of rows stays light for the browser.
    ``muted``: alert id -> why it is not notified (``notes``); ``more``: a last line for the
    alerts left out; ``ended``: when the store's data ended (``alert_view.data_end``, or per
    cluster), if they did: an open alert is then open as they left it, not "now";
    ``limit``: at most this many rows, and a line for the rest (``left_out``);
    ``clusters``: whether a Cluster column is shown (None: where the alerts are of more
    than one cluster: node001 GPU 3 of two clusters are two rows that only the cluster
    tells apart)."""
    if clusters is None:
        clusters = len({a.cluster for a in alerts}) > 1
    if not alerts:
        return html.Div(empty, className="empty-note", id=f"{table_id}-empty")
    if limit is not None and len(alerts) > limit:
        more = "; ".join(x for x in (left_out(alerts[limit:]), more) if x)
        alerts = alerts[:limit]
    head = html.Tr([html.Th(h) for h in
                    ("State", "Severity", "Rule", *(("Cluster",) if clusters else ()), "Node",
                     "GPU", "Since", "Message", "Action", "Id")])
    rows = []
    muted = muted or {}
    for a in alerts:
        # As `fleetwatch alerts` and Alertmanager's startsAt: a firing alert since it fired.
        # A resolved one since it fired too (pending only: since it started), its end apart.
        since = a.fired_ts if a.state != "pending" and a.fired_ts is not None else a.started_ts
        note = muted.get(a.id, "")
        message: list = [a.message or a.rule]  # text: React escapes whatever an agent sent
        if link_nodes and a.node:  # a rack's alert has no node page to open
            message = [dcc.Link(message[0], href=node_href(a.node, gpu_index(a.device), rng,
                                                           a.cluster or None),
                                className="row-link node-link")]
        evidence: list = [evidence_text(a)]
        for job in alert_jobs(a):  # each job it names (a shared GPU's), on its job page
            evidence += [" · ", dcc.Link(f"job {job}", href=job_href(job, a.cluster or None),
                                         className="job-link")]
        message.append(html.Div(evidence, className="evidence panel-hint"))
        if a.resolution:  # how it ended, apart from what it fired with
            message.append(html.Div(f"resolution: {a.resolution}",
                                    className="resolution panel-hint"))
        rows.append(html.Tr(className=f"alert-row state-{a.state}", **{
            "data-node": a.node, "data-cluster": a.cluster, "data-device": a.device,
            "data-state": a.state,
            "data-id": a.id}, children=[
            html.Td([html.Span(_state(a), className=f"badge badge-{a.state}")]
                    + ([html.Div(note, className="muted-note panel-hint")] if note else []),
                    className="state"),
            html.Td(a.severity, className=f"sev sev-{a.severity}"),
            html.Td(a.rule, className="rule"),
            *([html.Td(a.cluster, className="cluster")] if clusters else []),
            html.Td(a.node, className="node"),
            html.Td(_device(a), className="device"),
            html.Td(_since(a, since, now_s, ended), className="since",
                    title=f"pending from {stamp(a.started_ts, now_s)} UTC" + (
                        f", fired {stamp(a.fired_ts, now_s)} UTC"
                        if a.fired_ts is not None else "")),
            html.Td(message, className="message"),
            html.Td(a.action, className="action"),  # what the rule suggests doing
            # What `fleetwatch ack` takes: shown whole, selectable in one go.
            html.Td(html.Code(a.id, style={"userSelect": "all"}), className="alert-id"),
        ]))
    if more:
        rows.append(html.Tr(html.Td(more, colSpan=10 if clusters else 9,
                                    className="panel-hint"),
                            className="more-row"))
    return html.Div(html.Table([html.Thead(head), html.Tbody(rows)], className="alerts"),
                    id=table_id, className="alerts-wrap")
