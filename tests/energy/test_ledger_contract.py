"""One set of assertions for the energy ledger of every backend: SQLite and a real
VictoriaMetrics. Counts what the store gives back, not what was sent."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import pytest

from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.ledger import DeviceState, EnergyRow
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.store.conftest import DATABASE, influxdb  # noqa: F401 - the server fixture
from tests.store.helpers import force_flush

from .helpers import frame

T0 = 1_651_795_200  # 2022-05-06 00:00 UTC


@pytest.fixture(params=["sqlite", "victoriametrics", "influxdb"])
def ledger(request, tmp_path) -> Iterator[tuple[object, callable]]:
    """(a factory of store clients on one store, flush) — a new client is a restarted processor."""
    if request.param == "sqlite":
        path = tmp_path / "s.db"
        yield (lambda: SqliteStore(path)), (lambda: None)
    elif request.param == "victoriametrics":
        server = request.getfixturevalue("victoria")
        url = f"http://{server.address}"
        yield (lambda: VictoriaMetricsStore(url)), (lambda: force_flush(server.address))
    else:  # InfluxDB 1.x through its v1 API
        server = request.getfixturevalue("influxdb")
        url = f"http://{server.address}"
        yield (lambda: InfluxQLStore(url, bucket=DATABASE, api="v1")), (lambda: None)


def cluster() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def test_rows_and_states_read_back(ledger):
    open_store, flush = ledger
    store = open_store()
    c = cluster()
    rows = [EnergyRow(T0, c, "r1", "n1", "gpu0", "job 1", "alice", "", 3600.5, 100.25, 60.0,
                      15.0, 0.0, 0.0),
            EnergyRow(T0 + 3600, c, "r1", "n1", "gpu0", "", "", "", 10.0, 10.0, 15.0, 15.0,
                      30.0, 0.0),
            EnergyRow(T0, c, "r1", "n2", "cpu", "job 1", "alice", "ml", 7.0, 0.0, 60.0, 0.0,
                      0.0, 0.0)]
    states = [DeviceState(c, "n1", "gpu0", T0 + 3615.0, 250.0, None),
              DeviceState(c, "n1", "cpu", T0 + 3615.0, None, 1e9)]
    store.write_energy(rows, states)
    flush()
    got = sorted(store.energy(T0, T0 + 7200, cluster=c))
    assert got == sorted(rows)
    assert store.energy(T0 + 3600, T0 + 7200, cluster=c) == [rows[1]]
    assert store.energy(T0, T0 + 7200, cluster=c, node="n2") == [rows[2]]
    saved, open_rows = store.energy_state(c, "n1", T0 + 3620.0)
    assert sorted(saved) == sorted(states)
    assert sorted(open_rows) == [rows[1]]  # from the oldest watermark's bucket on


def test_a_rewritten_bucket_is_one_row_with_the_new_total(ledger):
    open_store, flush = ledger
    store = open_store()
    c = cluster()
    first = EnergyRow(T0, c, "r", "n", "gpu0", "", "", "", 100.0, 0.0, 15.0, 0.0, 0.0, 0.0)
    store.write_energy([first], [DeviceState(c, "n", "gpu0", T0 + 15.0, 100.0, None)])
    second = first._replace(energy_j=200.0, seconds=30.0)
    store.write_energy([second], [DeviceState(c, "n", "gpu0", T0 + 30.0, 100.0, None)])
    store.write_energy([second], [DeviceState(c, "n", "gpu0", T0 + 30.0, 100.0, None)])
    flush()
    assert store.energy(T0, T0 + 3600, cluster=c) == [second]


def test_a_restarted_processor_replaying_frames_counts_each_interval_once(ledger):
    open_store, flush = ledger
    c = cluster()
    settings = EnergySettings(node_static_w=400.0)
    frames = [frame(T0 + 15 * i, {0: {"gpu_power_w": 300.0, "gpu_energy_j": 1e6 + 300.0 * 15 * i},
                                  1: {"gpu_power_w": 80.0}},
                    cluster=c, job="j", user="u", host={"host_cpu_power_w": 120.0})
              for i in range(481)]  # two hours
    EnergyIntegrator(open_store(), settings).observe(frames[:300])
    flush()
    # Crash: the offsets of frames 250..299 were never committed; a new processor replays.
    again = EnergyIntegrator(open_store(), settings)
    again.observe(frames[250:400])
    flush()
    again.observe(frames[400:])
    flush()
    rows = open_store().energy(T0, T0 + 3 * 3600, cluster=c)
    span = 15.0 * 480

    def total(device: str) -> float:
        return sum(r.energy_j for r in rows if r.device == device)

    assert total("gpu0") == pytest.approx(300.0 * span)
    assert total("gpu1") == pytest.approx(80.0 * span)
    assert total("cpu") == pytest.approx(120.0 * span)
    assert total("rest") == pytest.approx(400.0 * span)
    assert sum(r.seconds for r in rows if r.device == "gpu0") == pytest.approx(span)
    assert {r.bucket_ts for r in rows} == {T0, T0 + 3600}


def test_totals_per_hour_and_key_add_up_the_rows(ledger):
    open_store, flush = ledger
    store = open_store()
    c = cluster()
    rows = [EnergyRow(T0, c, "r1", "n1", "gpu0", "j1", "alice", "", 100.0, 10.0, 60.0, 6.0,
                      5.0, 1.0),
            EnergyRow(T0, c, "r1", "n1", "gpu1", "j1", "alice", "", 50.0, 0.0, 60.0, 0.0,
                      0.0, 0.0),
            EnergyRow(T0, c, "r1", "n1", "cpu", "j1", "alice", "", 20.0, 0.0, 60.0, 0.0,
                      7.0, 0.0),
            EnergyRow(T0 + 3600, c, "r1", "n2", "gpu0", "", "", "", 30.0, 30.0, 60.0, 60.0,
                      0.0, 0.0)]
    store.write_energy(rows, [DeviceState(c, "n1", "gpu0", T0 + 60.0, 1.0, None)])
    flush()
    got = [t for t in store.energy_totals(T0, T0 + 7200, "cluster") if t.name == c]
    assert [tuple(t) for t in got] == [
        (T0, c, 170.0, 10.0, 150.0, 120.0, 6.0, 5.0, 1.0, ""),
        (T0 + 3600, c, 30.0, 30.0, 30.0, 60.0, 60.0, 0.0, 0.0, "")]
    by_job = {(t.bucket_ts, t.name): t.energy_j
              for t in store.energy_totals(T0, T0 + 7200, "job") if t.bucket_ts >= T0}
    assert by_job[(T0, "j1")] >= 170.0  # other tests' rows share the hour on a shared server
    with pytest.raises(ValueError, match="one of cluster"):
        store.energy_totals(T0, T0 + 7200, "device; DROP TABLE energy")


def test_rolled_up_hours_late_rows_and_the_top_list(ledger):
    open_store, flush = ledger
    store = open_store()
    c = cluster()

    def row(bucket: int, job: str, node: str, energy: float) -> EnergyRow:
        return EnergyRow(bucket, c, "r", node, "gpu0", job, "", "", energy, 0.0, 60.0, 0.0,
                         0.0, 0.0)

    store.write_energy([row(T0, "j1", "n1", 100.0), row(T0, "j2", "n2", 300.0),
                        row(T0 + 3600, "j1", "n1", 50.0)],
                       [DeviceState(c, n, "gpu0", T0 + 3650.0, 1.0, None)
                        for n in ("n1", "n2")])
    flush()
    if hasattr(store, "roll_up_energy"):
        assert store.roll_up_energy(T0 + 7200) >= 2
        assert store.roll_up_energy(T0 + 7200) == 0  # nothing changed since
    # A late row in a rolled-up hour, and a rewrite of another (with the integrator's newer
    # watermark, as every rewrite comes): both show.
    store.write_energy([row(T0, "j3", "n3", 30.0), row(T0 + 3600, "j1", "n1", 80.0)],
                       [DeviceState(c, "n1", "gpu0", T0 + 3700.0, 1.0, None),
                        DeviceState(c, "n3", "gpu0", T0 + 3700.0, 1.0, None)])
    flush()
    totals = {(t.bucket_ts, t.name): t.energy_j
              for t in store.energy_totals(T0, T0 + 7200, "cluster") if t.name == c}
    assert totals == {(T0, c): 430.0, (T0 + 3600, c): 80.0}
    nodes: dict[str, float] = {}
    for t in store.energy_totals(T0, T0 + 7200, "node"):
        nodes[t.name] = nodes.get(t.name, 0.0) + t.energy_j
    assert nodes["n1"] >= 180.0 and nodes["n3"] >= 30.0
    # kg CO2e per kWh: 0.5 in the first hour, 1.0 in the second.
    top = store.energy_top(T0, T0 + 7200, "job", {(c, T0): 0.5, (c, T0 + 3600): 1.0}, 50,
                           per_cluster=True)
    mine = {t.name: t for t in top if t.cluster == c}
    assert mine["j1"].co2e_kg == pytest.approx((100.0 * 0.5 + 80.0 * 1.0) / 3.6e6)
    assert mine["j2"].energy_j == 300.0
    if store.__class__.__name__ == "SqliteStore":  # a shared server holds other tests' rows
        assert [t.name for t in top] == ["j2", "j1", "j3"]


def test_top_jobs_are_per_cluster_and_users_across_clusters(ledger):
    """Job 777 ran in two clusters (Slurm ids restart per cluster): two lines, each priced
    at its cluster's factors; user alice ran in both: one line, each part at its own."""
    open_store, flush = ledger
    store = open_store()
    east, west = cluster(), cluster()

    def row(c: str, bucket: int, job: str, user: str, energy: float) -> EnergyRow:
        return EnergyRow(bucket, c, "r", "n1", "gpu0", job, user, "", energy, 0.0, 60.0,
                         0.0, 0.0, 0.0)

    store.write_energy([row(east, T0, "777", "alice", 3.6e9), row(west, T0, "777", "alice",
                                                                   7.2e9),
                        row(west, T0 + 3600, "778", "bob", 1.8e9)],
                       [DeviceState(c, "n1", "gpu0", T0 + 3650.0, 1.0, None)
                        for c in (east, west)])
    flush()
    if hasattr(store, "roll_up_energy"):  # rolled-up hours answer as the rows do
        store.roll_up_energy(T0 + 3600)
    kg = {(east, T0): 0.1, (west, T0): 0.5, (west, T0 + 3600): 0.4}
    totals = {(t.bucket_ts, t.cluster, t.name): t.energy_j
              for t in store.energy_totals(T0, T0 + 7200, "job", per_cluster=True)
              if t.cluster in (east, west)}
    assert totals == {(T0, east, "777"): 3.6e9, (T0, west, "777"): 7.2e9,
                      (T0 + 3600, west, "778"): 1.8e9}
    jobs = {(t.cluster, t.name): t
            for t in store.energy_top(T0, T0 + 7200, "job", kg, 50, per_cluster=True)}
    assert jobs[east, "777"].energy_j == 3.6e9
    assert jobs[east, "777"].co2e_kg == pytest.approx(1000 * 0.1)
    assert jobs[west, "777"].co2e_kg == pytest.approx(2000 * 0.5)
    assert jobs[west, "778"].co2e_kg == pytest.approx(500 * 0.4)
    users = {t.name: t for t in store.energy_top(T0, T0 + 7200, "user", kg, 50)}
    assert users["alice"].cluster == ""
    if store.__class__.__name__ == "SqliteStore":  # a shared server holds other tests' rows
        assert users["alice"].energy_j == 10.8e9
        assert users["alice"].co2e_kg == pytest.approx(1000 * 0.1 + 2000 * 0.5)
        assert users["bob"].co2e_kg == pytest.approx(500 * 0.4)
    with pytest.raises(ValueError, match="per cluster"):
        store.energy_totals(T0, T0 + 7200, "node", per_cluster=True)


