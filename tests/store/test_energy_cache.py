"""The hour cache of the VictoriaMetrics ledger reads (``energy_cache``), without a server."""

from __future__ import annotations

from fleetwatch.pipeline.store.energy_cache import HourCache, runs
from fleetwatch.pipeline.store.ledger import EnergyTotal

H = 1_651_795_200


def total(bucket: int, energy: float) -> EnergyTotal:
    return EnergyTotal(bucket, "c1", energy, 0.0, energy, 60.0, 0.0, 0.0, 0.0)


def test_an_hour_is_kept_until_a_marker_says_it_changed():
    cache = HourCache(margin_s=900.0)  # not the default: any margin
    assert cache.lookback(1000.0) is None  # nothing kept: no markers to read
    epoch = cache.changed((), 1000.0)
    cache.put("cluster", {H: [total(H, 1.0)], H + 3600: []}, epoch)
    assert cache.get("cluster", [H, H + 3600, H + 7200]) == {H: [total(H, 1.0)], H + 3600: []}
    assert cache.get("job", [H]) == {}  # another grouping is read on its own
    # Markers are read from the last look, less the margin, to past now by the margin.
    assert cache.lookback(1060.0) == (100.0, 1960.0)
    cache.changed([H], 1060.0)
    assert cache.get("cluster", [H, H + 3600]) == {H + 3600: []}
    assert cache.lookback(1120.0) == (160.0, 2020.0)


def test_a_read_that_may_predate_a_write_is_not_kept():
    cache = HourCache()
    cache.put("cluster", {H: [total(H, 1.0)]}, cache.changed((), 0.0))
    epoch = cache.changed((), 10.0)  # a reader looks, then reads H + 3600 ...
    cache.changed([H], 20.0)         # ... while another finds H written
    cache.put("cluster", {H + 3600: [total(H + 3600, 2.0)]}, epoch)
    assert cache.get("cluster", [H, H + 3600]) == {}


def test_the_oldest_hours_go_first_past_the_bound():
    cache = HourCache(max_lines=6)
    hours = [H + i * 3600 for i in range(5)]
    cache.put("cluster", {h: [total(h, 1.0), total(h, 2.0)] for h in hours},
              cache.changed((), 0.0))
    assert sorted(cache.get("cluster", hours)) == hours[2:]
    cache.changed([hours[3]], 1.0)  # a dropped hour frees its lines
    cache.put("job", {H: [total(H, 1.0)] * 2}, cache.changed((), 2.0))
    assert sorted(cache.get("cluster", hours)) == [hours[2], hours[4]]
    assert cache.get("job", [H]) == {H: [total(H, 1.0)] * 2}


def test_runs_of_consecutive_hours():
    hours = [H, H + 3600, H + 7200, H + 5 * 3600, H + 6 * 3600]
    assert runs(hours, 10) == [(H, H + 7200), (H + 5 * 3600, H + 6 * 3600)]
    assert runs(hours, 2) == [(H, H + 3600), (H + 7200, H + 7200),
                              (H + 5 * 3600, H + 6 * 3600)]
    assert runs([], 10) == []
