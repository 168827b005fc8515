"""The time-range picker and deep links: the URL carries the page, node, GPU and range.

``/energy?range=7d``, ``/utilization?range=24h&cluster=c1&node=node-001&gpu=3``: a link
opens the same view for anyone. Ranges end now (a rolling window), except
``month``: the calendar month so far (UTC; the energy page's in energy.timezone). Pure
functions of strings and clocks, so links are tested without a browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode

from dash import dcc, html

from fleetwatch.report_month import month_of

# (key, label, seconds; 0: the calendar month so far)
RANGES: tuple[tuple[str, str, int], ...] = (
    ("1h", "1 h", 3600), ("6h", "6 h", 6 * 3600), ("24h", "24 h", 86400),
    ("7d", "7 d", 7 * 86400), ("30d", "30 d", 30 * 86400), ("month", "This month", 0))
_SECONDS = {k: s for k, _, s in RANGES}


@dataclass(frozen=True)
class Query:
    """What a page's URL asks for; unknown or malformed parts fall back to defaults."""

    range: str
    node: str | None = None
    gpu: int | None = None
    cluster: str | None = None  # one cluster's view (node names repeat across clusters)

    def search(self) -> str:
        params: dict[str, str] = {"range": self.range}
        if self.cluster:
            params["cluster"] = self.cluster
        if self.node:
            params["node"] = self.node
        if self.node and self.gpu is not None:
            params["gpu"] = str(self.gpu)
        return "?" + urlencode(params)


def page_search(rng: str, gpu: int | None = None, cluster: str | None = None) -> str:
    """The query of a page whose node is in its path: ``/node/NAME?cluster=c&range=6h&gpu=3``."""
    params = (({"cluster": cluster} if cluster else {}) | {"range": rng}
              | ({"gpu": str(gpu)} if gpu is not None else {}))
    return "?" + urlencode(params)


def new_search(search: str | None, default: str, rng: str,
               cluster: str | None = None) -> bool:
    """Whether range ``rng`` or ``cluster`` differs from what the address ``search``
    already says.

    A page's picker callback also runs when the page is drawn: without this, every
    page opened would rewrite its own address (and add a step to the history)."""
    q = parse(search, default)
    return q.range != rng or q.cluster != (cluster or None)


def label(key: str) -> str:
    """``key`` as a caption says it: "last 6 h", "this month"."""
    for k, text, seconds in RANGES:
        if k == key:
            return f"last {text}" if seconds else text.lower()
    return key


def parse(search: str | None, default: str) -> Query:
    q = parse_qs((search or "").lstrip("?"))
    rng = (q.get("range") or [default])[0]
    node = (q.get("node") or [None])[0] or None
    gpu_text = (q.get("gpu") or [""])[0]
    gpu = int(gpu_text) if gpu_text.isdigit() and len(gpu_text) < 4 else None
    cluster = (q.get("cluster") or [None])[0] or None
    return Query(rng if rng in _SECONDS else default, node, gpu, cluster)


def window(key: str, now_s: float, tz: str = "UTC") -> tuple[float, float]:
    """(start, end) in epoch seconds of range ``key`` ending at ``now_s``; ``month``: from
    the start of the month of ``tz``'s calendar (the energy page's energy.timezone)."""
    seconds = _SECONDS.get(key, 86400)
    if seconds:
        return now_s - seconds, now_s
    return float(month_of(now_s, tz)[0]), now_s


def picker(page: str, value: str) -> html.Div:
    """The range buttons of ``page``; its id is ``{page}-range``."""
    return html.Div(className="range-picker", children=[
        dcc.RadioItems(id=f"{page}-range", value=value, inline=True,
                       options=[{"label": label, "value": key} for key, label, _ in RANGES],
                       className="range-items", inputClassName="range-input",
                       labelClassName="range-label")])
