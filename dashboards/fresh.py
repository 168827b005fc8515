"""Whether what a page shows is stale, said in a banner on every page.

On a loaded machine a browser tab falls behind: its refresh answers slower than its
interval, or the collectors stop and the store's newest sample grows minutes old, while
the page still looks live (only its small "refreshed" stamp says otherwise). The shell
carries one check, ``fresh``, that reads the store's newest sample every refresh; the
page's watch (``live.js``, every second in the browser) sets it beside the time the
page's own refresh last answered, and shows the banner while the newest data on screen is
older than ``STALE_AFTER_S`` or a few refreshes, saying whether the collectors (the
newest sample, as of the check) or the page (its own refresh time) are behind.

The ages are measured in the browser from when each answer arrived, and in the server
between its "now" and the newest sample: never across the two clocks, so a browser whose
clock is off by minutes sees no false banner.

A store that holds no sample yet is not stale: the banner says the page waits for the
first data, in the plain notice colour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Input, Output, State, dcc

from fleetwatch.alert_view import LAG_S, newest_sample_ms
from fleetwatch.dashboards import timerange
from fleetwatch.pipeline.store.base import Store, StoreError

CHECK = "fresh"  # the shell's Store: the newest sample, as of a read
TICK = "fresh-tick"
# As `fleetwatch alerts` says "no new data": four intervals of the agent's default 15 s;
# one collector tick missed, or a slow pipeline, does not raise it; a collector or bus
# that stopped does within a minute.
STALE_AFTER_S = LAG_S
REFRESHES = 3  # and never under this many of the page's refreshes


def stale_after_ms(refresh_s: float) -> int:
    """How old the newest data on screen may be before the banner says so."""
    return int(max(STALE_AFTER_S, REFRESHES * refresh_s) * 1000)


def check(store: Store, now_s: float, refresh_s: float, known_ms: int | None = None,
          cluster: str | None = None) -> dict[str, Any]:
    """What the browser's watch needs: when the server read (``read_ms``, its "now"), the
    newest sample then (None: none stored; absent: the store did not answer), and the
    banner's threshold. ``known_ms``: the newest sample the last check found. ``cluster``:
    the one the page shows (``?cluster=``), whose sample it is: another cluster's live data
    do not hide that this one's stopped."""
    out: dict[str, Any] = {"read_ms": int(now_s * 1000), "stale_ms": stale_after_ms(refresh_s)}
    if cluster is not None:
        out["cluster"] = cluster
    try:
        out["newest_ms"] = newest_sample_ms(store, now_s, known_ms, cluster)
    except StoreError as exc:  # the page's own banner says so; here: not known
        out["error"] = str(exc)
    return out


def parts(refresh_s: float) -> list[dcc.Interval | dcc.Store]:
    """The shell's check: its own Interval, so that every page has it."""
    return [dcc.Interval(id=TICK, interval=int(refresh_s * 1000)), dcc.Store(id=CHECK)]


def register(app: dash.Dash, store: Store, clock: Callable[[], float],
             refresh_s: float) -> None:
    @app.callback(Output(CHECK, "data"), Input(TICK, "n_intervals"), State(CHECK, "data"),
                  State("url", "search"),
                  running=[(Output(TICK, "disabled"), True, False)])  # as fleet.py's
    def read(_n: int | None, last: dict[str, Any] | None, search: str | None
             ) -> dict[str, Any]:
        cluster = timerange.parse(search, "24h").cluster
        last = last if last and last.get("cluster") == cluster else {}  # another's: not known
        return check(store, clock(), refresh_s, last.get("newest_ms"), cluster)
