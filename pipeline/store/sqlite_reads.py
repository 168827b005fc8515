"""The SQLite store's reads of frames: the newest value, raw ranges, rollups, and
minute means in bulk for training."""

from __future__ import annotations

import sqlite3
import struct
from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fleetwatch.catalogue import catalogue
from fleetwatch.pipeline.store.base import (
    MINUTE_MS,
    RAW_SPAN_MS,
    Point,
    SeriesKey,
    gpu_index,
)
from fleetwatch.pipeline.store.rack_series import RackSeries, rack_means, series_of_points
from fleetwatch.pipeline.store.sqlite_records import guarded

Ident = tuple[str, str, str, str]  # (cluster, rack, node, device)
# The newest raw rows ``latest`` walks whatever their rollups: the minutes still open
# (``sqlite_rollup.ROLLUP_GRACE_MS``) and a minute's margin.
RAW_TAIL_MS = 3 * MINUTE_MS
# Devices named in SQL as bound parameters, below SQLite's oldest limit of 999.
_SQL_IN_MAX = 900


class SqliteReads:
    """Reads of ``SqliteStore`` (which supplies ``_conn``, ``path``, ``_refresh`` and the id
    and layout caches)."""

    path: str
    _idents: dict[int, Ident]
    _names: dict[int, tuple[str, ...]]
    _index: dict[int, dict[str, int]]

    if TYPE_CHECKING:  # provided by SqliteStore
        def _conn(self) -> sqlite3.Connection: ...
        def _refresh(self) -> None: ...

    def _devices(self, node: str | None, device: str | None,
                 cluster: str | None = None) -> list[int]:
        self._refresh()
        return [did for did, (c, _, n, d) in self._idents.items()
                if (node is None or n == node) and (device is None or d == device)
                and (cluster is None or c == cluster)]

    def _key(self, metric: str, did: int) -> SeriesKey:
        return SeriesKey(metric, *self._idents[did])

    @guarded("read")
    def latest(self, metric: str, since_ms: int) -> list[Point]:
        """Each device's newest value of ``metric`` at or after ``since_ms``. Only the raw
        rows not rolled up yet (the last ``RAW_TAIL_MS`` and the dirty minutes) are walked;
        for the others each device's newest rolled minute holding the metric is found by
        its (did, ts) key and that minute's raw rows read: a week's window costs about as
        much as a minute's, not a walk of every row of the week (seconds a read)."""
        self._refresh()
        layouts = [lid for lid, names in self._index.items() if metric in names]
        conn = self._conn()
        (top,) = conn.execute("SELECT MAX(ts) FROM samples").fetchone()
        if not layouts or top is None:
            return []
        tail = max(since_ms, top - RAW_TAIL_MS)
        newest = self._walk(metric, tail, top + 1, {})
        fresh = set(newest)  # newer than any rolled minute: not looked up below
        for (minute,) in conn.execute(
                "SELECT minute FROM dirty_minutes WHERE minute > ? AND minute < ? "
                "ORDER BY minute DESC", (since_ms - MINUTE_MS, tail)).fetchall():
            self._walk(metric, max(minute, since_ms), min(minute + MINUTE_MS, tail), newest)
        if since_ms < tail:
            try:
                self._rolled(metric, layouts, since_ms, tail, fresh, newest)
            except sqlite3.OperationalError:  # busy, locked, I/O: said by ``guarded``
                raise
            except sqlite3.DatabaseError:  # damaged rollups: the raw rows still answer
                self._walk(metric, since_ms, tail, newest)
        return sorted(newest.values(), key=lambda p: (p[0].node, p[0].device))

    def _walk(self, metric: str, start_ms: int, end_ms: int, newest: dict[int, Point]
              ) -> dict[int, Point]:
        """Keep in ``newest`` each device's newest raw value of ``metric`` in [start, end)
        when newer than the one it holds."""
        index = self._index
        found: set[int] = set()
        for ts, did, lid, vals in self._conn().execute(
                "SELECT ts, did, layout, vals FROM samples WHERE ts >= ? AND ts < ? "
                "ORDER BY ts DESC", (start_ms, end_ms)):
            if did in found:
                continue
            i = index[lid].get(metric)
            if i is not None:
                found.add(did)
                old = newest.get(did)
                if old is None or ts > old[1]:
                    newest[did] = (self._key(metric, did), ts, _value(vals, i))
        return newest

    def _rolled(self, metric: str, layouts: list[int], since_ms: int, end_ms: int,
                skip: set[int], newest: dict[int, Point]) -> None:
        """For each device but ``skip``: its newest rolled minute before ``end_ms`` with a
        layout holding ``metric``, then that minute's newest raw row holding it."""
        conn, index = self._conn(), self._index
        marks = ",".join("?" * len(layouts))
        first = since_ms - since_ms % MINUTE_MS
        for did in list(self._idents):
            if did in skip:
                continue
            row = conn.execute(f"SELECT ts FROM rollup_1m WHERE did = ? AND ts >= ? AND ts < ? "
                               f"AND layout IN ({marks}) ORDER BY ts DESC LIMIT 1",
                               [did, first, end_ms, *layouts]).fetchone()
            if row is None or (did in newest and newest[did][1] >= row[0] + MINUTE_MS):
                continue
            for ts, lid, vals in conn.execute(
                    "SELECT ts, layout, vals FROM samples WHERE ts >= ? AND ts < ? AND did = ? "
                    "ORDER BY ts DESC", (max(row[0], since_ms), min(row[0] + MINUTE_MS, end_ms),
                                         did)):
                i = index[lid].get(metric)
                if i is not None:
                    old = newest.get(did)
                    if old is None or ts > old[1]:
                        newest[did] = (self._key(metric, did), ts, _value(vals, i))
                    break

    @guarded("read")
    def newest_ms(self, metric: str, since_ms: int, until_ms: int,
                  cluster: str | None = None) -> int | None:
        """Walked back on the (ts, did) key from ``until_ms``: the first row of a layout
        holding ``metric`` ends it (a few rows where that metric comes each tick)."""
        self._refresh()
        lids = [lid for lid, names in self._index.items() if metric in names]
        if not lids:
            return None
        sql = (f"SELECT ts, did FROM samples WHERE ts <= ? AND ts >= ? "
               f"AND layout IN ({','.join('?' * len(lids))})")
        args: list[int] = [until_ms, since_ms, *lids]
        wanted = None
        if cluster is not None:
            dids = self._devices(None, None, cluster)
            if not dids:
                return None
            if len(dids) <= _SQL_IN_MAX:
                sql += f" AND did IN ({','.join('?' * len(dids))})"
                args += dids
            else:  # too many to bind: the cluster's rows picked as they come
                wanted = set(dids)
        rows = self._conn().execute(sql + " ORDER BY ts DESC", args)
        return next((int(ts) for ts, did in rows if wanted is None or did in wanted), None)

    @guarded("read")
    def newest_sample_ms(self, node: str, cluster: str, since_ms: int, before_ms: int
                         ) -> int | None:
        """The time of the node's newest sample in [since, before), any metric, or None:
        raw where kept, else its newest minute rolled up (the minute's start). The rollups'
        (did, ts) key gives that minute; raw rows are walked back from ``before_ms`` only
        to it (the (ts, did) key: short where the fleet stopped with the node)."""
        dids = self._devices(node, None, cluster)
        if not dids:
            return None
        marks = ",".join("?" * len(dids))
        conn = self._conn()
        (rolled,) = conn.execute(f"SELECT MAX(ts) FROM rollup_1m WHERE did IN ({marks}) "
                                 "AND ts >= ? AND ts < ?", [*dids, since_ms, before_ms]
                                 ).fetchone()
        raw = conn.execute(f"SELECT ts FROM samples WHERE ts >= ? AND ts < ? AND did IN "
                           f"({marks}) ORDER BY ts DESC LIMIT 1",
                           [since_ms if rolled is None else rolled, before_ms, *dids]
                           ).fetchone()
        return int(raw[0]) if raw is not None else None if rolled is None else int(rolled)

    @guarded("read")
    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None, cluster: str | None = None) -> list[Point]:
        if end_ms - start_ms > RAW_SPAN_MS:
            return [(key, ts, total / n) for key, ts, n, total, _, _ in
                    self.rollups(metric, start_ms, end_ms, node, device, cluster)]
        return list(self._raw(metric, start_ms, end_ms, self._devices(node, device, cluster)))

    def _raw(self, metric: str, start_ms: int, end_ms: int, dids: list[int]) -> Iterator[Point]:
        """The samples of ``dids`` in [start, end). The key is (ts, device), so SQLite walks
        the window's rows either way; the devices are picked there, in C, so that one node's
        hour decodes that node's rows, not the whole fleet's (8 s for 2,048 GPUs)."""
        if not dids:
            return
        index = self._index
        sql = "SELECT ts, did, layout, vals FROM samples WHERE ts >= ? AND ts < ?"
        args: list[int] = [start_ms, end_ms]
        wanted = None
        if len(dids) <= _SQL_IN_MAX:
            sql += f" AND did IN ({','.join('?' * len(dids))})"
            args += dids
        elif len(dids) < len(self._idents):  # too many to bind: most rows are wanted anyway
            wanted = set(dids)
        for ts, did, lid, vals in self._conn().execute(sql + " ORDER BY ts", args):
            if (wanted is None or did in wanted) and (i := index[lid].get(metric)) is not None:
                yield self._key(metric, did), ts, _value(vals, i)

    def export(self, start_ms: int = 0, end_ms: int = 1 << 62) -> Iterator[Point]:
        """Every raw point in [start, end), in time order (like VictoriaMetrics' export)."""
        self._refresh()
        for ts, did, lid, vals in self._conn().execute(
                "SELECT ts, did, layout, vals FROM samples WHERE ts >= ? AND ts < ? ORDER BY ts",
                (start_ms, end_ms)):
            for name, value in zip(self._names[lid], array("d", vals)):
                yield self._key(name, did), ts, value

    @guarded("read")
    def raw_span(self, start_ms: int, end_ms: int, cluster: str | None = None
                 ) -> tuple[int, int] | None:
        """The first and last time of the raw samples in [start, end), any metric, of
        ``cluster`` (None: any), or None: two walks of the (ts, did) key, cheap however many
        rows lie between when no cluster is named (the minute rollups miss the minutes not
        rolled up yet, e.g. after a kill -9)."""
        where, args = "ts >= ? AND ts < ?", [start_ms, end_ms]
        if cluster is not None:
            dids = self._devices(None, None, cluster)
            if not dids:
                return None
            where += f" AND did IN ({','.join('?' * len(dids))})"
            args += dids
        conn = self._conn()
        first = conn.execute(f"SELECT ts FROM samples WHERE {where} ORDER BY ts LIMIT 1",
                             args).fetchone()
        if first is None:
            return None
        (last,) = conn.execute(f"SELECT ts FROM samples WHERE {where} ORDER BY ts DESC "
                               "LIMIT 1", args).fetchone()
        return int(first[0]), int(last)

    @guarded("read")
    def count(self) -> int:
        """How many points (one metric of one device at one instant) the store holds."""
        (n,) = self._conn().execute(
            "SELECT coalesce(sum(length(vals)), 0) / 8 FROM samples").fetchone()
        return int(n)

    @guarded("read")
    def rollups(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
                device: str | None = None, cluster: str | None = None
                ) -> list[tuple[SeriesKey, int, int, float, float, float]]:
        """(series, minute, count, sum, min, max) of ``metric``, oldest first."""
        dids = self._devices(node, device, cluster)
        if not dids:
            return []
        merged: dict[tuple[int, int], list[float]] = {}
        marks = ",".join("?" * len(dids))
        for did, ts, lid, n, sums, mins, maxs in self._conn().execute(
                f"SELECT did, ts, layout, n, sums, mins, maxs FROM rollup_1m "
                f"WHERE did IN ({marks}) AND ts >= ? AND ts < ?", (*dids, start_ms, end_ms)):
            i = self._index[lid].get(metric)
            if i is None:
                continue
            row = (n, _value(sums, i), _value(mins, i), _value(maxs, i))
            have = merged.get((did, ts))
            if have is None:
                merged[(did, ts)] = list(row)
            else:  # the device changed layout within this minute
                have[0] += row[0]
                have[1] += row[1]
                have[2], have[3] = min(have[2], row[2]), max(have[3], row[3])
        return [(self._key(metric, did), ts, int(n), s, lo, hi)
                for (did, ts), (n, s, lo, hi) in sorted(merged.items(), key=lambda x: x[0][1])]

    @guarded("read")
    def minute_means(self, metrics: Sequence[str], start_ms: int, end_ms: int,
                     dids: Sequence[int] | None = None, every_ms: int = MINUTE_MS
                     ) -> dict[str, list[tuple[SeriesKey, np.ndarray, np.ndarray]]]:
        """Minute means of several metrics in one pass over the rollups of [start, end):
        per metric, per series, (minute starts in ms, means). For bulk readers (training
        reads a week of a whole fleet): ``rollups`` reads every row once per metric and
        builds a tuple per point. A device that changed layout within a minute has one
        mean per layout there. One range query per device on the (device, minute) key:
        a query on the minute alone scans the whole table (a week of a 1,000-GPU fleet is
        ~10 GB of rollups) for each day a reader asks for. ``dids``: of these devices only
        (every device's rows are read otherwise, whatever metrics it has); ``every_ms``: only
        the minutes that start on a multiple of it (picked by SQLite, in C)."""
        self._refresh()
        wanted = list(metrics)
        out: dict[str, list[tuple[SeriesKey, np.ndarray, np.ndarray]]] = {m: [] for m in wanted}
        conn = self._conn()
        for did in sorted(self._idents) if dids is None else sorted(dids):
            rows = conn.execute("SELECT ts, layout, n, sums FROM rollup_1m "
                                "WHERE did = ? AND ts >= ? AND ts < ? AND ts % ? = 0",
                                (did, start_ms, end_ms, every_ms)).fetchall()
            if not rows:
                continue
            ts_all, lids, n_all, blobs = zip(*rows)
            layouts = dict.fromkeys(lids)
            ts_arr = np.array(ts_all, dtype=np.int64)
            n_arr = np.array(n_all, dtype=np.float64)
            lid_arr = np.array(lids) if len(layouts) > 1 else None
            for lid in layouts:  # one series per layout, in order of first sight
                cols = [(m, i) for m in wanted if (i := self._index[lid].get(m)) is not None]
                if not cols:
                    continue
                if lid_arr is None:
                    ts, n, packed = ts_arr, n_arr, b"".join(blobs)
                else:  # the device changed layout (a GPU lost, a metric no longer read)
                    mine = np.flatnonzero(lid_arr == lid)
                    ts, n = ts_arr[mine], n_arr[mine]
                    packed = b"".join([blobs[k] for k in mine.tolist()])
                sums = np.frombuffer(packed, np.float64).reshape(len(ts), -1)
                for m, i in cols:
                    out[m].append((self._key(m, did), ts, sums[:, i] / n))
        return out

    def _scoped(self, metric: str, cluster: str | None) -> list[int]:
        """The devices of ``cluster`` that can carry ``metric``: a GPU metric's GPUs, a host
        metric's hosts (the catalogue's scope), so a read skips the other devices' rows."""
        cat = catalogue()
        scope = cat[metric].scope if metric in cat else None
        return [did for did in self._devices(None, None, cluster)
                if _carries(scope, self._idents[did][3])]

    @guarded("read")
    def rack_means(self, metric: str, start_ms: int, end_ms: int, step_ms: int,
                   cluster: str | None = None) -> RackSeries:
        """``metric``'s mean per rack and bin of ``step_ms`` over [start, end) (``rack_series``):
        from the one-minute means, and the samples of the minutes no device has one of yet
        (a minute is rolled up a few minutes after it closes). The values are packed per
        device, so the bins are made in numpy, not in SQL, of at most ``SAMPLED_MINUTES``
        minutes each (``sampled_every_ms``): a week of 1,000 GPUs is 10 million minutes.
        ``start_ms`` a multiple of the step."""
        bins = max(0, -(-(end_ms - start_ms) // step_ms))
        dids = self._scoped(metric, cluster)
        every = sampled_every_ms(step_ms)
        series = self.minute_means([metric], start_ms, end_ms, dids, every)[metric]
        covered = set(np.concatenate([ts for _, ts, _ in series]).tolist()) if series else set()
        for first, last in _runs_missing(start_ms, end_ms, covered, every):
            series += series_of_points(self._raw(metric, first, last, dids))
        return rack_means(series, start_ms, step_ms, bins, cluster)


def _carries(scope: str | None, device: str) -> bool:
    """Whether a device named ``device`` can carry a metric of ``scope`` (None: unknown)."""
    if scope == "gpu":
        return gpu_index(device) is not None
    if scope == "host":
        return device == "host"
    return scope is None or (gpu_index(device) is None and device != "host")


# The most minutes of a device a bin of ``rack_means`` reads (evenly spaced).
SAMPLED_MINUTES = 5


def sampled_every_ms(step_ms: int) -> int:
    """Which minutes ``rack_means`` reads for a bin of ``step_ms``: every one up to
    ``SAMPLED_MINUTES`` minutes, else those on a multiple of every k-th minute, k such that
    a bin holds ``SAMPLED_MINUTES`` of them or one fewer."""
    minutes = max(1, step_ms // MINUTE_MS)
    return -(-minutes // SAMPLED_MINUTES) * MINUTE_MS


def _runs_missing(start_ms: int, end_ms: int, covered: set[int], every_ms: int = MINUTE_MS
                  ) -> list[tuple[int, int]]:
    """The spans of [start, end) made of whole minutes, of those starting on a multiple of
    ``every_ms``, none of ``covered`` starts."""
    runs: list[tuple[int, int]] = []
    minute = -(-start_ms // every_ms) * every_ms if every_ms > MINUTE_MS else (
        start_ms - start_ms % MINUTE_MS)
    while minute < end_ms:
        if minute not in covered:
            first = max(minute, start_ms)
            if runs and runs[-1][1] == first:
                runs[-1] = (runs[-1][0], min(minute + MINUTE_MS, end_ms))
            else:
                runs.append((first, min(minute + MINUTE_MS, end_ms)))
        minute += every_ms
    return runs


def _value(packed: bytes, i: int) -> float:
    return struct.unpack_from("<d", packed, 8 * i)[0]
