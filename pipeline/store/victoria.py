"""The production store on VictoriaMetrics: line protocol in, Prometheus query API out.

Writes go to ``/api/v2/write`` through ``LineProtocolWriter`` (``lpwriter``, influxdb-client),
laid out by ``lineproto`` so that a metric keeps its catalogue name as the
series name: ``gpu_temp_c{cluster,rack,node,device}``.

Reads, with the SQLite store's semantics:

* ``latest``: ``last_over_time`` and ``tlast_over_time`` (the sample's own
  timestamp) over the window back to ``since_ms``;
* ``range``: raw samples for spans up to ``RAW_SPAN_MS`` (an instant query
  of a range selector returns them unchanged), else 1-minute means from
  ``avg_over_time(m[60s] offset 1ms)`` stepped every minute: the value at
  ``t`` covers ``[t-60s, t)``, returned at its minute's start like a rollup;
* ``alerts``, ``annotations``, ``events``, ``notifications``, ``silences`` and
  ``acks``: lines of their own measurements, read as ``victoria_records`` says.

Server requirements (flags of ``victoria-metrics``; see docs/scale.md):
``-dedup.minScrapeInterval=1ms`` makes a rewritten (series, timestamp) one
sample, which is what makes replays after a crash harmless; the store reads
the server's ``/flags`` when it opens (or, if the server is away then, before
its first write) and refuses to run without it (``StoreMisconfigured``);
``-search.latencyOffset=0s`` (default 30s) lets queries see the last 30 s;
``-retentionPeriod`` replaces our retention, so ``maintain`` does nothing;
frames older than it, or more than 2 days ahead, which the server would
drop after answering 204, are refused before they are sent (``window``).
A write returns once the server has taken it into memory; VictoriaMetrics
makes it durable on disk within about a second, so a server crash in that
second loses it, as it does for any writer.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from fleetwatch.config import ConfigError
from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import (
    MINUTE_MS,
    RAW_SPAN_MS,
    Acknowledgement,
    Point,
    Silence,
    StoreError,
)
from fleetwatch.pipeline.store.energy_victoria import VictoriaEnergy
from fleetwatch.pipeline.store.influx import InfluxStore
from fleetwatch.pipeline.store.metricsql import series_key, series_selector
from fleetwatch.pipeline.store.rack_series import RackSeries
from fleetwatch.pipeline.store.victoria_records import FLOOR_MS, VictoriaRecords
from fleetwatch.pipeline.store.window import DAY_MS, AcceptWindow, parse_flags, vm_duration_ms

log = logging.getLogger(__name__)

# One query_range asks for at most this many minutes (the server's default
# -search.maxPointsPerTimeseries is 30,000).
_MAX_STEPS = 10_000
_DAY_S = 86_400.0
# VictoriaMetrics drops rows more than 2 days ahead of its clock (lib/storage/table.go).
_FUTURE_MS = 2 * DAY_MS


class StoreMisconfigured(ConfigError, RuntimeError):
    """The server is set up so that the store cannot keep its promises; says how to fix it.

    A ``ConfigError``: the commands say it as one line and exit 2, as for a setting of
    fleetwatch's own, not with a traceback."""


