"""The energy ledger on InfluxDB through InfluxQL (mixed into ``InfluxQLStore``).

A row's series is its device (tags cluster, rack, node, device); its job, user and
team are string fields, not tags: one more series every job would reach InfluxDB
1.x's ``max-series-per-database`` (1,000,000 by default) within days on a large
fleet. A row is stamped within its hour at an offset drawn from its (job, user,
team) (``owner_offset_ms``), so that the owners of one device's hour are points of
their own; InfluxDB replaces a point written again at the same series and time,
so a rewritten hour is one point holding the new totals. Rows written before
(job, user and team as tags, stamped at the hour's start) are read as well; where
both forms hold one row, the newer form wins. The fields of energy measured across gaps
(``ledger.GAP_FIELDS``) are written only where not 0 (a point written again keeps the
fields it is not given; they only grow within an hour) and read as 0 where absent.
Watermarks are ``energy_victoria``'s lines. Watermarks are stamped at the sample they
stand for; a node's are the newest within ``STATE_LOOKBACK_S``
either side of the first sample being integrated. Totals are summed here from
the rows (InfluxQL cannot group by a tag across the row's identity and sum it
per hour in one statement that 1.x, 2.x and 3.x all answer the same).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fleetwatch.pipeline.store.energy_victoria import (
    ROW_MEASUREMENT,
    STATE_MEASUREMENT,
    device_state,
    state_line,
)
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
from fleetwatch.pipeline.store.lprecords import quote
from fleetwatch.pipeline.store.window import INFLUXQL_LIMIT_MS, influxql_ms

_ROW_TAGS = ("cluster", "rack", "node", "device")
_OWNER_FIELDS = ("job", "user", "team")


def owner_offset_ms(job: str, user: str, team: str) -> int:
    """Where within its hour a row of this owner is stamped (0 for none): the same on
    every processor, so a rewrite lands on the same point. Two owners of one device's
    hour share a point only if their offsets meet (about one chance in 3.6 million)."""
    if not (job or user or team):
        return 0
    return zlib.crc32("\x1f".join((job, user, team)).encode()) % (BUCKET_S * 1000)


def row_line(r: EnergyRow) -> str:
    """One ledger row: tags the device's place, fields its sums and owner."""
    fields = ",".join([*(f"{k}={float(getattr(r, k))!r}" for k in ENERGY_FIELDS),
                       *(f"{k}={float(getattr(r, k))!r}" for k in GAP_FIELDS if getattr(r, k)),
                       *(f"{k}={quote(getattr(r, k))}" for k in _OWNER_FIELDS)])
    tag_text = tags(sorted(zip(_ROW_TAGS, r[1:5])))
    stamp = r.bucket_ts * 1000 + owner_offset_ms(r.job, r.user, r.team)
    return f"{ROW_MEASUREMENT}{tag_text} {fields} {stamp}"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class InfluxQLEnergy:
    """Needs the host class's ``_writer`` and ``query`` (InfluxQL, epoch ms)."""

    _writer: Any
    if TYPE_CHECKING:  # provided by InfluxQLStore
        def query(self, influxql: str) -> list[dict[str, Any]]: ...

    def write_energy(self, rows: Sequence[EnergyRow], states: Sequence[DeviceState]) -> None:
        lines = [row_line(r) for r in rows] + [state_line(s) for s in states]
        if lines:
            self._writer.write_lines(lines)

    def _select_rows(self, start_ts: float, end_ts: float, where: str = "") -> list[EnergyRow]:
        """The rows of the hours that start in [start, end) (stamped within their hour)."""
        fields = ", ".join(f'"{f}"' for f in ROW_FIELDS)
        place = ", ".join(f'"{t}"' for t in _ROW_TAGS)
        # The owner as a field, and as the tag of rows written before it became a field.
        owner = ", ".join(f'"{k}"::field AS "{k}", "{k}"::tag AS "{k}_tag"'
                          for k in _OWNER_FIELDS)
        # An end past what InfluxQL takes (a window "with no end") reads as far as it goes.
        stop = -(-int(min(end_ts, INFLUXQL_LIMIT_MS / 1000)) // BUCKET_S) * BUCKET_S
        series = self.query(
            f'SELECT {fields}, {place}, {owner} FROM "{ROW_MEASUREMENT}" WHERE time >= '
            f"{influxql_ms(start_ts * 1000)}ms AND time < {influxql_ms(stop * 1000)}ms{where}")
        found: dict[tuple[object, ...], tuple[tuple[int, bool], EnergyRow]] = {}
        for s in series:
            cols = s["columns"]
            for values in s.get("values", []):
                v = dict(zip(cols, values))
                bucket = bucket_floor(int(v["time"]) / 1000)
                if bucket >= end_ts:
                    continue
                new = v.get("job") is not None  # written with its owner as fields
                owner = [(v.get(k) if new else v.get(f"{k}_tag")) or "" for k in _OWNER_FIELDS]
                row = EnergyRow(bucket, *((v.get(t) or "") for t in _ROW_TAGS), *owner,
                                *(float(v.get(f) or 0.0) for f in ROW_FIELDS))
                key, rank = row[:8], (int(v["time"]), new)
                if key not in found or rank > found[key][0]:
                    found[key] = (rank, row)
        return sorted((row for _, row in found.values()), key=lambda r: r.bucket_ts)

    def energy(self, start_ts: float, end_ts: float, cluster: str | None = None,
               node: str | None = None) -> list[EnergyRow]:
        where = "".join(f' AND "{k}" = {_literal(v)}'
                        for k, v in (("cluster", cluster), ("node", node)) if v is not None)
        first = -(-int(start_ts) // BUCKET_S) * BUCKET_S
        return self._select_rows(first, end_ts, where)

    def energy_state(self, cluster: str, node: str, at_ts: float
                     ) -> tuple[list[DeviceState], list[EnergyRow]]:
        where = f'"cluster" = {_literal(cluster)} AND "node" = {_literal(node)}'
        lo, hi = at_ts - STATE_LOOKBACK_S, at_ts + STATE_LOOKBACK_S
        series = self.query(
            f'SELECT last("ts") AS ts, last("power_w") AS power_w, last("counter_j") AS '
            f'counter_j, last("reading_j") AS reading_j, last("reading_ts") AS reading_ts '
            f'FROM "{STATE_MEASUREMENT}" WHERE {where} AND time >= '
            f'{int(lo * 1000)}ms AND time <= {int(hi * 1000)}ms GROUP BY "device"')
        states = []
        for s in series:
            device = s.get("tags", {}).get("device", "")
            for values in s.get("values", []):
                v = dict(zip(s["columns"], values))
                if v.get("ts") is None:
                    continue
                states.append(device_state(cluster, node, device, v))
        if not states:
            return [], []
        since = bucket_floor(min(s.ts for s in states))
        until = bucket_floor(max(s.ts for s in states)) + BUCKET_S
        return states, self._select_rows(since, until, f" AND {where}")

    def energy_totals(self, start_ts: float, end_ts: float, by: str,
                      per_cluster: bool = False) -> list[EnergyTotal]:
        check_keys(by, per_cluster)
        sums: dict[tuple[int, str, str], list[float]] = {}
        for r in self.energy(start_ts, end_ts):
            key = (r.bucket_ts, r.cluster if per_cluster else "", getattr(r, by))
            a = sums.setdefault(key, [0.0] * 7)
            gpu = r.device.startswith("gpu")
            a[0] += r.energy_j
            a[1] += r.idle_j
            a[2] += r.energy_j if gpu else 0.0
            a[3] += r.seconds if gpu else 0.0
            a[4] += r.idle_s
            a[5] += r.missing_s if gpu else 0.0
            a[6] += r.over_tdp_s
        return [EnergyTotal(b, n, *v, cluster=c)
                for (b, c, n), v in sorted(sums.items(), key=lambda kv: (kv[0][0], kv[0][2],
                                                                         kv[0][1]))]

    def energy_top(self, start_ts: float, end_ts: float, by: str,
                   kg_per_kwh: Mapping[tuple[str, int], float], limit: int,
                   per_cluster: bool = False) -> list[TopLine]:
        check_keys(by, True)
        return top_from_totals(self.energy_totals(start_ts, end_ts, by, per_cluster=True),
                               kg_per_kwh, limit, per_cluster)
