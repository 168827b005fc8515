"""Two fleetwatch deployments sharing one Alertmanager (upgrader round 20, #1): each
changes or expires only its own mirrored silences (``createdBy`` ``fleetwatch/INSTANCE``),
a silence naming no cluster mutes only the deployment's ``alerts.clusters`` there, and the
silences of the previous release (``createdBy`` ``fleetwatch``) are taken over by the
deployment whose store has them, never expired by another.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetwatch.config import ConfigError, load, override
from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.am_silences import (
    CREATED_BY,
    AlertmanagerSilences,
    owner_tag,
    plan,
    silence_wanted,
)
from fleetwatch.pipeline.sinks.base import iso
from fleetwatch.pipeline.store.base import Alert, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.settings import Config
from fleetwatch.wiring import alert_sinks, alerts_instance
from tests.servers import alertmanager
from tests.sinks.conftest import Receiver
from tests.sinks.test_alertmanager import am_alerts

A, B = owner_tag("site-a"), owner_tag("site-b")


def _have(sid: str, key: str, matchers: tuple, by: str) -> dict[str, Any]:
    return {"id": sid, "createdBy": by, "comment": f"fleetwatch {key} by x",
            "status": {"state": "active"}, "startsAt": iso(0), "endsAt": iso(4000.0),
            "matchers": [{"name": n, "value": v, "isRegex": r, "isEqual": e}
                         for n, v, r, e in matchers]}


def _wanted(sid: str, clusters: tuple[str, ...] = ()):  # noqa: ANN202
    w = silence_wanted(Silence(sid, (parse_matcher("node=n1"),), 100.0, 4000.0, "ops"),
                       200.0, clusters)
    assert w is not None
    return w


def _mine(key: str) -> bool:          # the sink's rule: every silence key, its own acks
    return key.startswith("silence ")


# -- the decision, pure ---------------------------------------------------------------------
def test_a_deployment_leaves_another_deployments_silences_alone() -> None:
    w = _wanted("s1")
    have = [_have("a1", "silence s1", w.matchers, A),       # its own, wanted: kept
            _have("a2", "silence gone", w.matchers, A),     # its own, removed: expired
            _have("b1", "silence s9", w.matchers, B),       # the other deployment's
            _have("b2", "silence s1", w.matchers, B)]       # same id there: still B's
    todo = plan([w], have, _mine, A)
    assert (todo.create, todo.update, todo.expire) == ([], [], ["a2"])


def test_a_previous_release_silence_is_taken_over_only_by_the_store_that_has_it() -> None:
    w = _wanted("s1")
    old = [_have("o1", "silence s1", w.matchers, CREATED_BY),
           _have("o2", "silence s2", w.matchers, CREATED_BY)]   # not in this store
    todo = plan([w], old, _mine, A)
    assert todo.expire == [] and todo.create == []
    ((have, got),) = todo.update                                # re-tagged in place
    assert have["id"] == "o1" and got.body(200.0, "o1", created_by=A)["createdBy"] == A
    # once this deployment has its own, a leftover untagged duplicate goes
    todo = plan([w], [*old, _have("a1", "silence s1", w.matchers, A)], _mine, A)
    assert (todo.update, todo.expire) == ([], ["o1"])


def test_a_silence_naming_no_cluster_gets_the_deployments_clusters() -> None:
    assert ("cluster", "ca", False, True) in _wanted("s1", ("ca",)).matchers
    assert ("cluster", r"ca|cb\.x", True, True) in _wanted("s1", ("cb.x", "ca")).matchers
    assert not any(m[0] == "cluster" for m in _wanted("s1").matchers)
    own = silence_wanted(Silence("s2", (parse_matcher("cluster=cz"),), 100.0, 4000.0), 200.0,
                         ("ca",))
    assert own is not None and [m for m in own.matchers if m[0] == "cluster"] == [
        ("cluster", "cz", False, True)]


def test_the_instance_is_named_or_derived_from_the_store(tmp_path: Path) -> None:
    base = load(None, env={})
    a = override(base, "store", path=str(tmp_path / "a.db"))
    b = override(base, "store", path=str(tmp_path / "b.db"))
    assert alerts_instance(a) == alerts_instance(override(a, "store"))   # stable
    assert alerts_instance(a) != alerts_instance(b) and alerts_instance(a).startswith("sqlite-")
    assert alerts_instance(override(a, "alerts", instance="prod-east")) == "prod-east"
    with pytest.raises(ConfigError, match="alerts.instance"):
        load(None, env={"FLEETWATCH_ALERTS_INSTANCE": "prod east"})


# -- two processors, two stores, one real Alertmanager --------------------------------------
def _alert(cluster: str, node: str) -> Alert:
    now = time.time()
    return Alert(f"gpu_temp_high/{cluster}/{node}/gpu0/1", "gpu_temp_high", "critical", cluster,
                 "r1", node, "gpu0", "firing", now - 60, now, 91.0, "GPU at 91 °C",
                 fired_ts=now - 30, evidence={"gpu_temp_c": 91.0})


def _deployment(url: str, store: SqliteStore, path: Path, cluster: str) -> Notifier:
    config: Config = override(load(None, env={}), "store", path=str(path))
    config = override(config, "alerts", alertmanager_url=url, alertmanager_resend_s=1.0,
                      clusters=[cluster])
    return Notifier(alert_sinks(config), silences=store.silences, acks=store.acks,
                    background=False, reload_s=0)


def _states(url: str) -> dict[str, str]:
    return {s["comment"].split(" by ")[0]: s["status"]["state"]
            for s in AlertmanagerSilences(url, 5).list()}


def test_two_deployments_on_one_alertmanager_keep_both_silences_and_page_nothing(
        tmp_path: Path) -> None:
    hook = Receiver()
    conf = tmp_path / "alertmanager.yml"
    conf.write_text(yaml.safe_dump({
        "route": {"receiver": "hook", "group_by": ["alertname", "cluster", "node"],
                  "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1s"},
        "receivers": [{"name": "hook", "webhook_configs": [{"url": hook.url}]}]}))
    server = alertmanager(tmp_path, config=conf).start()
    url = f"http://{server.address}"
    try:
        shared, own_b = f"node-shared-{time.time_ns()}", f"node-b-{time.time_ns()}"
        stores = {k: SqliteStore(tmp_path / f"{k}.db") for k in "ab"}
        a = _deployment(url, stores["a"], tmp_path / "a.db", "ca")
        b = _deployment(url, stores["b"], tmp_path / "b.db", "cb")
        a_alert, b_alert, b_other = (_alert("ca", shared), _alert("cb", own_b),
                                     _alert("cb", shared))   # same node name, cluster cb
        a.send([a_alert])
        b.send([b_alert, b_other])
        now = time.time()
        stores["a"].write_silences([Silence("sa", (("node", "=", shared),), now - 1,
                                            now + 600, "ops", "cooling ticket")])
        stores["b"].write_silences([Silence("sb", (("node", "=", own_b),), now - 1,
                                            now + 600, "ops", "disk swap")])
        deadline = time.time() + 6.0
        seen_at = 0
        while time.time() < deadline:                # both reload, mirror and re-send
            for n in (a, b):
                n.send([])
                n.sinks[0].tick()
            if not seen_at and time.time() > now + 2.5:
                seen_at = len(hook.bodies)           # what paged before the silences held
            time.sleep(0.3)
        assert _states(url) == {"fleetwatch silence sa": "active",
                                "fleetwatch silence sb": "active"}
        by = {s["comment"].split(" by ")[0]: s["createdBy"]
              for s in AlertmanagerSilences(url, 5).list()}
        assert by["fleetwatch silence sa"] != by["fleetwatch silence sb"]
        state = {(x["labels"]["cluster"], x["labels"]["node"]): x["status"]["state"]
                 for node in (shared, own_b) for x in am_alerts(server, node)}
        assert state == {("ca", shared): "suppressed", ("cb", own_b): "suppressed",
                         ("cb", shared): "active"}       # A's silence: cluster ca only
        paged = {(x["labels"]["cluster"], x["labels"]["node"])
                 for body in hook.bodies[seen_at:] for x in body["alerts"]  # type: ignore[index]
                 if x["status"] == "firing"}
        assert ("ca", shared) not in paged and ("cb", own_b) not in paged
    finally:
        server.stop()
        hook.close()


def test_a_previous_release_silence_is_taken_over_in_a_real_alertmanager(am) -> None:  # noqa: ANN001
    """Its store has it: re-tagged as this deployment's (still muting, with the clusters'
    matcher: a name with '-' and '.' that Alertmanager's RE2 takes); one its store lacks
    (another deployment's, or removed) is left as it is."""
    node = f"node-legacy-{time.time_ns()}"
    url = f"http://{am.address}"
    api = AlertmanagerSilences(url, 5)
    now = time.time()
    ours, theirs = (Silence(f"{k}-{node}", (("node", "=", node),), now - 1, now + 600, "ops")
                    for k in ("ours", "theirs"))
    for s in (ours, theirs):
        w = silence_wanted(s, now)
        assert w is not None
        api.put(w.body(now))                              # as the previous release made them
    from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink

    sink = AlertmanagerSink(url, resend_s=60.0, instance="site-a",
                            clusters=("prod-east", "lab.2"))
    sink.mutes([ours], {})
    live = {s["comment"].split(" by ")[0]: s for s in api.list()
            if node in s["comment"] and s["status"]["state"] != "expired"}
    assert set(live) == {f"fleetwatch silence ours-{node}", f"fleetwatch silence theirs-{node}"}
    taken, left = live[f"fleetwatch silence ours-{node}"], live[f"fleetwatch silence theirs-{node}"]
    assert taken["createdBy"] == A and left["createdBy"] == CREATED_BY
    assert {"name": "cluster", "value": r"lab\.2|prod\-east", "isRegex": True,
            "isEqual": True} in taken["matchers"]
    sink.mutes([], {})                                    # removed from its store
    states = {s["comment"].split(" by ")[0]: s["status"]["state"] for s in api.list()
              if node in s["comment"]}
    assert states[f"fleetwatch silence ours-{node}"] == "expired"
    assert states[f"fleetwatch silence theirs-{node}"] == "active"
