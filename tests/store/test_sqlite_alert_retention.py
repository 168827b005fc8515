"""The SQLite store's alert history is bounded by retention; an open alert is never dropped.

An alert that fired is kept as long as events (``rollup_retention_d``) after it resolved;
one that resolved while still pending (it notified no one) as long as raw samples
(``raw_retention_h``). Expired silences are kept as long as events after their end, an
acknowledgement as long once its alert is gone.
"""

from __future__ import annotations

from pathlib import Path

from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore

DAY = 86400.0
NOW = 1_800_000_000.0


def alert(aid: str, state: str, started: float, fired: float | None,
          resolved: float | None) -> Alert:
    return Alert(id=aid, rule="gpu_temp_high", severity="warning", cluster="c", rack="r",
                 node="n", device="gpu3", state=state,  # type: ignore[arg-type]
                 started_ts=started, updated_ts=resolved or started, value=90.0,
                 message="hot", fired_ts=fired, resolved_ts=resolved)


def test_resolved_alerts_silences_and_acks_past_retention_are_dropped_open_ones_kept(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", raw_retention_h=24, rollup_retention_d=30)
    old = NOW - 40 * DAY
    store.write_alerts([
        alert("open-firing", "firing", old, old, None),               # open for 40 days
        alert("open-pending", "pending", old, None, None),
        alert("fired-old", "resolved", old, old, NOW - 31 * DAY),
        alert("fired-recent", "resolved", old, old, NOW - 29 * DAY),  # resolved within 30 d
        alert("blip-old", "resolved", NOW - 2 * DAY, None, NOW - 2 * DAY + 5),
        alert("blip-recent", "resolved", NOW - 3600, None, NOW - 3595),
    ])
    store.write_silences([
        Silence("ended-old", (("node", "=", "n"),), old, NOW - 31 * DAY, "ops"),
        Silence("ended-recent", (("node", "=", "n"),), old, NOW - 29 * DAY, "ops"),
        Silence("in-force", (("node", "=", "n"),), old, NOW + DAY, "ops"),
    ])
    store.write_acks([Acknowledgement("open-firing", old, "ops"),
                      Acknowledgement("fired-old", old, "ops"),
                      Acknowledgement("fired-recent", old, "ops")])
    for _ in range(2):  # a second pass drops nothing more
        store.maintain(int(NOW * 1000))
        assert {a.id for a in store.alerts(("pending", "firing", "resolved"))} == {
            "open-firing", "open-pending", "fired-recent", "blip-recent"}
        assert [s.id for s in store.silences()] == ["ended-recent", "in-force"]
        assert sorted(a.alert_id for a in store.acks()) == ["fired-recent", "open-firing"]
    store.close()
