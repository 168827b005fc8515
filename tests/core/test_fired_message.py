"""An alert keeps the message it fired with (``fired_message``) beside its latest one, and
`fleetwatch timeline` prints each transition with the message as it was then: a postmortem
read "sent nothing for 60 s (its last frame: 21:31:55)" on a firing line stamped 21:26:25
before, the latest message of an alert under its old transition."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.models import Finding
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.timeline import Records, Scope, build
from tests.core.test_alerts import frame, step


def silent(ts: float, gap: float) -> Finding:
    return Finding("node_silent", "c", "r1", "n9", None, ts, gap,
                   f"n9 has sent nothing for {gap:.0f} s", "critical", scope="node")


def test_an_alert_keeps_the_message_it_fired_with() -> None:
    book = AlertBook(requirements={"node_silent": ()}, refresh_s=0.0)
    fired = [a for a in step(book, [frame(100, [60])], [silent(100, 60)])
             if a.state == "firing"]
    assert fired and fired[0].fired_message == "n9 has sent nothing for 60 s"
    later = step(book, [frame(400, [60])], [silent(400, 360)])
    assert later[-1].message == "n9 has sent nothing for 360 s"
    assert later[-1].fired_message == "n9 has sent nothing for 60 s"


def _alert(**more: object) -> Alert:
    return Alert("node_silent/c/n9/host/1", "node_silent", "critical", "c", "r1", "n9", "host",
                 "resolved", 100.0, 700.0, 360.0, "n9 has sent nothing for 360 s",
                 fired_ts=100.0, resolved_ts=700.0, **more)  # type: ignore[arg-type]


def test_the_timeline_prints_a_firing_with_its_message_then(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fw.db")
    store.write_alerts([_alert(fired_message="n9 has sent nothing for 60 s")])
    records = Records(store.alerts(("resolved",)), [], [], [], [], [])
    store.close()
    lines = [(e.what, e.detail) for e in build(records, Scope(0, 1e12))]
    assert ("firing", "n9 has sent nothing for 60 s") in lines, lines


def test_an_older_stores_alert_says_its_message_is_the_latest() -> None:
    lines = [(e.what, e.detail) for e in build(Records([_alert()], [], [], [], [], []),
                                               Scope(0, 1e12))]
    assert ("firing", "n9 has sent nothing for 360 s (its latest message)") in lines, lines
