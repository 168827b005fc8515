"""Adopted alerts judged against the silences, acknowledgements and inhibitions in force
before any sink re-sends them; the silences handed to the sinks before the changes judged
with them, and said once when they cannot be read."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.store.base import Acknowledgement, Silence
from tests.servers import Server
from tests.sinks.conftest import tmp_store, until
from tests.sinks.test_sink_lanes import LOGGER, Recording, _am_alerts, _logged, alert


# -- oncall #3: adopted alerts judged before a sink re-sends them ------------------------------
def test_adopted_alerts_carry_their_muting_and_the_silences_reach_the_sink_first(
        tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    now = time.time()
    latched = alert("latched", node="n1", ts=now - 600)   # unchanged since before the silence
    acked = alert("acked", node="n2", ts=now - 60)
    silent = alert("", node="n3", rule="node_silent", device="host", ts=now - 60)
    under = alert("under", node="n3", ts=now - 60)
    plain = alert("plain", node="n4", ts=now - 60)
    store.write_silences([Silence("s1", (("node", "=", "n1"),), now - 300, now + 300, "ops")])
    store.write_acks([Acknowledgement(acked.id, now - 30, "oncall")])
    am = Recording()
    notifier = Notifier([am], silences=store.silences, acks=store.acks, tick_s=0.01)
    notifier.adopt([latched, acked, silent, under, plain])
    assert until(lambda: len(am.calls) >= 2)
    assert am.calls[:2] == [
        ("mutes", (["s1"], ["oncall"])),
        ("adopt", [("latched", "silence:s1"), ("acked", "ack:oncall"), ("", ""),
                   ("under", f"inhibited:{silent.id}"), ("plain", "")])]
    # The first batch (the stream's time now known) judges them again: nothing changed.
    assert notifier.send([], now) == []
    notifier.close()
    assert am.threads == {"alert-sink-alertmanager"}
    assert [k for k, _ in am.calls] == ["mutes", "adopt"]
    store.close()


def test_adopted_alerts_are_judged_again_at_the_first_batchs_time(tmp_path: Path) -> None:
    """Before the first batch the stream's time is not known (wall clock meanwhile): a
    replay of last week, under last week's silence, adopts unmuted, then is muted."""
    store = tmp_store(tmp_path)
    week_ago = time.time() - 7 * 86_400
    old = alert("old", ts=week_ago - 60)
    store.write_silences([Silence("s1", (("node", "=", "n1"),), week_ago - 30, week_ago + 3600,
                                  "ops")])
    am = Recording()
    notifier = Notifier([am], silences=store.silences, background=False)
    notifier.adopt([old])
    (notice,) = notifier.send([], week_ago)
    assert (notice.alert.id, notice.muted_by) == (old.id, "silence:s1")
    assert [k for k, _ in am.calls] == ["mutes", "adopt", "send"]
    assert am.calls[1] == ("adopt", [("old", "")])
    store.close()


def test_silences_go_to_the_sink_after_every_reload_before_the_changes_judged_with_them(
        tmp_path: Path) -> None:
    store = tmp_store(tmp_path)
    am = Recording()
    notifier = Notifier([am], silences=store.silences, reload_s=0, background=False)
    notifier.send([alert("a", ts=time.time())])
    store.write_silences([Silence("s1", (("node", "=", "n1"),), 0, 4e9, "ops")])
    notifier.send([alert("b", device="gpu1", ts=time.time())])
    assert am.calls == [("mutes", ([], [])), ("send", ["a"]),
                        ("mutes", (["s1"], [])), ("send", ["b", "a"])]
    store.close()


def test_an_alert_silenced_before_a_restart_is_adopted_muted_at_alertmanager(
        am: Server, tmp_path: Path) -> None:
    """The restart of oncall #3 against a real Alertmanager: the adopted alert reaches it
    silenced (suppressed), never active, so nothing is paged while the silence is in force."""
    node = f"node-adopt-{time.time_ns()}"
    store = tmp_store(tmp_path)
    now = time.time()
    latched = alert("a", node=node, ts=now - 600)
    store.write_alerts([latched])
    store.write_silences([Silence("s1", (("node", "=", node),), now - 300, now + 300, "ops")])
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}", resend_s=60)],
                        silences=store.silences, acks=store.acks, tick_s=0.05)
    try:
        notifier.adopt(store.alerts(("firing",)))
        assert until(lambda: _am_alerts(am, node))
        (got,) = _am_alerts(am, node)
        assert got["status"]["state"] == "suppressed" and got["status"]["silencedBy"]
    finally:
        notifier.close()
        store.close()


def test_silences_that_cannot_be_read_are_said_once_per_outage_and_once_when_read_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """Through a store outage the silences are read every reload_s (5 s): one warning when
    reading starts failing, one when it works again, not one every 5 s."""
    from fleetwatch.pipeline.store.base import StoreError

    caplog.set_level(logging.INFO, LOGGER)
    away = [False]

    def silences() -> list[Silence]:
        if away[0]:
            raise StoreError("cannot query http://127.0.0.1:1 (Connection refused)")
        return []

    notifier = Notifier([Recording()], silences=silences, reload_s=0.0, background=False)
    try:
        notifier.send([])
        away[0] = True
        for _ in range(5):
            notifier.send([])
        away[0] = False
        notifier.send([])
        notifier.send([])
        away[0] = True
        notifier.send([])                            # a second outage: said again
    finally:
        notifier.close()
    said = [m for m in _logged(caplog, logging.WARNING) if "silences" in m]
    assert len(said) == 3, said
    assert said[0].startswith("could not reload silences and acknowledgements: cannot query")
    assert "the last ones read stay in force until the store answers" in said[0]
    assert said[1].startswith("silences and acknowledgements read again after ")
    assert said[2].startswith("could not reload silences and acknowledgements")
