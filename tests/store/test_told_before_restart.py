"""A processor restarted within a silence rebuilds what receivers were told from the
store's record of notifications: when the silence ends, the alert paged before it and
unchanged since is not paged again, on every backend (SQLite, VictoriaMetrics, InfluxDB)."""

from __future__ import annotations

import time

from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.takeover import told_before
from fleetwatch.pipeline.store.base import Alert, Silence
from fleetwatch.wiring import _recorded
from tests.recording_sink import Recording
from tests.store.backends import Backend
from tests.store.helpers import cluster_name


def test_a_silence_ending_after_a_restart_pages_nothing_unchanged(
        backend: Backend) -> None:
    store, tag = backend.store, cluster_name()
    t0 = float(int(time.time())) - 300  # whole seconds (VictoriaMetrics keeps ~12 digits)
    alert = Alert(f"node_silent/{tag}/n1/host/1", "node_silent", "critical", tag, "r1", "n1",
                  "host", "firing", t0 - 60, t0, 60.0, "n1 sent nothing", fired_ts=t0)
    read = _recorded(store)
    assert read is not None
    silences: list[Silence] = []
    first = Recording()
    before = Notifier([first], silences=lambda: list(silences), background=False,
                      reload_s=0.0, record=store.write_notifications,  # type: ignore[attr-defined]
                      recorded=read)
    before.send([alert], now=t0)                            # paged
    silences.append(Silence("s1", (parse_matcher(f"cluster={tag}"),), t0 + 10, t0 + 3600,
                            "oncall"))
    before.send([], now=t0 + 20)                            # muted by the silence
    before.close()
    assert [n.alert.id for n in first.sent if n.notify] == [alert.id]
    # What was written becomes readable (VictoriaMetrics: after a flush, a moment later).
    deadline = time.monotonic() + 15
    while not told_before(alert, ["recording"], read([alert.id])) \
            and time.monotonic() < deadline:
        backend.settle()
        time.sleep(0.5)

    after = Recording()                                     # restarted within the silence
    restarted = Notifier([after], silences=lambda: list(silences), background=False,
                         reload_s=0.0, record=store.write_notifications,  # type: ignore[attr-defined]
                         recorded=read)
    restarted.adopt([alert])
    restarted.send([], now=t0 + 30)
    silences.clear()                                        # expired by hand
    restarted.send([], now=t0 + 40)
    assert [n.alert.id for n in after.sent if n.notify] == []
    restarted.close()
