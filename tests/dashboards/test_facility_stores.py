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
    # One end for both reads: ends a moment apart may fall either side of a bin's edge.
    end = time.time()
    a = read_facility(SqliteStore(tmp_path / "s.db", read_only=True), model, now - 3600,
                      end, end, cluster=cluster, static_w=100.0)
    b = read_facility(vm, model, now - 3600, end, end, cluster=cluster, static_w=100.0)
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


def test_a_failed_rack_cooler_shows_as_one_racks_inlet_and_dies_climbing(tmp_path: Path
                                                                         ) -> None:
    """The simulator's rack_cooling fault (the rack's inlet air 15 °C warmer, over its
    ramp): on the page's lines, that rack's inlet and dies rise, the other racks' and the
    room's (the median of four racks) stay where they were."""
    from fleetwatch.collectors.sim import parse_fault

    now = time.time()
    store = SqliteStore(tmp_path / "c.db")
    sim = FleetSim(SimParams(nodes=8, gpus=2, interval_s=15.0, job_mean_s=1e9, idle_mean_s=1,
                             busy_at_start=1.0, steady_load=True),
                   start_ts=now - 45 * 60, faults=[parse_fault("rack_cooling:rack-01@5m+60m")])
    processor = Processor(store)
    for _ in range(180):
        sim.step()
        processor.process(sim.frames())
    v = read_facility(SqliteStore(tmp_path / "c.db", read_only=True), _default_carbon(),
                      now - 3600, now, now)
    room = v.room["sim"]
    first = next(i for i, x in enumerate(room) if x is not None) + 1  # a whole minute
    last = max(i for i, x in enumerate(room) if x is not None) - 1
    assert abs(room[last] - room[first]) < 2
    for (_, rack), line in v.inlet.means.items():
        if rack == "rack-01":
            assert line[last] - line[first] > 10 and line[last] > room[last] + 10
        else:
            assert abs(line[last] - line[first]) < 2 and abs(line[last] - room[last]) < 2
    die = {rack: line[last] - line[first] for (_, rack), line in v.die.means.items()}
    assert die["rack-01"] > 10 and max(d for r, d in die.items() if r != "rack-01") < 5
    hot = next(r for r in v.racks if r.rack == "rack-01")
    assert hot.inlet_c is not None and hot.inlet_c > max(
        r.inlet_c or 0.0 for r in v.racks if r.rack != "rack-01") + 10
