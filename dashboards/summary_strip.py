"""The fleet page's summary strip: GPUs reporting, the hottest GPU, alerts firing and
pending, the data's age; and what it says when there is no fresh data or no store.

Pure functions of the fleet's view (and ``now`` for "5 min ago"), tested without a browser.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dash import html

from fleetwatch.alert_view import lagging
from fleetwatch.dashboards.components import ago, clock
from fleetwatch.dashboards.data import TEMP, FleetView, node_label
from fleetwatch.dashboards.figures import NO_DATA, fmt
from fleetwatch.pipeline.store.base import gpu_index


def _tile(tile_id: str, label: str, value: str, detail: str = "", tone: str = "") -> html.Div:
    return html.Div(className=f"tile {tone}".strip(), id=tile_id, children=[
        html.Div(label, className="tile-label"),
        html.Div(value, className="tile-value"),
        html.Div(detail, className="tile-detail"),
    ])


def no_data_text(view: FleetView, now_s: float) -> str:
    """The one sentence a fleet page with no fresh GPU shows, everywhere on it."""
    if view.last_ms is None:
        return NO_DATA
    return (f"No fresh data: no GPU has reported since {clock(view.last_ms / 1000)} UTC "
            f"({ago(view.last_ms / 1000, now_s)}): the collectors stopped, or the processor "
            "is behind (as `fleetwatch up` is while it catches up after a start). "
            "Alerts below are as the last data left them.")


def summary(view: FleetView, now_s: float) -> list[html.Div]:
    """GPUs reporting, the hottest GPU, alerts firing and pending, data age.

    With no fresh data the alert tiles say "as of" the last data instead of
    "all clear" or a bare count: one truth per screen.
    """
    hot = view.hottest
    nodes = view.nodes  # (cluster, node): node001 of two clusters is two nodes
    firing, pending = view.count("firing"), view.count("pending")
    critical = sum(1 for a in view.alerts if a.state == "firing" and a.severity == "critical")
    hot_alert = hot is not None and any(
        (a.cluster, a.node) == hot.place and gpu_index(a.device) == hot.gpu
        for a in view.alerts)
    newest, ahead = view.as_of(now_s)
    if not view.cells:
        last = newest
        stale = f"as of {clock(last / 1000)} UTC, no data since" if last else "no data yet"
        return [
            _tile("summary-reporting", "GPUs reporting", "0",
                  f"none since {clock(last / 1000)} UTC" if last else "none yet", "warn"),
            _tile("summary-hottest", "Hottest GPU", "n/a", "no fresh data"),
            _tile("summary-firing", "Alerts firing", str(firing) if last or firing else "n/a",
                  stale, "bad" if firing else ""),
            _tile("summary-pending", "Alerts pending", str(pending) if last or pending else "n/a",
                  stale, "warn" if pending else ""),
            _tile("summary-asof", "Data as of", clock(last / 1000) if last else "n/a",
                  f"UTC · {ago(last / 1000, now_s)}" if last else "no samples", "warn"),
        ]
    # No new sample for a minute (a processor stopped: its counts stop moving) is said as
    # fast as a silent node: every count "as of" its time, the age tile warn-coloured.
    stopped = newest is not None and lagging(newest / 1000, now_s)
    as_of = f"as of {clock(newest / 1000)} UTC · " if stopped and newest else ""
    return [
        _tile("summary-reporting", "GPUs reporting", str(len(view.reporting)),
              f"{as_of}on {nodes} node{'s' if nodes != 1 else ''}"
              + (f" · {len(view.silent)} node{'s' * (len(view.silent) != 1)} silent"
                 if view.silent else ""), "warn" if view.silent or stopped else ""),
        _tile("summary-hottest", "Hottest GPU", fmt(TEMP, hot.temp_c) if hot else "n/a",
              as_of + (f"{node_label(hot.cluster, hot.node, view.many_clusters)} · GPU "
                       f"{hot.gpu}" if hot else ""), "bad" if hot_alert else ""),
        _tile("summary-firing", "Alerts firing", str(firing),
              as_of + (f"{critical} critical" if firing else "all clear"),
              "bad" if firing else "warn" if stopped else "good"),
        _tile("summary-pending", "Alerts pending", str(pending),
              as_of or "waiting out their for-time", "warn" if pending or stopped else ""),
        _tile("summary-asof", "Data as of", clock(newest / 1000) if newest else "n/a",
              (f"UTC · {ago(newest / 1000, now_s)}" if newest else "no samples")
              + (" · no new data: is the processor running?" if stopped else "")
              + (f" · {ahead} GPU{'s' if ahead != 1 else ''} stamped after now: a node's "
                 "clock runs ahead" if ahead else ""), "warn" if ahead or stopped else ""),
    ]


def last_read(view: FleetView, now_s: float) -> dict[str, Any]:
    """What the fleet page keeps of a read that worked (in a ``dcc.Store``), to say how old
    its data are when the store stops answering."""
    return {"read_s": now_s, "newest_ms": view.as_of(now_s)[0],
            "firing": view.count("firing"), "pending": view.count("pending")}


def unavailable_summary(last: Mapping[str, Any] | None, now_s: float) -> list[html.Div]:
    """The summary while the store does not answer: nothing counted as if it were now (no
    "all clear"), the counts of the last read that worked and the data's age, growing."""
    gone = "store not answering"
    at = (f"at the last read, {clock(last['read_s'])} UTC" if last else "no read yet")
    newest = (last or {}).get("newest_ms")
    return [
        _tile("summary-reporting", "GPUs reporting", "n/a", f"{gone}: {at}", "warn"),
        _tile("summary-hottest", "Hottest GPU", "n/a", gone),
        _tile("summary-firing", "Alerts firing", "n/a",
              f"{last['firing']} {at}" if last else gone, "warn"),
        _tile("summary-pending", "Alerts pending", "n/a",
              f"{last['pending']} {at}" if last else gone, "warn"),
        _tile("summary-asof", "Data as of", clock(newest / 1000) if newest else "n/a",
              f"UTC · {ago(newest / 1000, now_s)} · {gone}" if newest else gone, "warn"),
    ]
