"""One cluster's report on a real VictoriaMetrics, priced with that cluster's own grid."""

from __future__ import annotations

import csv
import dataclasses
import json
import random
import time

import pytest

from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.pipeline.store.ledger import EnergyRow
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from fleetwatch.report_files import write_report
from tests.store.helpers import cluster_name, force_flush

# An hour of this test's own, early in its month (other tests share the server).
H = 1_577_836_800 + random.randrange(0, 24) * 31 * 86400 + 5 * 86400  # from 2020-01


def test_a_clusters_report_reads_its_rows_only_at_its_own_grid(victoria, tmp_path):
    eu, us = cluster_name(), cluster_name()
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    rows = [EnergyRow(H, c, "r1", "node001", "gpu0", "777", "u", "t", kwh * J_PER_KWH, 0.0,
                      3600.0, 0.0, 0.0, 0.0) for c, kwh in ((eu, 1.0), (us, 2.0))]
    store.write_energy(rows, [])
    force_flush(victoria.address)
    time.sleep(0.6)
    model = dataclasses.replace(
        build_model("USA", 400.0, "", "avg_CI", 1.5, "", "pue", 0.10, "USD"),
        clusters={eu: build_model("FRA", 50.0, "", "avg_CI", 1.1, "", "pue", 0.10, "USD")})
    month = time.strftime("%Y-%m", time.gmtime(H))
    for c, kwh, kg in ((eu, 1.0, 1.0 * 1.1 * 0.05), (us, 2.0, 2.0 * 1.5 * 0.4)):
        paths = write_report(store, model, month, tmp_path / "out", cluster=c, now=time.time())
        summary = json.loads(paths["json"].read_text())
        assert paths["csv"].name == f"fleetwatch-energy-{month}-{c}.csv"
        assert summary["it_kwh"] == pytest.approx(kwh) and summary["co2e_kg"] == pytest.approx(kg)
        with paths["csv"].open() as f:
            nodes = [(r["cluster"], r["name"]) for r in csv.DictReader(f) if r["kind"] == "node"]
        assert nodes == [(c, "node001")]
