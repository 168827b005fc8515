"""The energy ledger on VictoriaMetrics (mixed into ``VictoriaMetricsStore``).

Rows are lines of measurement ``fleetwatch_energy`` (series
``fleetwatch_energy_energy_j{cluster,rack,node,device,job,user,team}`` and one
per other field), stamped inside their hour: the bucket start plus how far
into the bucket the integrator had got (the watermark), so each rewrite of an
open hour is a new sample a little later than the last. A bucket's totals
only grow as intervals are added (and a replay reloads them before adding),
so the row is the hour's largest sample: ``max_over_time(...[1h])``, which
holds whether or not the server deduplicates. Watermarks are lines of
``fleetwatch_energystate`` stamped at the sample they stand for; a node's
are found with ``last_over_time`` within ``STATE_LOOKBACK_S`` either side
of the first sample being integrated (a replay starts before the watermark);
a counter that owes energy adds its own reading and the ``ts`` it is for.
The fields of energy measured across gaps (``ledger.GAP_FIELDS``) are written only where
not 0 (most rows have none: no series of them), and read as 0 where there is none.
Rows and watermarks go in one request, with one ``fleetwatch_energyhour_written``
marker per hour the rows are in, stamped with the writer's clock: ``energy_totals``
keeps hours it has read (``energy_cache``) until a marker says they changed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fleetwatch.pipeline.store.energy_cache import ROWS, HourCache, runs
from fleetwatch.pipeline.store.ledger import (
    BUCKET_S,
    ENERGY_FIELDS,
    GAP_FIELDS,
    ROW_FIELDS,
    STATE_LOOKBACK_S,
    DeviceState,
    EnergyRow,
    EnergyTotal,
    TopLine,
    bucket_floor,
    check_keys,
    top_from_totals,
)
from fleetwatch.pipeline.store.lineproto import tags
from fleetwatch.pipeline.store.metricsql import quote

ROW_MEASUREMENT = "fleetwatch_energy"
STATE_MEASUREMENT = "fleetwatch_energystate"
HOUR_MEASUREMENT = "fleetwatch_energyhour"  # one marker per hour a write touched
_ROW_TAGS = ("cluster", "rack", "node", "device", "job", "user", "team")
_MAX_STEPS = 10_000


def row_line(r: EnergyRow, watermark_ts: float) -> str:
    offset = min(max(int((watermark_ts - r.bucket_ts) * 1000), 0), BUCKET_S * 1000 - 1)
    fields = ",".join(f"{k}={float(getattr(r, k))!r}" for k in ENERGY_FIELDS
                      + tuple(k for k in GAP_FIELDS if getattr(r, k)))
    tag_text = tags(sorted(zip(_ROW_TAGS, r[1:8])))
    return f"{ROW_MEASUREMENT}{tag_text} {fields} {r.bucket_ts * 1000 + offset}"


def state_line(s: DeviceState) -> str:
    # -1: the device reported no power / has no energy counter (a field must be a number).
    power = -1.0 if s.power_w is None else s.power_w
    counter = -1.0 if s.counter_j is None else s.counter_j
    tag_text = tags((("cluster", s.cluster), ("device", s.device), ("node", s.node)))
    # A counter that owes: its own reading too, with the ts it belongs to (each field is a
    # series of its own, and a watermark that owes nothing writes none).
    reading = ("" if s.reading_j is None else
               f",reading_j={float(s.reading_j)!r},reading_ts={float(s.ts)!r}")
    return (f"{STATE_MEASUREMENT}{tag_text} ts={float(s.ts)!r},power_w={float(power)!r},"
            f"counter_j={float(counter)!r}{reading} {round(s.ts * 1000)}")


def device_state(cluster: str, node: str, device: str, v: dict[str, Any]) -> DeviceState:
    """A watermark from its fields' newest values (``v``, by field name); the reading only
    where it was written with this watermark (``reading_ts`` is its ``ts``)."""
    power, counter, reading = v.get("power_w"), v.get("counter_j"), v.get("reading_j")
    if reading is not None and v.get("reading_ts") != v["ts"]:
        reading = None
    return DeviceState(cluster, node, device, float(v["ts"]),
                       None if power is None or power < 0 else float(power),
                       None if counter is None or counter < 0 else float(counter),
                       None if reading is None or counter is None or counter < 0
                       else float(reading))


class VictoriaEnergy:
    """Needs the host class's ``_writer`` (line-protocol writer) and ``_get``/``query``."""

    _writer: Any
    if TYPE_CHECKING:  # provided by VictoriaMetricsStore
        def _get(self, path: str, **params: object) -> list[dict[str, Any]]: ...

        def query(self, promql: str, at_ms: int | None = None) -> list[dict[str, Any]]: ...

    def write_energy(self, rows: Sequence[EnergyRow], states: Sequence[DeviceState]) -> None:
        newest: dict[tuple[str, str], float] = {}
        for s in states:
            newest[(s.cluster, s.node)] = max(newest.get((s.cluster, s.node), 0.0), s.ts)
        lines = [row_line(r, newest.get((r.cluster, r.node), r.bucket_ts + BUCKET_S))
                 for r in rows]
        lines += [state_line(s) for s in states]
        # Which hours changed, for readers that keep the others (``energy_cache``).
        wall_ms = round(time.time() * 1000)
        lines += [f"{HOUR_MEASUREMENT},bucket={b} written=1 {wall_ms}"
                  for b in sorted({r.bucket_ts for r in rows})]
        if lines:
            self._writer.write_lines(lines)

    def energy_state(self, cluster: str, node: str, at_ts: float
                     ) -> tuple[list[DeviceState], list[EnergyRow]]:
        sel = f'{{cluster="{quote(cluster)}",node="{quote(node)}"}}'
        # A replay after a crash starts before the watermark: look ahead as far as back.
        at_ms = round((at_ts + STATE_LOOKBACK_S) * 1000)
        found: dict[str, dict[str, float]] = {}
        for field in ("ts", "power_w", "counter_j", "reading_j", "reading_ts"):
            for r in self.query(f"last_over_time({STATE_MEASUREMENT}_{field}{sel}"
                                f"[{2 * STATE_LOOKBACK_S}s])", at_ms):
                found.setdefault(r["metric"].get("device", ""), {})[field] = float(
                    r["value"][1])
        states = [device_state(cluster, node, device, v)
                  for device, v in found.items() if "ts" in v]
        if not states:
            return [], []
        since = bucket_floor(min(s.ts for s in states))
        until = bucket_floor(max(s.ts for s in states)) + BUCKET_S
        return states, self._rows(since, until, sel)

    def energy(self, start_ts: float, end_ts: float, cluster: str | None = None,
               node: str | None = None) -> list[EnergyRow]:
        matchers = [f'{k}="{quote(v)}"' for k, v in (("cluster", cluster), ("node", node))
                    if v is not None]
        first = -(-int(start_ts) // BUCKET_S) * BUCKET_S
        if matchers or int(math.ceil(end_ts)) != first + BUCKET_S:
            return self._rows(first, int(math.ceil(end_ts)), "{" + ",".join(matchers) + "}")
        # One hour of the whole fleet: the energy page asks for the month's first hour on
        # every refresh (when its data began); kept like the totals.
        cache = self._hour_cache()
        epoch = self._look(cache)
        kept = cache.get(ROWS, [first])
        if first in kept:
            return list(kept[first])
        rows = self._rows(first, first + BUCKET_S, "{}")
        cache.put(ROWS, {first: rows}, epoch)
        return list(rows)

    def _rows(self, first: int, end: int, selector: str) -> list[EnergyRow]:
        """Rows of the buckets starting in [first, end): each field's largest sample per hour."""
        rows: dict[tuple[Any, ...], dict[str, float]] = {}
        last = end - 1 - (end - 1) % BUCKET_S
        while first <= last:
            chunk_last = min(last, first + (_MAX_STEPS - 1) * BUCKET_S)
            # The gap fields, few rows have: one query for the four of them.
            gaps = (f'{{__name__=~"{ROW_MEASUREMENT}_({"|".join(GAP_FIELDS)})"'
                    f'{"," + selector[1:-1] if selector[1:-1] else ""}}}')
            for field in (*ENERGY_FIELDS, None):
                series = gaps if field is None else f"{ROW_MEASUREMENT}_{field}{selector}"
                # The value at t is the max over (t - 1h - 1ms, t - 1ms]: the bucket t - 1h.
                result = self._get("/api/v1/query_range",
                                   query=f"max_over_time({series}[{BUCKET_S}s] offset 1ms)"
                                         + (" keep_metric_names" if field is None else ""),
                                   start=first + BUCKET_S, end=chunk_last + BUCKET_S,
                                   step=f"{BUCKET_S}s", nocache=1)
                for r in result:
                    labels = tuple(r["metric"].get(k, "") for k in _ROW_TAGS)
                    name = field or r["metric"].get("__name__", "")[len(ROW_MEASUREMENT) + 1:]
                    for t, v in r["values"]:
                        bucket = round(float(t)) - BUCKET_S
                        rows.setdefault((bucket, *labels), {})[name] = float(v)
            first = chunk_last + BUCKET_S
        out = [EnergyRow(k[0], *k[1:], *(v.get(f, 0.0) for f in ROW_FIELDS))
               for k, v in rows.items()]
        out.sort(key=lambda r: r.bucket_ts)
        return out


    def energy_totals(self, start_ts: float, end_ts: float, by: str,
                      per_cluster: bool = False) -> list[EnergyTotal]:
        """Hours kept since an earlier read (``energy_cache``) are not read again; the
        others in one query per run of hours, every field at once, summed by the server."""
        check_keys(by, per_cluster)
        first = -(-int(start_ts) // BUCKET_S) * BUCKET_S
        last = int(math.ceil(end_ts)) - 1
        last -= last % BUCKET_S
        wanted = range(first, last + 1, BUCKET_S)
        cache = self._hour_cache()
        epoch = self._look(cache)
        kind = f"{by} per cluster" if per_cluster else by
        kept = cache.get(kind, wanted)
        read: dict[int, list[EnergyTotal]] = {b: [] for b in wanted if b not in kept}
        for run_first, run_last in runs(read, _MAX_STEPS):
            for t in self._read_totals(run_first, run_last, by, per_cluster):
                read[t.bucket_ts].append(t)
        cache.put(kind, read, epoch)
        return sorted((t for lines in (*kept.values(), *read.values()) for t in lines),
                      key=lambda t: (t.bucket_ts, t.name, t.cluster))

    def _read_totals(self, first: int, last: int, by: str, per_cluster: bool = False
                     ) -> list[EnergyTotal]:
        """The hours [first, last] by ``by`` (and cluster): each field summed apart for GPUs
        and for the other devices (``gpu`` label), as ``EnergyTotal`` splits them."""
        group = f"{by}, cluster" if per_cluster else by
        result = self._get("/api/v1/query_range", query=(
            f"sum by ({group}, __name__, gpu) (label_replace(max_over_time("
            f'{{__name__=~"{ROW_MEASUREMENT}_({"|".join(ENERGY_FIELDS)})"}}'
            f'[{BUCKET_S}s] offset 1ms) keep_metric_names, "gpu", "1", "device", '
            f'"gpu[0-9]+"))'),
            start=first + BUCKET_S, end=last + BUCKET_S, step=f"{BUCKET_S}s", nocache=1)
        sums: dict[tuple[int, str, str], dict[tuple[str, bool], float]] = {}
        for r in result:
            field = r["metric"].get("__name__", "")[len(ROW_MEASUREMENT) + 1:]
            gpu = r["metric"].get("gpu") == "1"
            name = r["metric"].get(by, "")
            cluster = r["metric"].get("cluster", "") if per_cluster else ""
            for t, v in r["values"]:
                sums.setdefault((round(float(t)) - BUCKET_S, name, cluster), {})[
                    (field, gpu)] = float(v)
        out = []
        for (bucket, name, cluster), v in sorted(sums.items()):
            def both(field: str, v: dict[tuple[str, bool], float] = v) -> float:
                return v.get((field, True), 0.0) + v.get((field, False), 0.0)
            out.append(EnergyTotal(bucket, name, both("energy_j"), both("idle_j"),
                                   v.get(("energy_j", True), 0.0),
                                   v.get(("seconds", True), 0.0), both("idle_s"),
                                   v.get(("missing_s", True), 0.0), both("over_tdp_s"),
                                   cluster))
        return out

    def _look(self, cache: HourCache) -> int:
        """Drop the kept hours written since the last look; the epoch to keep reads under."""
        now = time.time()
        span = cache.lookback(now)
        return cache.changed(self._hours_written(*span) if span else (), now)

    def _hours_written(self, since_ts: float, until_ts: float) -> list[int]:
        """The hours whose rows were written with a stamp in [since, until]."""
        at_ms = round(until_ts * 1000)
        # nocache: the server keeps instant answers too, and would hide a marker just written.
        found = self._get("/api/v1/query", query=(
            f"last_over_time({HOUR_MEASUREMENT}_written"
            f"[{max(at_ms - round(since_ts * 1000), 1)}ms])"), time=f"{at_ms / 1000:.3f}",
            nocache=1)
        return [int(r["metric"]["bucket"]) for r in found
                if r["metric"].get("bucket", "").isdigit()]

    def _hour_cache(self) -> HourCache:
        cache = self.__dict__.get("_energy_hours")
        if cache is None:  # no __init__ of its own: the host class has one
            cache = self.__dict__.setdefault("_energy_hours", HourCache())
        return cache

    def energy_top(self, start_ts: float, end_ts: float, by: str,
                   kg_per_kwh: Mapping[tuple[str, int], float], limit: int,
                   per_cluster: bool = False) -> list[TopLine]:
        check_keys(by, True)
        return top_from_totals(self.energy_totals(start_ts, end_ts, by, per_cluster=True),
                               kg_per_kwh, limit, per_cluster)
