"""The store contract, alerts: their lifecycle, jobs, owners and teams, and identity across
clusters, on every backend (VictoriaMetrics keeps no text: ``Backend.as_kept``)."""

from __future__ import annotations

import dataclasses

from fleetwatch.pipeline.store.base import Alert
from tests.store.backends import Backend
from tests.store.helpers import cluster_name, minute_ago


def _alert(cluster: str, state: str, ts: float, **kw: object) -> Alert:
    base = dict(id=f"gpu_temp/{cluster}/gpu3/1", rule="gpu_temp", severity="critical",
                cluster=cluster, rack="rack-0", node="node-0", device="gpu3", state=state,
                started_ts=ts - 120.0, updated_ts=ts, value=91.0,
                message="GPU 3 on node-0 at 91 °C, limit 85 °C",
                evidence={"gpu_temp_c": 91.0, "limit_c": 85.0},
                action="check the fans and the inlet temperature, then drain the node")
    return Alert(**{**base, **kw})  # type: ignore[arg-type]


def test_alerts_round_trip_through_their_lifecycle(backend: Backend) -> None:
    cluster, now = cluster_name(), minute_ago(0) / 1000
    store = backend.store
    pending = _alert(cluster, "pending", now - 60)
    firing = _alert(cluster, "firing", now - 30, fired_ts=now - 30, value=92.5,
                    message="GPU 3 on node-0 at 92 °C, limit 85 °C",
                    uuid="GPU-1f2e3d4c-0000-1111-2222-333344445555", serial="1650123456789",
                    pci_bus_id="00000000:31:00.0")  # the board: kept by every backend
    other = _alert(cluster, "pending", now - 10, id=f"power/{cluster}/host/2", rule="power",
                   severity="warning", device="host", message="a, b=c d")
    store.write_alerts([pending])
    store.write_alerts([firing, other])
    backend.settle()

    def active() -> list[Alert]:
        return [a for a in store.alerts() if a.cluster == cluster]

    kept = backend.as_kept
    assert sorted(active(), key=lambda a: a.id) == sorted([kept(firing), kept(other)],
                                                          key=lambda a: a.id)
    resolved = _alert(cluster, "resolved", now - 5, fired_ts=now - 30, resolved_ts=now - 5,
                      value=92.5, message=firing.message, uuid=firing.uuid,
                      serial=firing.serial, pci_bus_id=firing.pci_bus_id)
    store.write_alerts([resolved])
    backend.settle()
    assert active() == [kept(other)]
    done = [a for a in store.alerts(("resolved",), since_ts=now - 600) if a.cluster == cluster]
    assert done == [kept(resolved)]
    assert [a for a in store.alerts(("resolved",), since_ts=0) if a.cluster == cluster] == done
    assert [a for a in store.alerts(("resolved",), since_ts=now - 1) if a.cluster == cluster] == []


def test_a_job_alert_keeps_its_jobs(backend: Backend) -> None:
    """The jobs an alert is about (its dashboard link's): kept where text is (SQLite,
    InfluxDB), with a name that has the words the job rules write around a job."""
    cluster, now = cluster_name(), minute_ago(0) / 1000
    hung = _alert(cluster, "firing", now - 20, id=f"job_hung/{cluster}/n1/host/1",
                  rule="job_hung", device="host", fired_ts=now - 20,
                  message="job llm-eval (and 43) hung on node-0: its 8 GPUs",
                  jobs=("llm-eval (and 43)", "7"))
    backend.store.write_alerts([hung])
    backend.settle()
    (got,) = [a for a in backend.store.alerts() if a.cluster == cluster]
    assert got == backend.as_kept(hung)
    assert got.jobs == (("llm-eval (and 43)", "7") if backend.keeps_text else ())


def test_a_job_alert_keeps_its_owner_and_every_backend_its_team(backend: Backend) -> None:
    """Whom its job belongs to: the users where text is kept; the teams everywhere, as a tag
    (Alertmanager's ``team`` label, which must read back the same after a restart, or
    Alertmanager would hear a new alert)."""
    cluster, now = cluster_name(), minute_ago(0) / 1000
    lost = _alert(cluster, "firing", now - 20, id=f"gpu_lost/{cluster}/n1/gpu5/1",
                  rule="gpu_lost", fired_ts=now - 20, jobs=("4000003",),
                  message="GPU 5 on n1 (job 4000003, user-02, team multimodal) is lost",
                  users=("user-02",), teams=("multimodal", "vision"))
    backend.store.write_alerts([lost])
    backend.settle()
    (got,) = [a for a in backend.store.alerts() if a.cluster == cluster]
    assert got == backend.as_kept(lost)
    assert got.teams == ("multimodal", "vision")
    assert got.users == (("user-02",) if backend.keeps_text else ())


def test_alert_text_is_not_a_series_and_clusters_never_collide(backend: Backend) -> None:
    """The same rule on the same node name and device in two clusters: two alerts. A message
    that changes through an alert's life changes nothing of its identity."""
    a_cluster, b_cluster, now = cluster_name(), cluster_name(), minute_ago(0) / 1000
    shared_id = "gpu_temp/node-0/gpu3/1"  # an id that does not name the cluster
    store = backend.store
    first = _alert(a_cluster, "firing", now - 20, id=shared_id, fired_ts=now - 20)
    other = _alert(b_cluster, "pending", now - 10, id=shared_id, value=88.0,
                   evidence={"gpu_temp_c": 88.0})
    store.write_alerts([first, other])
    again = dataclasses.replace(first, updated_ts=now - 5, value=93.0,
                                message="GPU 3 on node-0 at 93 °C, limit 85 °C")
    store.write_alerts([again])
    backend.settle()
    got = {a.cluster: a for a in store.alerts() if a.cluster in (a_cluster, b_cluster)}
    assert got == {a_cluster: backend.as_kept(again), b_cluster: backend.as_kept(other)}
    assert got[a_cluster].evidence == {"gpu_temp_c": 91.0, "limit_c": 85.0}