class VictoriaMetricsStore(VictoriaRecords, VictoriaEnergy, InfluxStore):
    """``InfluxStore``'s writes, plus reads through VictoriaMetrics' Prometheus API (the
    records': ``victoria_records``; the ledger's: ``energy_victoria``)."""

    keeps_text = False  # numbers only: string fields would be read as numbers
    checks_lines = True  # a line it misreads is answered 204 and dropped or stored otherwise

    def __init__(self, url: str, *, org: str = "fleetwatch", bucket: str = "fleetwatch",
                 token: str = "", timeout_s: float = 10.0, batch_lines: int = 5000,
                 max_retries: int = 3, alert_lookback_s: float = 30 * _DAY_S,
                 annotation_lookback_s: float = 30 * _DAY_S,
                 silence_lookback_s: float = 400 * _DAY_S) -> None:
        super().__init__(url, org=org, bucket=bucket, token=token, timeout_s=timeout_s,
                         batch_lines=batch_lines, max_retries=max_retries)
        self.alert_lookback_s = alert_lookback_s
        # A silence lasts at most a year (fleetwatch.silencing), written at its start or so.
        self.silence_lookback_s = silence_lookback_s
        self.annotation_lookback_s = annotation_lookback_s
        # Behind vmauth a token is a bearer token, a user:password in the URL basic auth
        # (ServerURL); a bare server ignores the header.
        self._headers = (self.server.basic_header() if self.server.basic else
                         {"Authorization": f"Bearer {token}"} if token else {})
        self._flags: dict[str, str] | None = None
        self._flush_warned = False
        try:
            self.server_flags()
        except StoreError as exc:  # away now: checked again before the first write
            log.warning("cannot read %s/flags yet (%s); checking before the first write",
                        self.url, exc)

    # -- what the server does with writes
    def server_flags(self) -> dict[str, str]:
        """The server's ``/flags`` (those set on its command line), checked once: raises
        ``StoreMisconfigured`` when replays would duplicate samples.

        Empty when they cannot be read here: behind vmauth (which answers 401/403/404
        for ``/flags``) or at a cluster's vminsert (``-storageNode`` set), where the dedup
        flag belongs to vmstorage and vmselect. Then the requirement is logged, not checked.
        """
        if self._flags is None:
            request = urllib.request.Request(f"{self.server.base}/flags", headers=self._headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    flags = parse_flags(response.read().decode(errors="replace"))
            except urllib.error.HTTPError as exc:
                if exc.code not in (401, 403, 404):
                    raise StoreError(f"cannot read {self.url}/flags: {exc}") from exc
                log.warning("%s/flags answered %d: cannot check that the server runs with "
                            "-dedup.minScrapeInterval=1ms, which idempotent replays need",
                            self.url, exc.code)
                self._flags = {}
                return self._flags
            except (OSError, ValueError) as exc:
                raise StoreError(f"cannot read {self.url}/flags: {exc}") from exc
            if "storageNode" in flags:
                log.warning("%s is a cluster's vminsert: run vmstorage and vmselect with "
                            "-dedup.minScrapeInterval=1ms (not checked from here)", self.url)
                self._flags = {}
                return self._flags
            dedup = flags.get("dedup.minScrapeInterval", "0s")
            if dedup in ("", "0", "0s", "0ms"):
                raise StoreMisconfigured(
                    f"VictoriaMetrics at {self.url} runs without -dedup.minScrapeInterval, so "
                    "every batch the processor writes again after a restart or a store outage "
                    "would be stored twice. Restart victoria-metrics with "
                    "-dedup.minScrapeInterval=1ms")
            self._flags = flags
        return self._flags

    def accepted_window(self) -> AcceptWindow:
        flags = self.server_flags()
        if not flags:  # not readable here: only the fixed future bound is known
            return AcceptWindow(None, _FUTURE_MS, "VictoriaMetrics, at most 2 days ahead")
        retention = flags.get("retentionPeriod", "1")  # the default: 1 month
        return AcceptWindow(vm_duration_ms(retention), _FUTURE_MS,
                            f"VictoriaMetrics -retentionPeriod={retention}, at most 2 days ahead")

    def write(self, frames: Sequence[Frame]) -> int:
        self.server_flags()
        return super().write(frames)

    # Silences and acknowledgements are read back at once by the person who wrote them
    # (`fleetwatch silence add`, then `silence list` or `expire` with the id it printed), and
    # by processors that reload them. VictoriaMetrics makes a write searchable only after
    # it flushes its in-memory parts (about a second, more under load): ask it to now.
    def write_silences(self, silences: Sequence[Silence]) -> None:
        super().write_silences(silences)
        self._make_searchable()

    def write_acks(self, acks: Sequence[Acknowledgement]) -> None:
        super().write_acks(acks)
        self._make_searchable()

    def _make_searchable(self) -> None:
        """``/internal/force_flush``; where it is not served (vmauth, a cluster's vminsert)
        the write becomes searchable by itself a few seconds later: logged once."""
        request = urllib.request.Request(f"{self.server.base}/internal/force_flush",
                                         headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except (OSError, ValueError) as exc:
            if not self._flush_warned:
                self._flush_warned = True
                log.warning("%s/internal/force_flush failed (%s): a silence or acknowledgement "
                            "just written may take a few seconds to be listed", self.url, exc)

    # -- reads ---------------------------------------------------------------
    def _get(self, path: str, **params: object) -> list[dict[str, Any]]:
        url = f"{self.server.base}{path}?{urllib.parse.urlencode(params)}"
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
        """An instant query, for views that want MetricsQL directly. ``nocache=1``:
        VictoriaMetrics serves instant queries from a cache that missed a sample written a
        second before (a processor taking a node over reads its energy watermark so)."""
        params: dict[str, object] = {"query": promql, "nocache": 1}
        if at_ms is not None:
            params["time"] = f"{at_ms / 1000:.3f}"
        return self._get("/api/v1/query", **params)

    def latest(self, metric: str, since_ms: int) -> list[Point]:
        since_ms = max(since_ms, FLOOR_MS)
        now_ms = int(time.time() * 1000)
        # Frames may be stamped a little ahead of this clock; look past it.
        at_ms = max(now_ms, since_ms) + 60_000
        selector = f"{series_selector(metric)}[{at_ms - since_ms + 1}ms]"
        values = {series_key(metric, r["metric"]): float(r["value"][1])
                  for r in self.query(f"last_over_time({selector})", at_ms)}
        stamps = {series_key(metric, r["metric"]): round(float(r["value"][1]) * 1000)
                  for r in self.query(f"tlast_over_time({selector})", at_ms)}
        points = [(key, stamps[key], v) for key, v in values.items()
                  if key in stamps and stamps[key] >= since_ms]
        return sorted(points, key=lambda p: (p[0].node, p[0].device))

    def newest_ms(self, metric: str, since_ms: int, until_ms: int,
                  cluster: str | None = None) -> int | None:
        """One query over the window: the newest stamp of every series, their max."""
        since_ms = max(since_ms, FLOOR_MS)
        if until_ms < since_ms:
            return None
        selector = f"{series_selector(metric, cluster=cluster)}[{until_ms - since_ms + 1}ms]"
        found = self.query(f"max(tlast_over_time({selector}))", until_ms)
        stamps = [round(float(r["value"][1]) * 1000) for r in found]
        return max((t for t in stamps if since_ms <= t <= until_ms), default=None)

    def range(self, metric: str, start_ms: int, end_ms: int, node: str | None = None,
              device: str | None = None, cluster: str | None = None) -> list[Point]:
        start_ms = max(start_ms, FLOOR_MS)
        if end_ms <= start_ms:
            return []
        selector = series_selector(metric, cluster=cluster, node=node, device=device)
        if end_ms - start_ms <= RAW_SPAN_MS:
            # Samples in (t - w, t] with t = end - 1 ms and w = end - start: [start, end).
            result = self.query(f"{selector}[{end_ms - start_ms}ms]", end_ms - 1)
            points = [(series_key(metric, r["metric"]), round(float(t) * 1000), float(v))
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
                key = series_key(metric, r["metric"])
                points.extend((key, round(float(t) * 1000) - MINUTE_MS, float(v))
                              for t, v in r["values"])
            first = chunk_last + MINUTE_MS
        return points

    def rack_means(self, metric: str, start_ms: int, end_ms: int, step_ms: int,
                   cluster: str | None = None) -> RackSeries:
        """``metric``'s mean per rack and bin of ``step_ms`` over [start, end): averaged by
        the server, per device over the bin and then over the rack's devices (``rack_series``),
        so a 1,000-GPU fleet comes back as one line per rack. ``start_ms`` a multiple of the
        step (the server aligns the steps of a range query to it)."""
        bins = max(0, -(-(end_ms - start_ms) // step_ms))
        if bins == 0:
            return RackSeries(start_ms, step_ms, 0, {})
        selector = series_selector(metric, cluster=cluster)
        # The value at t averages [t - step, t): the bin that ends at t.
        result = self._get("/api/v1/query_range", query=(
            f"avg by (cluster, rack) (avg_over_time({selector}[{step_ms}ms] offset 1ms))"),
            start=(start_ms + step_ms) / 1000, end=(start_ms + bins * step_ms) / 1000,
            step=f"{step_ms}ms", nocache=1)
        means: dict[tuple[str, str], list[float | None]] = {}
        for r in result:
            line: list[float | None] = [None] * bins
            for t, v in r["values"]:
                i = (round(float(t) * 1000) - step_ms - start_ms) // step_ms
                if 0 <= i < bins:
                    line[i] = float(v)
            means[r["metric"].get("cluster", ""), r["metric"].get("rack", "")] = line
        return RackSeries(start_ms, step_ms, bins, dict(sorted(means.items())))

    def maintain(self, now_ms: int) -> None:
        """Nothing to do: VictoriaMetrics keeps its own parts merged and drops data past
        its ``-retentionPeriod``; 1-minute means are computed at query time."""
