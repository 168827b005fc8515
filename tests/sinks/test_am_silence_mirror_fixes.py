"""Mirroring fleetwatch's silences into Alertmanager (oncall2 #4, #5, #6, #7), against a
real Alertmanager read back from its API:

* a person's silence is never expired, even with createdBy "fleetwatch" and a comment
  starting "fleetwatch silence": only a silence of exactly fleetwatch's shape is its;
* an Alertmanager that restarted and lost its silences gets them back before the alerts
  they mute are re-sent (at the re-send tick, and at the first post after a failure);
* silences are read every alerts.silence_reload_s (5 s by default), one store read;
* a refused silence moves fleetwatch_alert_sink_silence_errors_total at every pass.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import alertmanager as am_module
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink, am_labels
from fleetwatch.pipeline.sinks.am_silences import (
    CREATED_BY,
    AlertmanagerSilences,
    ack_wanted,
    key_of,
    silence_wanted,
)
from fleetwatch.pipeline.sinks.base import SinkError, iso
from fleetwatch.pipeline.store.base import Acknowledgement, Silence
from tests.servers import Server, alertmanager, free_port
from tests.sinks.test_alertmanager import am_alerts
from tests.sinks.test_am_silences import Clock, firing, fw_silences, sink_for


def _post_silence(am: Server, body: dict[str, Any]) -> str:
    req = urllib.request.Request(f"http://{am.address}/api/v2/silences",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)["silenceID"]


def _state(am: Server, silence_id: str) -> str:
    with urllib.request.urlopen(f"http://{am.address}/api/v2/silence/{silence_id}",
                                timeout=5) as r:
        return json.load(r)["status"]["state"]


# -- #4: whose silence it is ----------------------------------------------------------------
def _as_am(body: dict[str, Any], sid: str = "x") -> dict[str, Any]:
    return {**body, "id": sid, "status": {"state": "active"}}


def test_only_a_silence_of_fleetwatchs_own_shape_is_fleetwatchs() -> None:
    s = Silence("0123456789ab", (("node", "=", "n1"),), 0.0, 4e9, "ops", "fans")
    w = silence_wanted(s, 1.0)
    assert w is not None
    assert key_of(_as_am(w.body(1.0))) == "silence 0123456789ab"
    a = firing("n1")
    ack = ack_wanted(am_labels(a), a.id, Acknowledgement(a.id, 1.0, "bob"), 1.0, 60.0)
    assert key_of(_as_am(ack.body(1.0))) == f"ack {a.id}"
    human = {"matchers": [{"name": "alertname", "value": "DiskFull", "isRegex": False,
                           "isEqual": True}], "createdBy": CREATED_BY,
             "startsAt": iso(0), "endsAt": iso(4e9)}
    for comment in ("fleetwatch silence maintenance window for disks",
                    "fleetwatch silence 0123456789ab by ops",     # no scope matcher
                    "fleetwatch ack DiskFull/c/n1/disk0/1 by ops"):   # no scope label
        assert key_of(_as_am({**human, "comment": comment})) == "", comment
    # fleetwatch's matchers but a comment a person wrote around the key
    assert key_of(_as_am({**w.body(1.0), "comment": "fleetwatch silence 0123456789ab, "
                                                    "extended"})) == ""
    # an ack whose alertname is not the rule its alert id starts with
    other = {**ack.body(1.0), "comment": f"fleetwatch ack xid_error/{a.id} by bob"}
    assert key_of(_as_am(other)) == ""
    # a regex matcher in an "ack"
    regexed = ack.body(1.0)
    regexed["matchers"] = [{**m, "isRegex": True} for m in regexed["matchers"]]
    assert key_of(_as_am(regexed)) == ""


def test_a_persons_silence_named_like_fleetwatchs_is_left_alone(am: Server) -> None:
    node = f"node-human-{time.time_ns()}"
    human = _post_silence(am, {
        "matchers": [{"name": "alertname", "value": "DiskFull", "isRegex": False,
                      "isEqual": True}],
        "startsAt": iso(time.time()), "endsAt": iso(time.time() + 7200),
        "createdBy": CREATED_BY, "comment": "fleetwatch silence maintenance window for disks"})
    sink = sink_for(am)
    mine = Silence(f"fw-{node}", (("node", "=", node),), time.time() - 1, time.time() + 600,
                   "ops")
    sink.mutes([mine], {})                   # a pass: fleetwatch's created
    sink.mutes([], {})                       # and expired; the person's kept
    assert fw_silences(am, node) == []
    assert _state(am, human) == "active"


# -- #5: an Alertmanager that lost its silences ---------------------------------------------
@pytest.fixture
def am_port() -> int:
    return free_port()


def _order(monkeypatch: pytest.MonkeyPatch, sink: AlertmanagerSink) -> list[str]:
    calls: list[str] = []
    put, post = sink.silence_api.put, am_module.post_json

    def recording_put(body: dict[str, Any]) -> None:
        calls.append("silence")
        put(body)

    def recording_post(*args: Any, **kw: Any) -> None:
        calls.append("alerts")
        post(*args, **kw)

    monkeypatch.setattr(sink.silence_api, "put", recording_put)
    monkeypatch.setattr(am_module, "post_json", recording_post)
    return calls


def test_a_restarted_alertmanager_gets_the_silences_before_the_alerts_they_mute(
        tmp_path: Path, am_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    node = f"node-amrestart-{time.time_ns()}"
    first = alertmanager(tmp_path / "one", port=am_port).start()
    clock = Clock()
    sink = sink_for(first, clock)
    alert = firing(node)
    try:
        sink.send([Notice(alert)])                       # posted, then silenced
        silence = Silence(f"fw-{node}", (("node", "=", node),), time.time() - 1,
                          time.time() + 600, "ops")
        sink.mutes([silence], {})
        sink.send([Notice(alert, f"silence:{silence.id}")])
        assert len(fw_silences(first, node)) == 1
    finally:
        first.stop()
    calls = _order(monkeypatch, sink)
    sink._last_sent = 0.0          # a re-send is due (a clock skew would start silences late)
    with pytest.raises(SinkError):                       # down: the re-send fails
        sink.tick()
    fresh = alertmanager(tmp_path / "two", port=am_port).start()   # empty storage
    try:
        calls.clear()
        sink.tick()                                      # the lane's retry: due again
        assert calls == ["silence", "alerts"]            # the silence first
        (got,) = am_alerts(fresh, node)
        (mirrored,) = fw_silences(fresh, node)
        assert got["status"]["state"] == "suppressed"
        assert got["status"]["silencedBy"] == [mirrored["id"]]
    finally:
        fresh.stop()


def test_the_re_send_tick_reconciles_silences_a_quick_restart_lost(
        tmp_path: Path, am_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    node = f"node-amquick-{time.time_ns()}"
    first = alertmanager(tmp_path / "one", port=am_port).start()
    clock = Clock()
    sink = sink_for(first, clock)
    alert = firing(node)
    silence = Silence(f"fw-{node}", (("node", "=", node),), time.time() - 1,
                      time.time() + 600, "ops")
    sink.send([Notice(alert)])
    sink.mutes([silence], {})
    sink.send([Notice(alert, f"silence:{silence.id}")])
    first.stop()                                         # restarted between two re-sends
    fresh = alertmanager(tmp_path / "two", port=am_port).start()
    try:
        calls = _order(monkeypatch, sink)
        sink._last_sent = 0.0          # a re-send is due (a clock skew would start silences late)
        sink.tick()
        assert calls == ["silence", "alerts"]
        (got,) = am_alerts(fresh, node)
        assert got["status"]["state"] == "suppressed"
    finally:
        fresh.stop()


# -- #7: a refused silence is counted at every pass -----------------------------------------
def test_a_refused_silence_moves_the_silence_error_counter_each_pass(
        am: Server, caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.pipeline.health import ProcessorCollector  # noqa: F401 (the metric's home)

    node = f"node-refused-{time.time_ns()}"
    clock = Clock()
    sink = sink_for(am, clock)
    # Stored before parse_matcher refused such regexes (or written by another tool).
    bad = Silence(f"fw-{node}", (("rule", "=~", "(?!gpu_temp).*"), ("node", "=", node)),
                  time.time() - 1, time.time() + 600, "ops")
    with caplog.at_level(logging.ERROR, "fleetwatch.pipeline.sinks.alertmanager"):
        sink.mutes([bad], {})
        assert sink.silence_errors == 1
        sink.send([Notice(firing(node))])
        sink._last_sent = 0.0          # a re-send is due (a clock skew would start silences late)
        sink.tick()                                       # another pass before the re-send
        assert sink.silence_errors == 2
    refused = [r.getMessage() for r in caplog.records]
    assert len(refused) == 1 and "Alertmanager refused the silence" in refused[0]
    assert AlertmanagerSilences(f"http://{am.address}", 5).list() is not None


def test_the_silence_error_metric_counts_refusals(am: Server) -> None:
    from fleetwatch.pipeline.health import _sink_metrics
    from fleetwatch.pipeline.sinks import Notifier

    node = f"node-refmetric-{time.time_ns()}"
    bad = Silence(f"fw-{node}", (("node", "=~", "(a)\\1"),), time.time() - 1,
                  time.time() + 600, "ops")
    notifier = Notifier([sink_for(am)], silences=lambda: [bad], background=False, reload_s=0)
    notifier.send([])
    (family,) = [f for f in _sink_metrics(notifier)
                 if f.name == "fleetwatch_alert_sink_silence_errors"]
    assert [(s.labels, s.value) for s in family.samples if s.name.endswith("_total")] == [
        ({"sink": "alertmanager"}, 1.0)]
    assert "refused" in family.documentation


# -- #6: how often silences are read ---------------------------------------------------------
def test_silence_reload_s_defaults_to_5s_is_range_checked_and_reaches_the_notifier(
        tmp_path: Path) -> None:
    from fleetwatch.config import ConfigError, load
    from fleetwatch.wiring import open_notifier
    from tests.sinks.conftest import tmp_store

    with pytest.raises(ConfigError, match="alerts.silence_reload_s"):
        load(None, env={"FLEETWATCH_ALERTS_SILENCE_RELOAD_S": "0"})
    assert load(None, env={}).alerts.silence_reload_s == 5.0
    config = load(None, env={"FLEETWATCH_ALERTS_SILENCE_RELOAD_S": "2"})
    store = tmp_store(tmp_path)
    reads = {"silences": 0, "acks": 0}
    for name in reads:
        real = getattr(store, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            reads[_name] += 1
            return _real(*args, **kw)

        setattr(store, name, counted)
    notifier = open_notifier(config, store)
    try:
        assert notifier._mutes.reload_s == 2.0
        notifier.send([])
        notifier.send([])                                 # within 2 s: not read again
        assert reads == {"silences": 1, "acks": 1}        # one read of each per reload
    finally:
        notifier.close()


# -- #2: the dialect check agrees with Alertmanager's own parser -----------------------------
def test_what_parse_matcher_keeps_alertmanager_takes_and_what_it_refuses_alertmanager_does(
        am: Server) -> None:
    from fleetwatch.pipeline.silence_matchers import not_re2
    from fleetwatch.pipeline.sinks.base import SinkRejected
    from tests.core.test_silence_re2 import REFUSED

    api = AlertmanagerSilences(f"http://{am.address}", 5)

    def body(regex: str) -> dict[str, Any]:
        return {"matchers": [{"name": "node", "value": regex, "isRegex": True,
                              "isEqual": True}],
                "startsAt": iso(time.time()), "endsAt": iso(time.time() + 60),
                "createdBy": "test", "comment": "dialect"}

    for regex in ["gpu_.*", "gpu_temp_(high|critical)", r"node-\d+", "(?i)GPU_.*", r"[+*]+",
                  r"\++", r"a\*+", "x|y", "[]a]+", "node-{2,3}"]:
        assert not_re2(regex) == ""
        api.put(body(regex))                                  # accepted
    for text, _ in REFUSED:
        regex = text.split("~", 1)[1]
        assert not_re2(regex) != ""
        with pytest.raises(SinkRejected):
            api.put(body(regex))
