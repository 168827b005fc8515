"""The facility page's reads on VictoriaMetrics (binned by the server), InfluxDB (from its
``range``) and SQLite (binned in numpy) over the same simulated fleet: the same racks, power,
energy and temperatures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.dashboards.app import _default_carbon
from fleetwatch.dashboards.facility_data import read_facility
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.influxql import InfluxQLStore
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.store.conftest import DATABASE, influxdb  # noqa: F401 - the server fixture
from tests.store.helpers import cluster_name, force_flush


@pytest.mark.parametrize("server", ["victoria", "influxdb"])
def test_a_server_and_sqlite_show_the_same_racks(request: pytest.FixtureRequest, server: str,
                                                 tmp_path: Path) -> None:
    address = request.getfixturevalue(server).address
    cluster = cluster_name()
    now = time.time()
    sim = FleetSim(SimParams(nodes=6, gpus=4, interval_s=15.0, cluster=cluster),
                   start_ts=now - 20 * 60)
    lite = SqliteStore(tmp_path / "s.db")
    vm = (VictoriaMetricsStore(f"http://{address}") if server == "victoria" else
          InfluxQLStore(f"http://{address}", bucket=DATABASE, api="v1"))
    processors = [Processor(lite), Processor(vm)]
    for _ in range(80):
        sim.step()
        frames = sim.frames()
        for p in processors:
            p.process(frames)
    lite.maintain(int(time.time() * 1000))  # most minutes from the one-minute means
    if server == "victoria":
        force_flush(address)
    else:
        time.sleep(0.5)
    model = _default_carbon()
    a = read_facility(SqliteStore(tmp_path / "s.db", read_only=True), model, now - 3600,
                      time.time(), time.time(), cluster=cluster, static_w=100.0)
    b = read_facility(vm, model, now - 3600, time.time(), time.time(), cluster=cluster,
                      static_w=100.0)
    assert len(a.racks) == 3 and [(r.cluster, r.rack) for r in a.racks] == [
        (r.cluster, r.rack) for r in b.racks]
    for x, y in zip(a.racks, b.racks):
        assert x.power_w is not None and x.power_w == pytest.approx(y.power_w)
        assert x.gpus_now == y.gpus_now == 8
        assert x.kwh > 0 and x.kwh == pytest.approx(y.kwh)
        assert x.facility_kwh == pytest.approx(y.facility_kwh)
        assert x.inlet_c == pytest.approx(y.inlet_c, abs=1e-6)
        assert x.die_c == pytest.approx(y.die_c, abs=1e-6)
    assert a.inlet.start_ms == b.inlet.start_ms and a.inlet.bins == b.inlet.bins
    for rack, line in a.die.means.items():
        assert line == pytest.approx(b.die.means[rack], abs=1e-6)
    assert a.room.keys() == b.room.keys() == {cluster}
    assert a.room[cluster] == pytest.approx(b.room[cluster], abs=1e-6)
    assert b.seen and cluster in b.seen
    # A cluster with nothing stored (a tab opened before its data): empty, no exception.
    none = read_facility(vm, model, now - 3600, time.time(), time.time(),
                         cluster=cluster_name())
    assert none.empty and none.inlet.means == {} and none.die.means == {}
    vm.close()
