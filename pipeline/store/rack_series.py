"""A metric's mean per rack over time: the facility page's inlet air and GPU die lines.

Each device's samples are averaged within a bin first, then the devices of a rack that have
a value in that bin are averaged: a rack's mean die temperature is the mean of its GPUs, not
weighted by which of them sampled more often. VictoriaMetrics computes the same in its query
(``avg by (cluster, rack) (avg_over_time(...))``); SQLite keeps its samples packed per device
(no SQL over values), so it reads its one-minute means and bins them here, in numpy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from fleetwatch.pipeline.store.base import Point, SeriesKey

Rack = tuple[str, str]  # (cluster, rack): rack names repeat across clusters


class RackSeries(NamedTuple):
    """Per rack, one mean per bin (None: no device of the rack had a value in that bin)."""

    start_ms: int        # the first bin's start
    step_ms: int
    bins: int
    means: dict[Rack, list[float | None]]


def bin_step_ms(start_ms: int, end_ms: int, most: int = 240) -> int:
    """A bin of whole minutes that cuts [start, end) into at most ``most`` bins."""
    span = max(end_ms - start_ms, 60_000)
    minutes = -(-span // (60_000 * most))
    return int(minutes) * 60_000


def series_of_points(points: Iterable[Point]) -> list[tuple[SeriesKey, np.ndarray, np.ndarray]]:
    """Points grouped into (series, stamps in ms, values), as ``minute_means`` gives them."""
    acc: dict[SeriesKey, tuple[list[int], list[float]]] = {}
    for key, ts, value in points:
        ts_list, values = acc.setdefault(key, ([], []))
        ts_list.append(ts)
        values.append(value)
    return [(k, np.asarray(t, dtype=np.int64), np.asarray(v, dtype=np.float64))
            for k, (t, v) in acc.items()]


def rack_means(series: Iterable[tuple[SeriesKey, np.ndarray, np.ndarray]], start_ms: int,
               step_ms: int, bins: int, cluster: str | None = None) -> RackSeries:
    """Per (cluster, rack) and bin [start + i*step, start + (i+1)*step), the mean over the
    rack's devices of each device's mean in the bin; NaN samples are skipped."""
    sums: dict[Rack, np.ndarray] = {}
    counts: dict[Rack, np.ndarray] = {}
    for key, ts, values in series:
        if cluster is not None and key.cluster != cluster:
            continue
        idx = (np.asarray(ts, dtype=np.int64) - start_ms) // step_ms
        ok = (idx >= 0) & (idx < bins) & np.isfinite(values)
        if not ok.any():
            continue
        n = np.bincount(idx[ok], minlength=bins)
        total = np.bincount(idx[ok], weights=np.asarray(values)[ok], minlength=bins)
        has = n > 0
        rack = (key.cluster, key.rack)
        s = sums.setdefault(rack, np.zeros(bins))
        c = counts.setdefault(rack, np.zeros(bins))
        s[has] += total[has] / n[has]
        c[has] += 1
    means = {rack: [float(s[i] / counts[rack][i]) if counts[rack][i] else None
                    for i in range(bins)] for rack, s in sums.items()}
    return RackSeries(start_ms, step_ms, bins, dict(sorted(means.items())))
