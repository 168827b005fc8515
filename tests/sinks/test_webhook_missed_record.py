"""The firing alerts the webhook adds by itself to a POST (those it missed: their changes
given up while it was down) are recorded ``sent`` once that POST goes through, so that
"who was told what" has them, and a processor taking over does not send them again."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.base import notification_id
from fleetwatch.pipeline.sinks.notified import settled, undelivered
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.wiring import _recorded
from tests.sinks.conftest import fast, tmp_store, until
from tests.sinks.test_sink_lanes import Hook, alert, hook

__all__ = ["hook"]  # the fixture, used by name


def test_firing_alerts_the_webhook_re_sends_by_itself_are_recorded_sent(
        hook: Hook, tmp_path: Path) -> None:
    """Given up while the webhook was down, then carried in the next POST that goes
    through: the record says ``sent`` for it, as the receiver has it now."""
    store = tmp_store(tmp_path)
    hook.code = 500
    notifier = Notifier([WebhookSink(hook.url, timeout_s=5)], attempts=1, backoff=fast,
                        retry_s=0.2, tick_s=3600, record=store.write_notifications,
                        recorded=_recorded(store))
    try:
        notifier.send([alert("missed")], now=1_000)
        assert until(lambda: notifier.stats.sinks["webhook"].failed >= 1)  # given up
        notifier.send([], now=1_001)
        hook.code = 200
        notifier.send([alert("new", ts=1_002)], now=1_002)  # its POST carries "missed"
        assert until(lambda: sum(len(hook.states(b)) for b in hook.bodies) >= 2)
        time.sleep(0.2)
        notifier.send([], now=1_003)  # the lane's reports recorded
    finally:
        notifier.close()
    # Alone (the outage's re-send) or with "new": either way the receiver has it once.
    assert sorted(s for b in hook.bodies for s in hook.states(b)) == [
        ("missed", "firing"), ("new", "firing")]
    got = {(n.alert_id.split("/")[-1], n.outcome) for n in settled(store.notifications(0, 1e10))}
    assert got == {("missed", "given_up"), ("missed", "sent"), ("new", "sent")}
    assert undelivered([alert("missed").id, alert("new", ts=1_002).id], "webhook",
                       store.notifications(0, 1e10)) == set()
    sent_ids = [a["notification_id"] for b in hook.bodies for g in b["groups"]
                for a in g["alerts"]]
    assert notification_id(Notice(alert("missed"))) in sent_ids
