"""The alert tables: light for the browser, in the CLI's order, saying what the CLI says."""

from __future__ import annotations

import dataclasses

import dash
from dash import dcc

from fleetwatch import alert_view
from fleetwatch.dashboards import alert_tables, components, data
from fleetwatch.dashboards import alerts as alerts_page
from fleetwatch.pipeline.store.base import Acknowledgement, Silence
from tests.dashboards.fakes import NOW, FakeStore, alert
from tests.dashboards.test_data import text_of


def _walk(component: object):
    if isinstance(component, list | tuple):
        for c in component:
            yield from _walk(c)
        return
    if component is None or isinstance(component, str | int | float):
        return
    yield component
    yield from _walk(getattr(component, "children", None))


def rows(table) -> list:
    return [r for r in _walk(table) if getattr(r, "className", "").startswith("alert-row")]


def test_each_row_has_one_link_the_rule_and_the_id_ack_takes() -> None:
    a = alert("node-a", 3, "firing", rule="gpu_temp_critical")
    (row,) = rows(alert_tables.alert_table([a], NOW, "t"))
    links = [c for c in _walk(row) if isinstance(c, dcc.Link)]
    assert [link.href for link in links] == ["/node/node-a?cluster=sim&gpu=3"]
    assert "gpu_temp_critical" in text_of(row) and a.id in text_of(row)


def test_value_is_shown_with_its_evidence_not_as_a_bare_number() -> None:
    throttle = dataclasses.replace(alert("node-a", 3, value=96.0, rule="gpu_throttle"),
                                   evidence={"throttle_reasons": 96, "clock_ratio": 0.42})
    hot = dataclasses.replace(alert("node-a", 3, value=89.0, rule="gpu_temp_critical"),
                              evidence={"temp_c": 89.0, "slowdown_c": 87.0})
    bare = alert("node-b", 1, value=0.8734, rule="vm_rule")  # no evidence (VictoriaMetrics)
    text = text_of(alert_tables.alert_table([throttle, hot, bare], NOW, "t"))
    assert "clock_ratio=0.42, throttle_reasons=96" in text
    assert "slowdown_c=87, temp_c=89" in text
    assert "value=0.8734" in text and "96.0" not in text


def test_acked_silenced_and_inhibited_are_said_as_fleetwatch_alerts_says_them() -> None:
    acked = alert("node-a", 1, rule="gpu_temp_high")
    silenced = alert("node-b", 2, rule="gpu_temp_high")
    plain = alert("node-c", 0, rule="gpu_temp_high")
    sil = Silence("s1lence", (("node", "=", "node-b"),), NOW - 60, NOW + 3600, "ana")
    acks = {acked.id: Acknowledgement(acked.id, NOW - 30, "bob")}
    store = FakeStore(alert_rows=[acked, silenced, plain])
    store.silences = lambda at=None: [sil]  # type: ignore[attr-defined]
    store.acks = lambda: list(acks.values())  # type: ignore[attr-defined]
    active = data.sort_alerts(store.alerts())
    muted = alert_tables.notes(active, *data.read_mutes(store, active, NOW), NOW)
    assert muted == {acked.id: "acknowledged by bob", silenced.id: "silenced by s1lence"}
    cli = "\n".join(alert_view.lines(list(active), [sil], acks, NOW))
    for said in muted.values():
        assert said in cli  # the same words as the terminal
    by_node = {r.to_plotly_json()["props"]["data-node"]: text_of(r)
               for r in rows(alert_tables.alert_table(active, NOW, "t", muted=muted))}
    assert "acknowledged by bob" in by_node["node-a"]
    assert "silenced by s1lence" in by_node["node-b"]
    assert "by" not in by_node["node-c"].replace(plain.id, "")


def test_a_store_without_silences_or_acks_says_nothing() -> None:
    a = alert("node-a", 1)
    assert alert_tables.notes([a], *data.read_mutes(FakeStore(alert_rows=[a]), [a], NOW),
                              NOW) == {}


