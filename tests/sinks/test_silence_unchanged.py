"""A silence mutes open alerts that no longer change, from when it is added.

A latched XID alert keeps its ``updated_ts`` at the last sighting for up to
its hold time (an hour), and a silent node's alert changes little: a silence
added after that must still mute them (Alertmanager keeps it, re-sent), and
they are heard again when the silence ends (not paged twice where nothing changed).
Processor, notifier and store are real (SQLite); the sinks record what they are handed.
"""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Acknowledgement, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node


class Resends(AlertmanagerSink):
    """Alertmanager's sink, its posts recorded instead of sent: which alerts it would keep
    alive at each re-send."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9", resend_s=0.0)
        self.posts: list[list[str]] = []

    def _post(self, resolved) -> None:  # type: ignore[no-untyped-def]
        self.posts.append(sorted(self._firing) + [a.id for a in resolved])

    def resent(self) -> list[str]:
        self.tick()
        return self.posts[-1] if self._firing else []


# Not ``tests.recording_sink.Recording``: a record sink (not ``notify_only``, as the Kafka
# topic), handed every change, notified or not, which these tests count.
class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.notices: list[Notice] = []

    def send(self, changes: list[Notice]) -> None:
        self.notices.extend(changes)

    def close(self) -> None:
        pass


def test_a_latched_xid_alert_is_muted_by_a_later_silence_and_heard_when_it_ends(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    sink = Recorder()
    am = Resends()
    notifier = Notifier([sink, am], silences=store.silences, acks=store.acks,
                        background=False, reload_s=0)
    processor = Processor(store, [XidEvents()], notifier=notifier)
    t0 = time.time() - 600
    processor.process([node(t0, [busy(60), busy(60)], xids={1: (79,)})])
    (fired,) = [n for n in sink.notices if n.notify]
    assert (fired.alert.rule, fired.alert.state) == ("gpu_xid_critical", "firing")
    assert am.resent() == [fired.alert.id]            # kept alive at Alertmanager
    for k in range(1, 4):                             # latched: the alert does not change
        processor.process([node(t0 + 10 * k, [busy(60), busy(60)])])
    (open_alert,) = store.alerts()
    assert open_alert.updated_ts == t0 and len(sink.notices) == 1

    # Silenced at t0 + 40 s (after the alert's last change) for 10 minutes.
    store.write_silences([Silence("s1", (("node", "=", "n1"),), t0 + 40, t0 + 640, "ops")])
    processor.process([node(t0 + 50, [busy(60), busy(60)])])
    assert [(n.alert.id, n.muted_by, n.notify) for n in sink.notices[1:]] == [
        (fired.alert.id, "silence:s1", False)]
    assert am.resent() == [fired.alert.id]            # still re-sent: lapsing would page
    # "resolved"; the silence reaches Alertmanager mirrored (tests/sinks/test_am_silences.py)
    processor.process([node(t0 + 60, [busy(60), busy(60)])])
    assert len(sink.notices) == 2                     # said once

    # The silence ends while the XID is still latched: un-muted, re-sent to Alertmanager,
    # but no second page: the receivers were told of it before the silence, unchanged since
    # (as Alertmanager's notification log has it).
    store.write_silences([Silence("s1", (("node", "=", "n1"),), t0 + 40, t0 + 65, "ops")])
    processor.process([node(t0 + 70, [busy(60), busy(60)])])
    assert [(n.alert.id, n.alert.state, n.muted_by, n.notify, n.heard)
            for n in sink.notices[2:]] == [(fired.alert.id, "firing", "", False, True)]
    assert am.resent() == [fired.alert.id]
    store.close()


def test_an_acknowledgement_of_an_unchanging_alert_is_applied_without_waiting_for_a_change(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    sink = Recorder()
    notifier = Notifier([sink], silences=store.silences, acks=store.acks,
                        background=False, reload_s=0)
    processor = Processor(store, [XidEvents()], notifier=notifier)
    t0 = time.time() - 600
    processor.process([node(t0, [busy(60), busy(60)], xids={0: (79,)})])
    (alert,) = store.alerts()
    store.write_acks([Acknowledgement(alert.id, t0 + 5, "oncall", "draining")])
    processor.process([node(t0 + 10, [busy(60), busy(60)])])
    assert [(n.alert.id, n.muted_by) for n in sink.notices[1:]] == [(alert.id, "ack:oncall")]
