"""Reads from InfluxDB through InfluxQL's ``/query``: the read half for ``store.kind = "influx"``.

InfluxQL is the one query language that every InfluxDB answers: 1.x
natively, 2.x through its v1-compatible ``/query`` (the database name must
be mapped to the bucket with a DBRP mapping), 3.x through its v1 query API.
Tested here against InfluxDB 1.6.7 only, writing through its v1 ``/write``
(found by ``api="auto"``, the default, or set with ``api="v1"``: see ``influx``);
2.x and 3.x are untested (no such server installs on our CI machines). Reads send
the writes' credentials: ``Token ...`` to 2.x/3.x, HTTP basic auth to 1.x.

The layout is ``lineproto``'s: measurement ``gpu``, field ``temp_c``, tags
cluster, device, node, rack. InfluxDB replaces a point written again at the
same series and time, so writes are idempotent without any server flag.

* ``latest``: ``last(field)`` per series since ``since_ms``;
* ``range``: raw points up to ``RAW_SPAN_MS``, else ``mean(field)`` over
  ``GROUP BY time(1m)`` on the whole minutes in [start, end);
* ``alerts``: per series of ``fleetwatch_alert``, the row with the newest
  time (``last(updated_ts)`` and that row's other fields), then per id the
  newest ``updated_ts``; a row not updated within ``alert_lookback_s`` is
  forgotten;
* ``annotations``: rows of ``fleetwatch_annotation`` that started within
  ``annotation_lookback_s`` before the window;
* ``events``: rows of ``fleetwatch_event`` in the window. InfluxDB keeps
  string fields, so an event's text and an alert's message and action are
  kept whole (as string fields, never tags).
* ``silences`` and ``acks``: rows of ``fleetwatch_silence`` and
  ``fleetwatch_ack`` (``lpsilences``), tagged by id, everything else string
  and number fields, kept exactly; per id the newest ``written_ts`` wins.
  Silences are read back over ``silence_lookback_s``, acknowledgements over
  ``alert_lookback_s``; a database retention policy shorter than that
  forgets them sooner.

Writes are checked against the database's default retention policy
(``SHOW RETENTION POLICIES``): a point older than its duration would be
dropped ("partial write"), so such frames are refused before they are sent.
``check_server`` (the processor, at start) refuses a retention policy too short to
hold live frames and warns of fields another writer gave another type
(``influx_schema``).

``maintain`` does nothing: retention is the database's (or bucket's)
retention policy, and downsampling is the server's job (a continuous query
or a task) if it is wanted at all.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Sequence
from typing import Any

from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    MINUTE_MS,
    RAW_SPAN_MS,
    Acknowledgement,
    Alert,
    AlertState,
    Annotation,
    Event,
    Notification,
    Point,
    SeriesKey,
    Silence,
    StoreError,
)
from fleetwatch.pipeline.store.energy_influxql import InfluxQLEnergy
from fleetwatch.pipeline.store.influx import InfluxStore
from fleetwatch.pipeline.store.influx_schema import conflict_said, conflicts
from fleetwatch.pipeline.store.lineproto import split_metric
from fleetwatch.pipeline.store.lpnotify import (
    NOTIFY_MEASUREMENT,
    notification_from,
    select_notes,
)
from fleetwatch.pipeline.store.lprecords import (
    ALERT_MEASUREMENT,
    ALERT_TAGS,
    ANNOTATION_MEASUREMENT,
    EVENT_MEASUREMENT,
    alert_from,
    event_from,
    select_events,
)
from fleetwatch.pipeline.store.lpsilences import (
    ACK_MEASUREMENT,
    SILENCE_MEASUREMENT,
    ack_from,
    newest,
    silence_from,
)
from fleetwatch.pipeline.store.rack_series import RackSeries, rack_means, series_of_points
from fleetwatch.pipeline.store.window import AcceptWindow, go_duration_ms
from fleetwatch.pipeline.store.window import influxql_ms as _ms

log = logging.getLogger(__name__)

_DAY_S = 86_400.0
_GROUP = 'GROUP BY "cluster", "rack", "node", "device"'


class InfluxQLStore(InfluxQLEnergy, InfluxStore):  # the ledger: energy_influxql.py
    """``InfluxStore``'s writes, plus reads through InfluxQL."""

    def __init__(self, url: str, *, org: str = "fleetwatch", bucket: str = "fleetwatch",
                 token: str = "", database: str | None = None, api: str = "auto",
                 timeout_s: float = 10.0, batch_lines: int = 5000, max_retries: int = 3,
                 alert_lookback_s: float = 30 * _DAY_S,
                 annotation_lookback_s: float = 30 * _DAY_S,
                 silence_lookback_s: float = 400 * _DAY_S) -> None:
        super().__init__(url, org=org, bucket=bucket, token=token, timeout_s=timeout_s,
                         batch_lines=batch_lines, max_retries=max_retries, api=api)
        self.database = database or bucket
        self.alert_lookback_s = alert_lookback_s
        self.silence_lookback_s = silence_lookback_s
        self.annotation_lookback_s = annotation_lookback_s

    def query(self, influxql: str) -> list[dict[str, Any]]:
        """The series of one InfluxQL statement, timestamps in ms."""
        params = urllib.parse.urlencode({"db": self.database, "epoch": "ms", "q": influxql})
        request = urllib.request.Request(f"{self.server.base}/query?{params}",
                                         headers=self._writer.auth_headers())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace").strip()
            hint = (f"; {self._writer.misconfigured(exc.headers.get('X-Influxdb-Version'))}"
                    if exc.code in (401, 403, 404) else "")
            raise StoreError(f"{self.url}/query answered {exc.code}: {detail}{hint}") from exc
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot query {self.url}/query: {exc}") from exc
        result = (body.get("results") or [{}])[0]
        if "error" in result or "error" in body:
            error = str(result.get("error") or body.get("error"))
            hint = (f"; {self._writer.misconfigured()}"
                    if error.startswith("database not found") else "")
            raise StoreError(f"{self.url}/query: {error}{hint}")
        return result.get("series", [])

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        measurement, field = split_metric(metric)
        series = self.query(f"SELECT last({_ident(field)}) FROM {_ident(measurement)} "
                            f"WHERE time >= {_ms(since_ms)}ms {_GROUP}")
        points = [p for s in series for p in _points(metric, s)]
        return sorted(points, key=lambda p: (p[0].node, p[0].device))

    def newest_ms(self, metric: str, since_ms: int, until_ms: int,
                  cluster: str | None = None) -> int | None:
        """One ``last()`` over the window, every series together: the server finds it."""
        measurement, field = split_metric(metric)
        where = "" if cluster is None else f' AND "cluster" = {_literal(cluster)}'
        series = self.query(f"SELECT last({_ident(field)}) FROM {_ident(measurement)} "
                            f"WHERE time >= {_ms(since_ms)}ms AND time <= {_ms(until_ms)}ms{where}")
        return max((int(t) for s in series for t, v in s.get("values", []) if v is not None),
                   default=None)

    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None, cluster: str | None = None) -> list[Point]:
        measurement, field = split_metric(metric)
        where = "".join(f" AND {_ident(k)} = {_literal(v)}"
                        for k, v in (("cluster", cluster), ("node", node), ("device", device))
                        if v is not None)
        if end_ms - start_ms <= RAW_SPAN_MS:
            q = (f"SELECT {_ident(field)} FROM {_ident(measurement)} WHERE time >= "
                 f"{_ms(start_ms)}ms AND time < {_ms(end_ms)}ms{where} {_GROUP}")
        else:  # the minutes that start in [start, end), whole, like the SQLite rollups
            first = -(-start_ms // MINUTE_MS) * MINUTE_MS
            stop = (end_ms - 1) // MINUTE_MS * MINUTE_MS + MINUTE_MS
            q = (f"SELECT mean({_ident(field)}) FROM {_ident(measurement)} WHERE time >= "
                 f"{_ms(first)}ms AND time < {_ms(stop)}ms{where} {_GROUP}, time(1m) fill(none)")
        points = [p for s in self.query(q) for p in _points(metric, s)]
        points.sort(key=lambda p: p[1])
        return points

    def rack_means(self, metric: str, start_ms: int, end_ms: int, step_ms: int,
                   cluster: str | None = None) -> RackSeries:
        """``metric``'s mean per rack and bin of ``step_ms`` over [start, end)
        (``rack_series``): each device's mean per bin from the server (``GROUP BY
        time``), a few hundred per device whatever its samples; their mean per rack here.
        ``start_ms`` a multiple of the step (the server's buckets start on one)."""
        bins = max(0, -(-(end_ms - start_ms) // step_ms))
        measurement, field = split_metric(metric)
        where = "" if cluster is None else f' AND "cluster" = {_literal(cluster)}'
        q = (f"SELECT mean({_ident(field)}) FROM {_ident(measurement)} WHERE time >= "
             f"{_ms(start_ms)}ms AND time < {_ms(start_ms + bins * step_ms)}ms{where} {_GROUP}, "
             f"time({step_ms}ms) fill(none)")
        points = [p for s in self.query(q) for p in _points(metric, s)]
        return rack_means(series_of_points(points), start_ms, step_ms, bins, cluster)

    def accepted_window(self) -> AcceptWindow:
        """From the database's default retention policy; InfluxDB has no future bound
        short of 2262 (nanoseconds in an int64), past the codec's 2100."""
        for s in self.query(f"SHOW RETENTION POLICIES ON {_ident(self.database)}"):
            for row in _rows(s):
                if row.get("default"):
                    ms = go_duration_ms(str(row.get("duration", "0s")))
                    return AcceptWindow(ms or None, None,
                                        f"InfluxDB retention policy {row.get('name')!r} of "
                                        f"{self.database!r}: {row.get('duration')}")
        return AcceptWindow(None, None, "InfluxDB")

    def check_server(self) -> list[tuple[str, str, str]]:
        """At a processor's start: raises ``StoreMisconfigured`` for a retention policy
        too short to hold live frames; warns of the fields another writer gave a type
        fleetwatch does not write (returned: measurement, field, type). Raises
        ``StoreError`` while the server cannot be asked."""
        from fleetwatch.pipeline.store.victoria import StoreMisconfigured

        short = self.accepted_window().too_short()
        if short is not None:
            raise StoreMisconfigured(f"InfluxDB at {self.url}: {short}")
        rows = [(str(s.get("name", "")), str(r.get("fieldKey", "")), str(r.get("fieldType", "")))
                for s in self.query("SHOW FIELD KEYS") for r in _rows(s)]
        found = conflicts(rows)
        if found:
            log.warning("%s", conflict_said(self.database, found))
        return found

    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]:
        """Per series, its newest row; per (cluster, id), the newest ``updated_ts``."""
        since_ms = (round(since_ts * 1000) if since_ts is not None
                    else int((time.time() - self.alert_lookback_s) * 1000))
        # The newest row of each series (an alert's life): bare fields beside last() come
        # from the same row.
        series = self.query(f"SELECT last(\"updated_ts\") AS \"updated_ts\", * "
                            f"FROM {_ident(ALERT_MEASUREMENT)} WHERE time >= {_ms(since_ms)}ms "
                            "GROUP BY *")
        newest: dict[tuple[str, str], Alert] = {}
        for s in series:
            tags = s.get("tags", {})
            for row in _rows(s):
                if not tags.get("id") or row.get("updated_ts") is None:
                    continue
                numbers = {k: float(v) for k, v in row.items() if k != "time"
                           and isinstance(v, int | float) and not isinstance(v, bool)}
                texts = {k: v for k, v in row.items() if isinstance(v, str)
                         and k not in ALERT_TAGS}
                alert = alert_from(tags, numbers, texts)
                key = (alert.cluster, alert.id)
                seen = newest.get(key)
                if seen is None or alert.updated_ts >= seen.updated_ts:
                    newest[key] = alert
        out = [a for a in newest.values() if a.state in states
               and (since_ts is None or a.updated_ts >= since_ts)]
        return sorted(out, key=lambda a: a.started_ts, reverse=True)

    def events(self, start_ts: float, end_ts: float, node: str | None = None,
               kinds: Sequence[str] | None = None, device: str | None = None,
               except_xids: Collection[int] = ()) -> list[Event]:
        if kinds is not None and not kinds:
            return []
        where = "".join(f" AND {_ident(k)} = {_literal(v)}"
                        for k, v in (("node", node), ("device", device)) if v is not None)
        if kinds is not None:
            where += " AND (" + " OR ".join(f'"kind" = {_literal(k)}' for k in kinds) + ")"
        if except_xids:  # code is a tag (text); InfluxQL has no NOT or NOT IN
            where += f' AND ("kind" != {_literal("xid")} OR (' + " AND ".join(
                f'"code" != {_literal(str(int(c)))}' for c in sorted(set(except_xids))) + "))"
        # The value is a field (a tag in rows written before: both are read).
        series = self.query(f"SELECT \"ts\", \"text\", \"value\"::field AS \"value\" FROM "
                            f"{_ident(EVENT_MEASUREMENT)} WHERE time >= "
                            f"{_ms(start_ts * 1000)}ms AND time < "
                            f"{_ms(end_ts * 1000)}ms{where} GROUP BY *")
        found = [event_from(s.get("tags", {}), float(row["ts"]), row.get("text") or "",
                            row.get("value")) for s in series for row in _rows(s)
                 if row.get("ts") is not None]
        return select_events(found, start_ts, end_ts, node, kinds, device, except_xids)

    def notifications(self, start_ts: float, end_ts: float,
                      alert_ids: Sequence[str] | None = None) -> list[Notification]:
        """What was notified in [start, end) (``lpnotify``), of these alerts where given."""
        if alert_ids is not None and not alert_ids:
            return []
        series = self.query(f"SELECT \"ts\", \"sent_ts\" FROM {_ident(NOTIFY_MEASUREMENT)} "
                            f"WHERE time >= {_ms(start_ts * 1000)}ms AND time < "
                            f"{_ms(end_ts * 1000)}ms GROUP BY *")
        return select_notes([notification_from(s.get("tags", {}), {
            k: float(v) for k, v in row.items() if k in ("ts", "sent_ts") and v is not None})
            for s in series for row in _rows(s)], start_ts, end_ts, alert_ids)

    def _records(self, measurement: str, key: str, lookback_s: float
                 ) -> list[tuple[str, float, dict[str, str], dict[str, float], dict[str, str]]]:
        """Every row of ``measurement`` written within ``lookback_s``: (its ``key`` tag,
        written_ts, tags, number fields, string fields)."""
        since_ms = int((time.time() - lookback_s) * 1000)
        out = []
        for s in self.query(f"SELECT * FROM {_ident(measurement)} WHERE time >= {_ms(since_ms)}ms "
                            f"GROUP BY {_ident(key)}"):
            tags = s.get("tags", {})
            for row in _rows(s):
                numbers = {k: float(v) for k, v in row.items() if k != "time"
                           and isinstance(v, int | float) and not isinstance(v, bool)}
                texts = {k: v for k, v in row.items() if isinstance(v, str)}
                if tags.get(key) and "written_ts" in numbers:
                    out.append((tags[key], numbers["written_ts"], tags, numbers, texts))
        return out

    def silences(self, active_at: float | None = None) -> list[Silence]:
        rows = [(key, written, silence_from(tags, numbers, texts))
                for key, written, tags, numbers, texts in self._records(
                    SILENCE_MEASUREMENT, "id", self.silence_lookback_s)
                if {"start_ts", "end_ts"} <= numbers.keys()]
        found = [s for s in newest(rows) if isinstance(s, Silence)]
        if active_at is not None:
            found = [s for s in found if s.start_ts <= active_at < s.end_ts]
        return sorted(found, key=lambda s: (s.start_ts, s.id))

    def acks(self) -> list[Acknowledgement]:
        rows = [(key, written, ack_from(tags, numbers, texts))
                for key, written, tags, numbers, texts in self._records(
                    ACK_MEASUREMENT, "alert_id", self.alert_lookback_s) if "ts" in numbers]
        found = [a for a in newest(rows) if isinstance(a, Acknowledgement)]
        return sorted(found, key=lambda a: (a.ts, a.alert_id))

    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]:
        since_ms = _ms((start_ts - self.annotation_lookback_s) * 1000)
        series = self.query(f"SELECT \"start_ts\", \"end_ts\" FROM "
                            f"{_ident(ANNOTATION_MEASUREMENT)} WHERE time >= {_ms(since_ms)}ms "
                            f"AND time < {_ms(end_ts * 1000)}ms GROUP BY *")
        found: dict[tuple[str, float, str, str, str], Annotation] = {}
        for s in series:
            tags = s.get("tags", {})
            for row in _rows(s):
                if row.get("start_ts") is None:
                    continue
                a = Annotation(tags.get("kind", ""), row["start_ts"], row.get("end_ts"),
                               tags.get("node", ""), tags.get("device", ""),
                               tags.get("text", ""), tags.get("cluster", ""))
                if a.start_ts < end_ts and (a.end_ts is None or a.end_ts >= start_ts):
                    key = (a.kind, a.start_ts, a.cluster, a.node, a.device)
                    if key not in found or found[key].end_ts is None:
                        found[key] = a
        return sorted(found.values(), key=lambda a: a.start_ts)


def _ident(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _rows(series: dict[str, Any]) -> list[dict[str, Any]]:
    columns = series["columns"]
    return [dict(zip(columns, values, strict=True)) for values in series.get("values", [])]


def _points(metric: str, series: dict[str, Any]) -> list[Point]:
    tags = series.get("tags", {})
    key = SeriesKey(metric, tags.get("cluster", ""), tags.get("rack", ""),
                    tags.get("node", ""), tags.get("device", ""))
    return [(key, int(t), float(v)) for t, v in series.get("values", []) if v is not None]
