"""The energy page's top jobs and users on every store (SQLite, a real VictoriaMetrics and
InfluxDB, whose totals are summed differently): each cluster's part priced with its own
grid and PUE, and the same figures as ``fleetwatch report`` over the same hours."""

from __future__ import annotations

import dataclasses
import random
import time
import uuid

import pytest

from fleetwatch import report
from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.dashboards import energy_data
from fleetwatch.pipeline.store.ledger import EnergyRow
from tests.energy.test_ledger_contract import ledger  # noqa: F401 - the stores fixture
from tests.store.conftest import influxdb  # noqa: F401 - the server fixture
from tests.store.helpers import cluster_name

# Two hours of this test's own (other tests share the servers), in 2019.
H = 1_546_300_800 + random.randrange(0, 11) * 31 * 86400 + 3 * 86400


def test_top_jobs_and_users_agree_with_the_report_on_every_store(ledger):  # noqa: F811
    open_store, flush = ledger
    store = open_store()
    east, west = cluster_name(), cluster_name()
    alice, bob = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"

    def row(hour: int, c: str, node: str, job: str, user: str, kwh: float) -> EnergyRow:
        return EnergyRow(hour, c, "r1", node, "gpu0", job, user, "t", kwh * J_PER_KWH, 0.0,
                         3600.0, 0.0, 0.0, 0.0)

    rows = [row(H, east, "node001", "777", alice, 3.0),
            row(H + 3600, east, "node001", "777", alice, 3.0),
            row(H, west, "node001", "777", alice, 2.0),
            row(H + 3600, west, "node002", "778", bob, 1.0)]
    store.write_energy(rows, [])
    flush()
    time.sleep(0.6)  # VictoriaMetrics: the samples searchable
    model = dataclasses.replace(
        build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.10, "USD"),
        clusters={east: build_model("FRA", 50.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD")})
    v = energy_data.read_energy(store, model, H, H + 7200, H + 7200, limit=100)
    mine = {east, west}
    jobs = {(j.cluster, j.name): (pytest.approx(j.kwh), pytest.approx(j.co2e_kg))
            for j in v.jobs if j.cluster in mine}
    users = {u.name: (pytest.approx(u.kwh), pytest.approx(u.co2e_kg))
             for u in v.users if u.name in (alice, bob)}
    r = report.build([x for x in store.energy(H, H + 7200) if x.cluster in mine], model,
                     H, H + 7200, now=H + 7200)
    assert jobs == {(x.cluster, x.name): (x.it_kwh, x.co2e_kg) for x in r.lines["job"]}
    assert users == {x.name: (x.it_kwh, x.co2e_kg) for x in r.lines["user"]}
    assert jobs[east, "777"] == (6.0, 6.0 * 1.5 * 0.05)
    assert jobs[west, "777"] == (2.0, 2.0 * 1.2 * 0.4)
    assert users[alice] == (8.0, 6.0 * 1.5 * 0.05 + 2.0 * 1.2 * 0.4)