def test_order_is_the_cli_order_and_stays_put_as_alerts_update() -> None:
    old_warn = alert("node-a", 0, severity="warning", started_ago_s=900)
    new_crit = alert("node-b", 1, severity="critical", started_ago_s=60)
    old_crit = alert("node-c", 2, severity="critical", started_ago_s=600)
    pending = alert("node-d", 3, "pending", severity="critical", started_ago_s=3000)
    first = data.sort_alerts([old_warn, new_crit, old_crit, pending])
    assert first == tuple(alert_view.ordered([old_warn, new_crit, old_crit, pending]))
    assert [a.node for a in first] == ["node-c", "node-b", "node-a", "node-d"]
    # Each evaluation of a firing alert moves its updated_ts: the rows must not move.
    touched = [dataclasses.replace(a, updated_ts=NOW + i) for i, a in enumerate(first[::-1])]
    assert [a.id for a in data.sort_alerts(touched)] == [a.id for a in first]


def test_resolved_are_capped_with_a_note_of_how_many_more() -> None:
    resolved = [alert(f"node-{i:03d}", 0, "resolved", started_ago_s=100 + i)
                for i in range(244)]
    resolved = [dataclasses.replace(a, resolved_ts=NOW - i) for i, a in enumerate(resolved)]
    _, table = alerts_page.tables([], resolved, NOW, "24h", {})
    shown = rows(table)
    assert len(shown) == alert_tables.RESOLVED_SHOWN
    # The newest ones are kept.
    assert {r.to_plotly_json()["props"]["data-node"] for r in shown} == {
        f"node-{i:03d}" for i in range(alert_tables.RESOLVED_SHOWN)}
    assert "and 194 more: `fleetwatch alerts --since 24h`" in text_of(table)


def test_an_unchanged_table_is_not_sent_again() -> None:
    a = alert("node-a", 1)
    values = alerts_page.tables([a], [], NOW, "24h", {})
    sent, fingerprint = alerts_page.unchanged(values, None)
    assert sent == values
    again, same = alerts_page.unchanged(alerts_page.tables([a], [], NOW, "24h", {}),
                                        fingerprint)
    assert again == (dash.no_update, dash.no_update) and same == fingerprint
    acked = alerts_page.tables([a], [], NOW, "24h", {a.id: "acknowledged by bob"})
    changed, other = alerts_page.unchanged(acked, fingerprint)
    assert changed == acked and other != fingerprint


def test_a_firing_alert_is_since_it_fired_as_alertmanager_says_not_since_pending() -> None:
    a = dataclasses.replace(alert("node-a", 3, "firing", rule="gpu_temp_high"),
                            started_ts=NOW - 600, fired_ts=NOW - 540)
    (cell,) = [c for c in _walk(alert_tables.alert_table([a], NOW, "t"))
               if getattr(c, "className", "") == "since"]
    assert cell.children == f"{components.clock(NOW - 540)} UTC · 9 min ago"
    assert cell.title == (f"pending from {components.clock(NOW - 600)} UTC, "
                          f"fired {components.clock(NOW - 540)} UTC")


def test_a_resolved_alert_shows_when_it_started_and_apart_when_it_ended() -> None:
    # A straggler pending 01:00:15, fired 01:02, resolved 02:50:30 was listed "02:50:30":
    # read as when it started.
    a = dataclasses.replace(alert("node-a", 5, "resolved", rule="gpu_straggler"),
                            started_ts=NOW - 7000, fired_ts=NOW - 6900, resolved_ts=NOW - 300)
    (cell,) = [c for c in _walk(alert_tables.alert_table([a], NOW, "t"))
               if getattr(c, "className", "") == "since"]
    assert text_of(cell).startswith(f"{components.clock(NOW - 6900)} UTC")
    assert f"ended {components.clock(NOW - 300)} UTC" in text_of(cell)
    assert "5 min ago" in text_of(cell)
    pending_only = dataclasses.replace(a, fired_ts=None)
    (cell,) = [c for c in _walk(alert_tables.alert_table([pending_only], NOW, "t"))
               if getattr(c, "className", "") == "since"]
    assert text_of(cell).startswith(f"{components.clock(NOW - 7000)} UTC")


def test_a_pending_alert_that_cleared_reads_pending_cleared_not_resolved() -> None:
    """It never fired: nothing resolved and nobody was told (as ``fleetwatch timeline``)."""
    cleared = dataclasses.replace(alert("node-a", 2, "resolved", rule="gpu_power_low_vs_peers"),
                                  fired_ts=None)
    fired = alert("node-b", 1, "resolved")
    by_node = {getattr(r, "data-node"): text_of(r)
               for r in rows(alert_tables.alert_table([cleared, fired], NOW, "t"))}
    assert by_node["node-a"].startswith("pending cleared")
    assert by_node["node-b"].startswith("resolved")
