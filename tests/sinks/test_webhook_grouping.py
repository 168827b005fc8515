"""The webhook's group interval: a storm that reaches the processor over a few seconds in
many small batches is one or two POSTs, not one per batch; a lone change is posted at once;
each change keeps its notification_id, its order and its record; what is held is posted at
stop."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.base import notification_id
from fleetwatch.pipeline.sinks.grouping import Grouping
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.sinks.conftest import Receiver, fast, tmp_store, until


def alert(node: int, state: str = "firing") -> Alert:
    ts = 1_000.0 + node
    name = f"node-{node:03d}"
    return Alert(f"node_silent/c1/{name}/host/{ts:g}", "node_silent", "critical", "c1",
                 f"rack-{node // 8:02d}", name, "host", state, ts - 30, ts, 1.0,
                 f"{name} silent", fired_ts=ts,
                 resolved_ts=ts + 60 if state == "resolved" else None)


def notices(*nodes: int, state: str = "firing") -> list[Notice]:
    return [Notice(alert(n, state), "") for n in nodes]


# -- the pure grouping -----------------------------------------------------------------
def test_the_first_batch_goes_at_once_and_the_next_ones_wait_for_the_interval() -> None:
    g = Grouping(5.0)
    first = notices(0)
    assert g.offer(first, now=100.0) == first and g.due() is None
    assert g.offer(notices(1, 2), now=100.5) is None
    assert g.offer(notices(3), now=104.9) is None
    assert g.due() == 105.0 and g.batches == 2
    assert [n.alert.node for n in g.take(105.0)] == ["node-001", "node-002", "node-003"]
    assert g.due() is None and g.held == []
    # Within the interval of that post: held again; after a quiet spell: at once.
    assert g.offer(notices(4), now=106.0) is None
    assert [n.alert.node for n in g.take(110.0)] == ["node-004"]
    assert [n.alert.node for n in g.offer(notices(5), now=200.0) or []] == ["node-005"]


def test_a_zero_interval_posts_every_batch() -> None:
    g = Grouping(0.0)
    for t in range(5):
        batch = notices(t)
        assert g.offer(batch, now=100.0) == batch
    assert g.due() is None


def test_a_firing_and_its_resolve_in_one_window_stay_in_order() -> None:
    g = Grouping(5.0)
    g.offer(notices(9), now=0.0)
    g.offer(notices(1), now=1.0)
    g.offer(notices(1, state="resolved"), now=2.0)
    assert [n.alert.state for n in g.take(5.0)] == ["firing", "resolved"]


# -- through the webhook's lane ---------------------------------------------------------
def recorded_sent(notifier: Notifier, store: SqliteStore) -> set[str]:
    """The alerts recorded ``sent`` once a send records the lane's outcomes so far. The lane
    reports a post once it has the receiver's answer, after the receiver has its body: a
    test that has seen the body waits for the report through this."""
    notifier.send([], now=2_100.0)
    return {n.alert_id for n in store.notifications(0, 1e10) if n.outcome == "sent"}


def test_a_storm_over_many_batches_is_two_posts_each_change_kept(receiver: Receiver,
                                                                 tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    # An interval well past the storm's ~0.7 s: a loaded machine may take seconds to hand
    # the batches over, and one past the interval's end would be a third post.
    sink = WebhookSink(receiver.url, group_s=5.0)
    notifier = Notifier([sink], attempts=1, backoff=fast, record=store.write_notifications)
    try:
        # 30 nodes silent in 15 batches of 2 over ~0.7 s, as a PDU trip reaches the processor
        for b in range(15):
            notifier.send([alert(2 * b), alert(2 * b + 1)], now=2_000.0 + b)
            time.sleep(0.05)
        assert until(lambda: len(receiver.bodies) == 2, 30)
        time.sleep(2.0)  # nothing more comes
        assert len(receiver.bodies) == 2
        first, rest = receiver.bodies
        assert [len(g["alerts"]) for g in first["groups"]] == [1, 1]  # type: ignore[index]
        assert rest["summary"][0]["text"] == (  # type: ignore[index]
            "node_silent (critical) firing: 28 alerts on 28 nodes in 4 racks of c1")
        took = [a for body in receiver.bodies for g in body["groups"]  # type: ignore[index]
                for a in g["alerts"]]
        assert sorted(a["id"] for a in took) == sorted(alert(n).id for n in range(30))
        assert {a["notification_id"] for a in took} == {
            notification_id(Notice(alert(n), "")) for n in range(30)}
        assert until(lambda: recorded_sent(notifier, store) == {alert(n).id for n in range(30)})
    finally:
        notifier.close()


def test_a_lone_change_after_a_quiet_spell_is_posted_at_once(receiver: Receiver) -> None:
    notifier = Notifier([WebhookSink(receiver.url, group_s=30.0)], attempts=1, backoff=fast)
    try:
        notifier.send([alert(1)], now=2_000.0)
        assert until(lambda: len(receiver.bodies) == 1, 3)
    finally:
        notifier.close()


def test_a_firing_and_its_resolve_held_together_arrive_as_its_resolve(
        receiver: Receiver) -> None:
    notifier = Notifier([WebhookSink(receiver.url, group_s=1.0)], attempts=1, backoff=fast)
    try:
        notifier.send([alert(9)], now=2_000.0)  # posted at once: the interval starts
        notifier.send([alert(1)], now=2_001.0)
        notifier.send([alert(1, "resolved")], now=2_002.0)
        assert until(lambda: len(receiver.bodies) == 2, 5)
        [[change]] = [[a for g in receiver.bodies[1]["groups"]  # type: ignore[index]
                       for a in g["alerts"]]]
        assert change["state"] == "resolved" and change["firing_notified"] is False
    finally:
        notifier.close()


def test_what_is_held_is_posted_at_stop(receiver: Receiver) -> None:
    notifier = Notifier([WebhookSink(receiver.url, group_s=60.0)], attempts=1, backoff=fast)
    notifier.send([alert(0)], now=2_000.0)
    assert until(lambda: len(receiver.bodies) == 1, 3)
    notifier.send([alert(1), alert(2)], now=2_001.0)
    time.sleep(0.3)
    assert len(receiver.bodies) == 1  # held for the interval
    assert notifier.close(5.0) == []
    assert len(receiver.bodies) == 2
    assert sorted(a["id"] for g in receiver.bodies[1]["groups"]  # type: ignore[index]
                  for a in g["alerts"]) == sorted([alert(1).id, alert(2).id])


def test_a_held_post_that_fails_is_held_through_the_outage_and_delivered(
        tmp_path: Path) -> None:
    receiver = Receiver(answers=[200, 503])  # the group's post finds the webhook down
    store = tmp_store(tmp_path)
    notifier = Notifier([WebhookSink(receiver.url, group_s=0.5)], attempts=1, backoff=fast,
                        record=store.write_notifications)
    try:
        notifier.send([alert(0)], now=2_000.0)
        notifier.send([alert(1)], now=2_001.0)
        notifier.send([alert(2)], now=2_002.0)
        assert until(lambda: len(receiver.bodies) == 2, 10)
        assert receiver.requests == 3
        assert sorted(a["id"] for g in receiver.bodies[1]["groups"]  # type: ignore[index]
                      for a in g["alerts"]) == [alert(1).id, alert(2).id]
        assert until(lambda: recorded_sent(notifier, store) == {alert(n).id for n in range(3)})
    finally:
        notifier.close()
        receiver.close()
