"""Hourly totals on a real VictoriaMetrics: summed by the server in one query, equal to the
rows summed here, and hours already read (totals, a whole hour's rows) not read again until a
write changes them."""

from __future__ import annotations

import random
import time
from typing import Any

from fleetwatch.pipeline.store.energy_cache import HourCache
from fleetwatch.pipeline.store.ledger import TOTAL_KEYS, DeviceState, EnergyRow, EnergyTotal
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.store.helpers import cluster_name, force_flush

# Hours of this test's own (markers name hours, and other tests share the server).
T0 = 1_600_000_000 - 1_600_000_000 % 3600 - random.randrange(1, 20_000) * 3600


def rows_of(c: str, hour: int, scale: float) -> list[EnergyRow]:
    out = []
    for n, job, user in (("n1", "j1", "alice"), ("n2", "j2", "bob"), ("n3", "", "")):
        for d in ("gpu0", "gpu1", "cpu", "rest"):
            gpu = d.startswith("gpu")
            out.append(EnergyRow(hour, c, "r1", n, d, job, user, "ml" if job else "",
                                 scale * (3.5 if gpu else 1.25), scale * (0.5 if gpu else 0.0),
                                 60.0, 15.0 if gpu else 0.0, 5.0 if n == "n3" else 0.0,
                                 2.0 if gpu and n == "n1" else 0.0))
    return out


def summed(rows: list[EnergyRow], by: str) -> list[EnergyTotal]:
    """What ``energy_totals`` means, from the raw rows."""
    acc: dict[tuple[int, str], list[float]] = {}
    for r in rows:
        gpu = r.device.startswith("gpu")
        a = acc.setdefault((r.bucket_ts, getattr(r, by)), [0.0] * 7)
        for i, v in enumerate((r.energy_j, r.idle_j, r.energy_j if gpu else 0.0,
                               r.seconds if gpu else 0.0, r.idle_s,
                               r.missing_s if gpu else 0.0, r.over_tdp_s)):
            a[i] += v
    return [EnergyTotal(b, n, *a) for (b, n), a in sorted(acc.items())]


def test_totals_equal_the_rows_and_closed_hours_are_read_once(victoria):
    c = cluster_name()
    processor = VictoriaMetricsStore(f"http://{victoria.address}")
    dashboard = VictoriaMetricsStore(f"http://{victoria.address}")
    asked: list[dict[str, Any]] = []
    get = dashboard._get

    def counting(path: str, **params: object) -> list[dict[str, Any]]:
        if path == "/api/v1/query_range":
            asked.append(params)
        return get(path, **params)

    dashboard._get = counting  # type: ignore[method-assign]
    # Markers up to the margin before the last look count again: a short one, and a wait.
    dashboard.__dict__["_energy_hours"] = HourCache(margin_s=0.5)

    def states(ts: float) -> list[DeviceState]:
        return [DeviceState(c, n, "gpu0", ts, 1.0, None) for n in ("n1", "n2", "n3")]

    for h in range(3):  # an hour's rows are rewritten as it fills, the watermark on
        for scale in (1.0, 2.0):
            processor.write_energy(rows_of(c, T0 + h * 3600, scale),
                                   states(T0 + h * 3600 + 600 * scale))
    force_flush(victoria.address)
    time.sleep(0.6)
    rows = dashboard.energy(T0, T0 + 3 * 3600, cluster=c)
    assert len(rows) == 36
    asked.clear()  # the rows' own reads
    for by in TOTAL_KEYS:
        got = [t for t in dashboard.energy_totals(T0, T0 + 3 * 3600, by)
               if by != "cluster" or t.name == c]
        mine = {r.node for r in rows} if by == "node" else None
        if mine is not None:
            got = [t for t in got if t.name in mine]
        assert got == summed(rows, by), by
    assert len(asked) == len(TOTAL_KEYS)  # one query per grouping, every field at once

    # Read again: nothing changed, nothing asked. A row written late into the first hour
    # (a node back from a silence books its missing time there): only that hour asked.
    asked.clear()
    assert [t for t in dashboard.energy_totals(T0, T0 + 3 * 3600, "cluster")
            if t.name == c] == summed(rows, "cluster")
    assert asked == []
    # The energy page asks for the rows of one whole hour (when the month's data began).
    whole = dashboard.energy(T0, T0 + 3600)
    assert sorted(whole) == sorted(r for r in rows if r.bucket_ts == T0)
    asked.clear()
    assert dashboard.energy(T0, T0 + 3600) == whole
    assert asked == []
    late = rows_of(c, T0, 3.0)[:1]
    processor.write_energy(late, states(T0 + 3 * 3600 + 60))
    force_flush(victoria.address)
    rows = dashboard.energy(T0, T0 + 3 * 3600, cluster=c)
    asked.clear()
    got = [t for t in dashboard.energy_totals(T0, T0 + 3 * 3600, "cluster") if t.name == c]
    assert got == summed(rows, "cluster")
    assert got[0].energy_j == summed(rows_of(c, T0, 2.0), "cluster")[0].energy_j + 3.5
    assert [(p["start"], p["end"]) for p in asked] == [(T0 + 3600, T0 + 3600)]
    asked.clear()
    assert sorted(dashboard.energy(T0, T0 + 3600)) == sorted(r for r in rows
                                                              if r.bucket_ts == T0)
    assert len(asked) == 7  # read again (a query per field, one for the gap fields)
