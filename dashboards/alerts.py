"""The alerts page (``/alerts?range=7d&cluster=c1``): active alerts, then those resolved in
the range (the last day by default); of every cluster, or of the one picked."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import dash
from dash import Input, Output, State, dcc, html
from plotly.utils import PlotlyJSONEncoder

from fleetwatch import alert_view
from fleetwatch.dashboards import alert_tables, components, live, node, timerange
from fleetwatch.dashboards.data import (
    in_cluster,
    read_alerts,
    read_mutes,
    read_record,
    sort_alerts,
)
from fleetwatch.pipeline.store.base import Alert, Store, StoreError

PATH = "/alerts"
DEFAULT_RANGE = "24h"
# How often the page asks the store again which clusters it holds (each refresh reads only
# the newest sample of each: one whose data stopped is named, alert or not).
CLUSTERS_REREAD_S = 300.0


def layout(refresh_s: float, search: str | None = None) -> html.Div:
    q = timerange.parse(search, DEFAULT_RANGE)
    return html.Div(className="page", children=[
        dcc.Interval(id="alerts-tick", interval=int(refresh_s * 1000)),
        dcc.Store(id="alerts-digest"),
        html.Div(className="page-head", children=[
            html.H1("Alerts"), components.cluster_picker("alerts", q.cluster),
            timerange.picker("alerts", q.range),
            html.Div(id="alerts-updated", className="updated")]),
        *live.parts("alerts"),  # the banner while the dashboard is away
        html.Div(id="alerts-notice"),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Active"), html.Span("firing first · active now, whatever the range",
                                             className="panel-hint")]),
            html.Div(id="alerts-active"),
        ]),
        html.Section(className="panel", children=[
            html.Div(className="panel-head", children=[
                html.H2("Resolved"), html.Span(timerange.label(q.range), id="alerts-resolved-hint",
                                               className="panel-hint")]),
            html.Div(id="alerts-resolved"),
        ]),
    ])


def of_cluster(active: Sequence[Alert], resolved: Sequence[Alert], cluster: str | None
               ) -> tuple[tuple[str, ...], Sequence[Alert], Sequence[Alert]]:
    """(every cluster the alerts are of, the active and the resolved of ``cluster``; None:
    of all)."""
    clusters = tuple(sorted({a.cluster for a in (*active, *resolved)}))
    if cluster is None:
        return clusters, active, resolved
    return (clusters, [a for a in active if in_cluster(cluster, a.cluster)],
            [a for a in resolved if in_cluster(cluster, a.cluster)])


def staleness(store: Store, active: Sequence[Alert], now: float, cluster: str | None,
              clusters: Iterable[str] = ()
              ) -> tuple[alert_view.Ended, float | None, dict[str, float | None]]:
    """(when the data ended, if an alert shown is open: ``alert_view.data_end``; the newest
    sample; per cluster, its newest, where each is said by name): of ``cluster`` where one
    is chosen, else of each cluster whose alerts are shown and each of ``clusters`` (the
    store's) whose data stopped, where they are several or one not the store's newest (a
    cluster stopped while another is live)."""
    newest = alert_view.newest_data(store, now, cluster)
    per = {} if cluster else alert_view.newest_of_clusters(store, now,
                                                           (a.cluster for a in active))
    if not cluster:
        per |= alert_view.stopped_clusters(store, now, set(clusters) - set(per))
    if not (len(per) > 1 or any(n != newest for n in per.values())):
        is_open = any(a.state != "resolved" for a in active)
        return (alert_view.ended_at(newest, now) if is_open else None), newest, {}
    open_of = {a.cluster for a in active if a.state != "resolved"}
    ends = {c: e for c, e in ((c, alert_view.ended_at(n, now)) for c, n in per.items())
            if c in open_of and e is not None}
    return ends, newest, per


def stale_notices(ended: alert_view.Ended, newest: float | None,
                  per: Mapping[str, float | None], now: float) -> Any:
    """The banners over the tables (``staleness``): the data ended, or lag; one a cluster
    named where ``per`` has them."""
    if not per:
        return (alert_tables.ended_notice(ended if not isinstance(ended, Mapping) else None,
                                          now, "alerts-ended")
                or alert_tables.lag_notice(newest, now, "alerts-lag"))
    ends = ended if isinstance(ended, Mapping) else {}
    said = [alert_tables.ended_notice(ends[c], now, f"alerts-ended-{i}", c) if c in ends
            else alert_tables.lag_notice(per[c], now, f"alerts-lag-{i}", c)
            for i, c in enumerate(sorted(per))]
    return [s for s in said if s is not None] or None


def tables(active: Sequence[Alert], resolved: Sequence[Alert], now: float, rng: str,
           muted: Mapping[str, str], ended: alert_view.Ended = None,
           clusters: bool | None = None,
           recorded: Mapping[str, str] | None = None) -> tuple[html.Div, html.Div]:
    """The two tables: the first ``ACTIVE_SHOWN`` active alerts (firing and critical first)
    and a line for the rest; the newest ``RESOLVED_SHOWN`` resolved ones,
    and a line that says how many more and where to read them. ``clusters``: whether they
    have a Cluster column (None: where their alerts are of several clusters). ``recorded``:
    per resolved alert, its acknowledgement and notifications (``record_notes``)."""
    # The range goes with a click to a node's page (its alerts are those of this range),
    # unless it is the node page's own default, which the address then leaves out.
    carry = rng if rng != node.DEFAULT_RANGE else None
    shown = resolved_shown(resolved)
    left = len(resolved) - len(shown)
    since = "31d" if rng == "month" else rng  # a duration, as `--since` takes it
    more = (f"and {left:,} more: `fleetwatch alerts --since {since}` lists them all"
            if left else "")
    return (alert_tables.alert_table(active, now, "active-alert-table", rng=carry, muted=muted,
                                     ended=ended, limit=alert_tables.ACTIVE_SHOWN,
                                     clusters=clusters),
            alert_tables.alert_table(sort_alerts(shown), now, "resolved-alert-table",
                                     rng=carry, more=more, clusters=clusters, muted=recorded,
                                     empty=f"Nothing resolved in the {timerange.label(rng)}"))


def resolved_shown(resolved: Sequence[Alert]) -> list[Alert]:
    """The newest ``RESOLVED_SHOWN`` resolved alerts: those the table shows."""
    newest = sorted(resolved, key=lambda a: -(a.resolved_ts or a.updated_ts))
    return newest[:alert_tables.RESOLVED_SHOWN]


def digest(*parts: Any) -> str:
    """A short fingerprint of what a callback would send, to send nothing when it is the
    same as last time (a table of hundreds of rows re-sent every few seconds is what the
    browser spends its time on)."""
    return hashlib.sha1(json.dumps(parts, cls=PlotlyJSONEncoder, sort_keys=True)
                        .encode()).hexdigest()


def unchanged(values: tuple[Any, ...], last: str | None) -> tuple[tuple[Any, ...], str]:
    """``values``, each replaced by ``dash.no_update`` when all are as ``last`` left them;
    and their fingerprint, for next time."""
    now = digest(*values)
    return (tuple(dash.no_update for _ in values) if now == last else values), now


def register(app: dash.Dash, store: Store, clock: Callable[[], float]) -> None:
    known: dict[str, Any] = {"at": -math.inf, "clusters": frozenset()}

    def store_clusters(now: float) -> frozenset[str]:
        """The store's clusters (``alert_view.store_clusters``), read again every
        ``CLUSTERS_REREAD_S``: a read of every series, not one to make each refresh."""
        if not now - CLUSTERS_REREAD_S < known["at"] <= now:
            known["clusters"] = frozenset(alert_view.store_clusters(store, now))
            known["at"] = now
        return known["clusters"]

    @app.callback(Output("alerts-active", "children"), Output("alerts-resolved", "children"),
                  Output("alerts-notice", "children"), Output("alerts-updated", "children"),
                  Output("alerts-resolved-hint", "children"), Output("alerts-digest", "data"),
                  Output(components.cluster_picker_id("alerts"), "options"),
                  Input("alerts-tick", "n_intervals"), Input("alerts-range", "value"),
                  Input(components.cluster_picker_id("alerts"), "value"),
                  State("alerts-digest", "data"),
                  running=[(Output("alerts-tick", "disabled"), True, False)])  # see fleet.py
    def refresh(_n: int | None, rng: str | None, cluster: str | None, last: str | None
                ) -> tuple[Any, ...]:
        now = clock()
        rng = rng or DEFAULT_RANGE
        start, _ = timerange.window(rng, now)
        try:
            seen, active, resolved = of_cluster(*read_alerts(store, now, now - start),
                                                cluster or None)
            muted = alert_tables.notes(active, *read_mutes(store, active, now), now)
            shown = resolved_shown(resolved)
            acks, notified = read_record(store, [*active[:alert_tables.ACTIVE_SHOWN], *shown],
                                         now)
            muted = alert_tables.record_notes(active, acks, notified, now, muted)
            recorded = alert_tables.record_notes(shown, acks, notified, now)
            ended, newest, per = staleness(store, active, now, cluster or None,
                                           () if cluster else store_clusters(now))
        except StoreError as exc:
            return (dash.no_update, dash.no_update,
                    components.notice(f"Store unavailable: {exc}"), components.failed_stamp(now),
                    dash.no_update, dash.no_update, dash.no_update)
        many = not cluster and len(seen) > 1
        shown, fingerprint = unchanged(
            tables(active, resolved, now, rng, muted, ended, clusters=many,
                   recorded=recorded), last)
        said = stale_notices(ended, newest, per, now)
        return (*shown, said,
                components.updated_stamp(now), timerange.label(rng), fingerprint,
                components.cluster_options(seen, cluster))

    components.link_range(app, "alerts-range", DEFAULT_RANGE,
                          components.cluster_picker_id("alerts"))
