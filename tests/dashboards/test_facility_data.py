"""The facility page's per-rack sums, pure: bins of rack means, power now, energy and PUE."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fleetwatch.carbon import J_PER_KWH, build_model
from fleetwatch.dashboards.facility_data import (
    facility_view,
    rack_energy,
    rack_power,
    room_median,
)
from fleetwatch.pipeline.store.base import SeriesKey
from fleetwatch.pipeline.store.ledger import EnergyTotal
from fleetwatch.pipeline.store.rack_series import (
    RackSeries,
    bin_step_ms,
    rack_means,
    series_of_points,
)


def key(metric: str, node: str, device: str, rack: str = "r1", cluster: str = "c") -> SeriesKey:
    return SeriesKey(metric, cluster, rack, node, device)


def test_a_rack_mean_is_the_mean_of_its_devices_means_not_of_their_samples() -> None:
    # gpu0 sampled 3 times in the first minute (60, 60, 60), gpu1 once (90): the rack's
    # mean is (60 + 90) / 2, not (60 * 3 + 90) / 4; NaN samples and other racks kept apart.
    points = [(key("t", "n1", "gpu0"), 0, 60.0), (key("t", "n1", "gpu0"), 20_000, 60.0),
              (key("t", "n1", "gpu0"), 40_000, 60.0), (key("t", "n1", "gpu1"), 59_999, 90.0),
              (key("t", "n1", "gpu1"), 60_000, float("nan")),
              (key("t", "n2", "gpu0", rack="r2"), 61_000, 50.0),
              (key("t", "n2", "gpu0", rack="r2"), 180_000, 99.0)]  # past the last bin
    got = rack_means(series_of_points(points), 0, 60_000, 3)
    assert got.means == {("c", "r1"): [75.0, None, None], ("c", "r2"): [None, 50.0, None]}
    assert rack_means(series_of_points(points), 0, 60_000, 3, cluster="x").means == {}


def test_rack_names_repeat_across_clusters_and_stay_apart() -> None:
    points = [(key("t", "n1", "gpu0", cluster="a"), 0, 10.0),
              (key("t", "n1", "gpu0", cluster="b"), 0, 30.0)]
    got = rack_means(series_of_points(points), 0, 60_000, 1)
    assert got.means == {("a", "r1"): [10.0], ("b", "r1"): [30.0]}


def test_bins_are_whole_minutes_and_at_most_240() -> None:
    assert bin_step_ms(0, 3600_000) == 60_000
    assert bin_step_ms(0, 7 * 86400_000) == 42 * 60_000  # 7 d / 240 = 42 min
    assert 7 * 86400_000 / bin_step_ms(0, 7 * 86400_000) <= 240


def test_power_now_sums_fresh_gpus_cpus_and_the_static_rest_per_node() -> None:
    now = 1_000_000_000
    gpu = [(key("gpu_power_w", "n1", "gpu0"), now - 5_000, 300.0),
           (key("gpu_power_w", "n1", "gpu1"), now - 5_000, 250.0),
           (key("gpu_power_w", "n2", "gpu0"), now - 400_000, 700.0),  # stale: not now
           (key("gpu_power_w", "n3", "gpu0", rack="r2"), now, 100.0)]
    cpu = [(key("host_cpu_power_w", "n1", "host"), now - 1_000, 120.0),
           (key("host_cpu_power_w", "n4", "host"), now - 1_000, 80.0)]  # a CPU-only node
    got = rack_power(gpu, cpu, now, static_w=50.0)
    assert got == {("c", "r1"): (300 + 250 + 120 + 80 + 2 * 50.0, 2, 2),
                   ("c", "r2"): (100 + 50.0, 1, 1)}


def test_rack_energy_is_the_ledger_sum_and_facility_takes_each_clusters_pue() -> None:
    model = dataclasses.replace(
        build_model("USA", 400.0, "", "avg_CI", 1.2, "", "pue", 0.1, "USD"),
        clusters={"eu": build_model("FRA", 50.0, "", "avg_CI", 1.5, "", "pue", 0.1, "USD")})
    totals = [EnergyTotal(0, "r1", 2 * J_PER_KWH, 0, 0, 0, 0, 0, 0, cluster="us"),
              EnergyTotal(3600, "r1", 1 * J_PER_KWH, 0, 0, 0, 0, 0, 0, cluster="us"),
              EnergyTotal(0, "r1", 4 * J_PER_KWH, 0, 0, 0, 0, 0, 0, cluster="eu")]
    got = rack_energy(totals, model)
    assert got[("us", "r1")] == pytest.approx((3.0, 3.0 * 1.2))
    assert got[("eu", "r1")] == pytest.approx((4.0, 4.0 * 1.5))


def test_room_is_the_median_of_racks_and_a_view_without_data_is_empty() -> None:
    inlet = RackSeries(0, 60_000, 2, {("c", "a"): [20.0, None], ("c", "b"): [22.0, None],
                                      ("c", "z"): [30.0, 31.0], ("d", "a"): [18.0, 19.0]})
    assert room_median(inlet) == {"c": [22.0, 31.0], "d": [18.0, 19.0]}
    empty = RackSeries(0, 60_000, 2, {})
    v = facility_view({}, {}, empty, empty)
    assert v.empty and v.racks == () and v.room == {}
    v = facility_view({("c", "a"): (1.0, 1.2)}, {}, inlet, empty)
    a = next(r for r in v.racks if (r.cluster, r.rack) == ("c", "a"))
    assert (a.power_w, a.kwh, a.inlet_c, a.die_c) == (None, 1.0, 20.0, None)
    assert np.isclose(a.facility_kwh, 1.2)
