"""Energy per rack (the facility page's) on every store: summed by the store per cluster and
rack (rack names repeat across clusters), each cluster's part at its own PUE."""

from __future__ import annotations

import dataclasses
import random
import time

import pytest

from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.dashboards.facility_data import rack_energy
from fleetwatch.pipeline.store.ledger import EnergyRow
from tests.energy.test_ledger_contract import ledger  # noqa: F401 - the stores fixture
from tests.store.conftest import influxdb  # noqa: F401 - the server fixture
from tests.store.helpers import cluster_name

# Two hours of this test's own (other tests share the servers), in 2018.
H = 1_514_764_800 + random.randrange(0, 11) * 31 * 86400 + 5 * 86400


def test_rack_energy_per_cluster_on_every_store(ledger):  # noqa: F811
    open_store, flush = ledger
    store = open_store()
    east, west = cluster_name(), cluster_name()

    def row(hour: int, c: str, rack: str, node: str, device: str, kwh: float) -> EnergyRow:
        return EnergyRow(hour, c, rack, node, device, "", "", "", kwh * J_PER_KWH, 0.0,
                         3600.0, 0.0, 0.0, 0.0)

    store.write_energy([row(H, east, "r1", "n1", "gpu0", 3.0), row(H, east, "r1", "n1", "cpu", 1.0),
                        row(H + 3600, east, "r1", "n2", "rest", 0.5),
                        row(H, east, "r2", "n3", "gpu0", 2.0),
                        row(H, west, "r1", "n1", "gpu0", 7.0)], [])
    flush()
    time.sleep(0.6)  # VictoriaMetrics: the samples searchable
    model = dataclasses.replace(
        build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.10, "USD"),
        clusters={east: build_model("FRA", 50.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")})
    totals = [t for t in store.energy_totals(H, H + 7200, "rack", per_cluster=True)
              if t.cluster in (east, west)]
    got = {k: (pytest.approx(a), pytest.approx(b))
           for k, (a, b) in rack_energy(totals, model).items()}
    assert got == {(east, "r1"): (4.5, 4.5 * 1.5), (east, "r2"): (2.0, 2.0 * 1.5),
                   (west, "r1"): (7.0, 7.0 * 1.2)}