def test_a_silence_reached_right_after_the_last_write_is_missing_time(ledger):
    # A processor working through a backlog reaches a node's return at once after writing
    # its last frames before the silence: no wait, no flush. The integrator holds the
    # node's watermark; the 40 minutes count as missing on every backend.
    open_store, flush = ledger
    c = cluster()
    ei = EnergyIntegrator(open_store())

    def at(ts: float) -> object:
        return frame(ts, {i: {"gpu_power_w": 100.0} for i in range(2)}, cluster=c, job="j")

    ei.observe([at(T0 + 15 * i) for i in range(41)])          # 00:00 .. 00:10
    gap_end = T0 + 600 + 2400                                   # silent until 00:50
    ei.observe([at(gap_end + 15 * i) for i in range(41)])      # 00:50 .. 01:00
    flush()
    rows = [r for r in open_store().energy(T0, T0 + 7200, cluster=c) if r.device == "gpu0"]
    assert sum(r.missing_s for r in rows) == pytest.approx(2400.0)
    assert sum(r.seconds for r in rows) == pytest.approx(1200.0)
    assert sum(r.energy_j for r in rows) == pytest.approx(100.0 * 1200)


def test_a_clock_stepped_back_three_hours_loses_no_energy(ledger):
    # 32 GPUs at 300 W, a frame a minute with its seq; after 4 h the node's clock steps
    # back 3 h (NTP) and the node runs 30 min more: 4.5 h of energy. The hour it steps
    # back into had left the integrator's memory: its total is read back from the store.
    open_store, flush = ledger
    c = cluster()
    store = open_store()
    ei = EnergyIntegrator(store)
    frames = []
    for k in range(271):
        ts = T0 + 60 * k if k <= 240 else T0 + 60 * k - 3 * 3600
        gpus = {g: {"gpu_power_w": 300.0, "gpu_energy_j": 1e6 + 300.0 * 60 * k}
                for g in range(32)}
        frames.append(dataclasses.replace(frame(ts, gpus, cluster=c, job="j"), seq=k + 1))
    for i in range(0, len(frames), 30):
        ei.observe(frames[i:i + 30])
        flush()
    rows = open_store().energy(T0, T0 + 5 * 3600, cluster=c)
    assert sum(r.energy_j for r in rows) == pytest.approx(32 * 300.0 * 60 * 270)
    assert sum(r.missing_s for r in rows) == 0.0
    assert ei.clock.counts["back"] == 1
