"""The production store on VictoriaMetrics: line protocol in, Prometheus query API out.

Writes go to ``/api/v2/write`` through ``LineProtocolWriter`` (influxdb-client),
laid out by ``lineproto`` so that a metric keeps its catalogue name as the
series name: ``gpu_temp_c{cluster,rack,node,device}``.

Reads, with the SQLite store's semantics:

* ``latest``: ``last_over_time`` and ``tlast_over_time`` (the sample's own
  timestamp) over the window back to ``since_ms``;
* ``range``: raw samples for spans up to ``RAW_SPAN_MS`` (an instant query
  of a range selector returns them unchanged), else 1-minute means from
  ``avg_over_time(m[60s] offset 1ms)`` stepped every minute: the value at
  ``t`` covers ``[t-60s, t)``, returned at its minute's start like a rollup;
* ``alerts``: alerts are lines of ``fleetwatch_alert`` (see
  ``lineproto.alert_line``); ``last_over_time`` over ``alert_lookback_s``
  gives each series' last row, and per alert id the row with the newest
  ``updated_ts`` is its current state. An alert not updated within the
  lookback is forgotten, so keep the lookback above the longest a node
  may stay silent with an open alert;
* ``annotations``: lines of ``fleetwatch_annotation`` at their start time;
  those that started within ``annotation_lookback_s`` before the window end.

Server requirements (flags of ``victoria-metrics``; see docs/scale.md):
``-dedup.minScrapeInterval=1ms`` makes a rewritten (series, timestamp) one
sample, which is what makes replays after a crash harmless;
``-search.latencyOffset=0s`` (default 30s) lets queries see the last 30 s;
``-retentionPeriod`` replaces our retention, so ``maintain`` does nothing.
A write returns once the server has taken it into memory; VictoriaMetrics
makes it durable on disk within about a second, so a server crash in that
second loses it, as it does for any writer.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    MINUTE_MS,
    RAW_SPAN_MS,
    Alert,
    AlertState,
    Annotation,
    Point,
    SeriesKey,
    StoreError,
)
from fleetwatch.pipeline.store.energy_victoria import VictoriaEnergy
from fleetwatch.pipeline.store.influx import InfluxStore
from fleetwatch.pipeline.store.lineproto import (
    ALERT_MEASUREMENT,
    ANNOTATION_MEASUREMENT,
    STATE_NAMES,
)

# One query_range asks for at most this many minutes (the server's default
# -search.maxPointsPerTimeseries is 30,000).
_MAX_STEPS = 10_000
_DAY_S = 86_400.0
# A window that reaches before 1970 selects nothing on VictoriaMetrics, so
# windows start no earlier than 2000-01-01, before which the codec takes no frame.
_FLOOR_MS = 946_684_800_000
_SERIES_LABELS = ("cluster", "rack", "node", "device")


class VictoriaMetricsStore(VictoriaEnergy, InfluxStore):  # the ledger: energy_victoria.py
    """``InfluxStore``'s writes, plus reads through VictoriaMetrics' Prometheus API."""

    def __init__(self, url: str, *, org: str = "fleetwatch", bucket: str = "fleetwatch",
                 token: str = "", timeout_s: float = 10.0, batch_lines: int = 5000,
                 max_retries: int = 3, alert_lookback_s: float = 30 * _DAY_S,
                 annotation_lookback_s: float = 30 * _DAY_S) -> None:
        super().__init__(url, org=org, bucket=bucket, token=token, timeout_s=timeout_s,
                         batch_lines=batch_lines, max_retries=max_retries)
        self.alert_lookback_s = alert_lookback_s
        self.annotation_lookback_s = annotation_lookback_s
        # Behind vmauth a token is a bearer token; a bare server ignores the header.
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    # -- reads ---------------------------------------------------------------
    def _get(self, path: str, **params: object) -> list[dict[str, Any]]:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise StoreError(f"{self.url}{path} answered {exc.code}: {detail}") from exc
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot query {self.url}{path}: {exc}") from exc
        if body.get("status") != "success":
            raise StoreError(f"{self.url}{path}: {body.get('error', body)}")
        return body["data"]["result"]

    def query(self, promql: str, at_ms: int | None = None) -> list[dict[str, Any]]:
        """An instant query, for views that want MetricsQL directly."""
        params: dict[str, object] = {"query": promql}
        if at_ms is not None:
            params["time"] = f"{at_ms / 1000:.3f}"
        return self._get("/api/v1/query", **params)

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        since_ms = max(since_ms, _FLOOR_MS)
        now_ms = int(time.time() * 1000)
        # Frames may be stamped a little ahead of this clock; look past it.
        at_ms = max(now_ms, since_ms) + 60_000
        selector = f"{_name(metric)}[{at_ms - since_ms + 1}ms]"
        values = {_series(metric, r["metric"]): float(r["value"][1])
                  for r in self.query(f"last_over_time({selector})", at_ms)}
        stamps = {_series(metric, r["metric"]): round(float(r["value"][1]) * 1000)
                  for r in self.query(f"tlast_over_time({selector})", at_ms)}
        points = [(key, stamps[key], v) for key, v in values.items()
                  if key in stamps and stamps[key] >= since_ms]
        return sorted(points, key=lambda p: (p[0].node, p[0].device))

    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None) -> list[Point]:
        start_ms = max(start_ms, _FLOOR_MS)
        if end_ms <= start_ms:
            return []
        selector = _name(metric, node=node, device=device)
        if end_ms - start_ms <= RAW_SPAN_MS:
            # Samples in (t - w, t] with t = end - 1 ms and w = end - start: [start, end).
            result = self.query(f"{selector}[{end_ms - start_ms}ms]", end_ms - 1)
            points = [(_series(metric, r["metric"]), round(float(t) * 1000), float(v))
                      for r in result for t, v in r["values"]]
        else:
            points = self._minute_means(metric, selector, start_ms, end_ms)
        points.sort(key=lambda p: p[1])
        return points

    def _minute_means(self, metric: str, selector: str, start_ms: int,
                      end_ms: int) -> list[Point]:
        """Means of the minutes that start in [start, end), like the SQLite rollups."""
        first = -(-start_ms // MINUTE_MS) * MINUTE_MS
        last = (end_ms - 1) // MINUTE_MS * MINUTE_MS
        points: list[Point] = []
        while first <= last:
            chunk_last = min(last, first + (_MAX_STEPS - 1) * MINUTE_MS)
            # The value at t averages [t - 60s, t): minute t - 60s.
            result = self._get("/api/v1/query_range",
                               query=f"avg_over_time({selector}[60s] offset 1ms)",
                               start=(first + MINUTE_MS) // 1000,
                               end=(chunk_last + MINUTE_MS) // 1000, step="60s", nocache=1)
            for r in result:
                key = _series(metric, r["metric"])
                points.extend((key, round(float(t) * 1000) - MINUTE_MS, float(v))
                              for t, v in r["values"])
            first = chunk_last + MINUTE_MS
        return points

    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]:
        at_ms = int(time.time() * 1000) + 60_000
        window_ms = int(self.alert_lookback_s * 1000)
        if since_ts is not None:  # rows older than since_ts cannot qualify
            window_ms = at_ms - max(int(since_ts * 1000), _FLOOR_MS)
        result = self.query(
            f'last_over_time({{__name__=~"{ALERT_MEASUREMENT}_.+"}}[{window_ms}ms])', at_ms)
        newest: dict[str, tuple[dict[str, str], dict[str, float]]] = {}
        for labels, fields in _join(ALERT_MEASUREMENT, result):
            if "id" not in labels or "updated_ts" not in fields or "state" not in fields:
                continue
            seen = newest.get(labels["id"])
            if seen is None or fields["updated_ts"] >= seen[1]["updated_ts"]:
                newest[labels["id"]] = (labels, fields)
        out = []
        for labels, fields in newest.values():
            alert = _alert(labels, fields)
            if alert.state in states and (since_ts is None or alert.updated_ts >= since_ts):
                out.append(alert)
        return sorted(out, key=lambda a: a.started_ts, reverse=True)

    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]:
        # Raw samples, not last_over_time: one series may hold several annotations
        # (same kind, node, device and text at different starts).
        end_ms = round(end_ts * 1000)
        if end_ms <= _FLOOR_MS:
            return []
        window_ms = max(end_ms - round(start_ts * 1000), 0) + int(
            self.annotation_lookback_s * 1000)
        window_ms = min(window_ms, end_ms - _FLOOR_MS)
        result = self.query(
            f'{{__name__=~"{ANNOTATION_MEASUREMENT}_.+"}}[{window_ms}ms]', end_ms - 1)
        found: dict[tuple[str, float, str, str], Annotation] = {}
        for labels, fields in _join(ANNOTATION_MEASUREMENT, result):
            if "start_ts" not in fields:
                continue
            a = Annotation(labels.get("kind", ""), fields["start_ts"], fields.get("end_ts"),
                           labels.get("node", ""), labels.get("device", ""),
                           labels.get("text", ""))
            if a.start_ts < end_ts and (a.end_ts is None or a.end_ts >= start_ts):
                key = (a.kind, a.start_ts, a.node, a.device)
                # Rewritten with another text: two series; keep the one that has an end.
                if key not in found or found[key].end_ts is None:
                    found[key] = a
        return sorted(found.values(), key=lambda a: a.start_ts)

    def maintain(self, now_ms: int) -> None:
        """Nothing to do: VictoriaMetrics keeps its own parts merged and drops data past
        its ``-retentionPeriod``; 1-minute means are computed at query time."""



def _name(metric: str, **labels: str | None) -> str:
    matchers = [f'__name__="{_quote(metric)}"']
    matchers += [f'{k}="{_quote(v)}"' for k, v in labels.items() if v is not None]
    return "{" + ",".join(matchers) + "}"


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _join(measurement: str, result: list[dict[str, Any]]
          ) -> list[tuple[dict[str, str], dict[str, float]]]:
    """Rows of a measurement from per-field series: fields that share tags and a
    timestamp were written on one line. Takes instant vectors (``value``) or
    range vectors (``values``)."""
    rows: dict[tuple[object, ...], tuple[dict[str, str], dict[str, float]]] = {}
    skip = len(measurement) + 1
    for r in result:
        labels = dict(r["metric"])
        field = labels.pop("__name__", "")[skip:]
        tag_key = tuple(sorted(labels.items()))
        samples = r["values"] if "values" in r else [(None, r["value"][1])]
        for t, v in samples:
            row = rows.setdefault((tag_key, t), (labels, {}))
            row[1][field] = float(v)
    return list(rows.values())


def _series(metric: str, labels: dict[str, str]) -> SeriesKey:
    return SeriesKey(metric, *(labels.get(k, "") for k in _SERIES_LABELS))


def _alert(labels: dict[str, str], fields: dict[str, float]) -> Alert:
    def opt(name: str) -> float | None:
        value = fields.get(name)
        return None if value is None or math.isnan(value) else value

    return Alert(
        id=labels["id"], rule=labels.get("rule", ""), severity=labels.get("severity", ""),
        cluster=labels.get("cluster", ""), rack=labels.get("rack", ""),
        node=labels.get("node", ""), device=labels.get("device", ""),
        state=STATE_NAMES.get(int(fields["state"]), "pending"),  # type: ignore[arg-type]
        started_ts=fields.get("started_ts", fields["updated_ts"]),
        updated_ts=fields["updated_ts"], value=fields.get("value", math.nan),
        message=labels.get("message", ""), fired_ts=opt("fired_ts"),
        resolved_ts=opt("resolved_ts"))
