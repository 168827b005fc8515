"""Every Interval that a refresh callback disables while its request is out (``running=``)
has a watch that re-arms it: Dash never ends a request that got no answer (live.py)."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.dashboards import create_app, live
from fleetwatch.pipeline.store.sqlite import SqliteStore


def _prop(output: str) -> str:
    return output.split("@")[0]


def test_every_tick_disabled_while_running_is_re_armed_by_a_watch(tmp_path: Path) -> None:
    app = create_app(SqliteStore(tmp_path / "fleet.db"))
    held = {prop for cb in app._callback_list if cb.get("running")
            for prop, value in cb["running"]["running"].items() if value is True}
    watched = {_prop(out) for cb in app._callback_list
               if (cb.get("clientside_function") or {}).get("function_name") == "watch"
               for out in cb["output"].strip(".").split("...")}
    pages = ("fleet", "alerts", "node", "util", "energy", "job", "facility")
    # Each page's tick, and the shell's freshness check (fresh.py), which every watch re-arms.
    assert held == {f"{p}-tick.disabled" for p in pages} | {"fresh-tick.disabled"}
    assert held <= watched
    # The watches' own components exist on their pages (Dash checks them against this).
    ids = {c.id for c in app.validation_layout._traverse() if getattr(c, "id", None)}
    for page in pages:
        assert {f"{page}-watch", f"{page}-offline", f"{page}-stale"} <= ids
    assert {"fresh-tick", "fresh"} <= ids


def test_the_fetch_watch_is_in_the_page_before_the_renderer(tmp_path: Path) -> None:
    index = create_app(SqliteStore(tmp_path / "fleet.db")).index_string
    assert live.script() in index
    assert index.index("dash_clientside.fleetwatch") < index.index("{%renderer%}")
