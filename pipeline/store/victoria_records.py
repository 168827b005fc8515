"""The records on VictoriaMetrics (mixed into ``VictoriaMetricsStore``): alerts,
annotations, events, notifications, silences and acknowledgements, read back through the
Prometheus query API from the lines ``lprecords``, ``lpnotify`` and ``lpsilences`` write.

* ``alerts``: alerts are lines of ``fleetwatch_alert`` (see
  ``lineproto.alert_line``); ``last_over_time`` over ``alert_lookback_s``
  gives each series' last row, and per alert id the row with the newest
  ``updated_ts`` is its current state. An alert not updated within the
  lookback is forgotten, so keep the lookback above the longest a node
  may stay silent with an open alert;
* ``annotations``: lines of ``fleetwatch_annotation`` at their start time;
  those that started within ``annotation_lookback_s`` before the window end.
* ``events``: lines of ``fleetwatch_event`` (``lprecords.event_line``):
  kind, place, code and value (a state name, a job id) are labels, the
  time a field. VictoriaMetrics keeps numbers only, so an event's free
  ``text`` (a kernel-log line) is not kept: the reader gets it empty.
* alerts keep their message and action nowhere (text is never a label):
  the reader gets a message rendered from the rule, place, value and
  evidence (``lprecords.render_message``) and an empty action. The GPU
  board an alert names (uuid, serial, pci_bus_id) is kept, as labels fixed
  for the alert's life; a ``gpu_identity`` event keeps the board's UUID
  (its value) but not its serial (text).
* ``silences`` and ``acks``: lines of ``fleetwatch_silence`` and
  ``fleetwatch_ack`` at the time they were written (``lpsilences``): a
  silence's matchers are its identity and are kept exactly, as labels
  checked by a hash; who made it is a label; its comment, and an
  acknowledgement's, is text and not kept (the reader gets it empty).
  ``last_over_time`` over ``silence_lookback_s`` (``alert_lookback_s`` for
  acknowledgements) gives each series' last row; per id, the newest
  ``written_ts`` wins. A silence is kept as long as the server's
  ``-retentionPeriod`` after it was last written.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Acknowledgement,
    Alert,
    AlertState,
    Annotation,
    Event,
    Notification,
    Silence,
)
from fleetwatch.pipeline.store.lpnotify import (
    NOTIFY_MEASUREMENT,
    notification_from,
    select_notes,
)
from fleetwatch.pipeline.store.lprecords import (
    ALERT_MEASUREMENT,
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
from fleetwatch.pipeline.store.metricsql import join_rows, quote, regex_literal

# A window that reaches before 1970 selects nothing on VictoriaMetrics, so
# windows start no earlier than 2000-01-01, before which the codec takes no frame.
FLOOR_MS = 946_684_800_000


class VictoriaRecords:
    """Needs the host class's ``query`` and its lookbacks (``alert_lookback_s``,
    ``annotation_lookback_s``, ``silence_lookback_s``)."""

    alert_lookback_s: float
    annotation_lookback_s: float
    silence_lookback_s: float
    if TYPE_CHECKING:  # provided by VictoriaMetricsStore
        def query(self, promql: str, at_ms: int | None = None) -> list[dict[str, Any]]: ...

    def alerts(self, states: Sequence[AlertState] = ACTIVE_STATES,
               since_ts: float | None = None) -> list[Alert]:
        """Per (cluster, id), the row with the newest ``updated_ts``; the message is rendered
        from the structured fields (text is not kept here) and the action is empty."""
        at_ms = int(time.time() * 1000) + 60_000
        window_ms = int(self.alert_lookback_s * 1000)
        if since_ts is not None:  # rows older than since_ts cannot qualify
            window_ms = at_ms - max(int(since_ts * 1000), FLOOR_MS)
        result = self.query(
            f'last_over_time({{__name__=~"{ALERT_MEASUREMENT}_.+"}}[{window_ms}ms])', at_ms)
        newest: dict[tuple[str, str], tuple[dict[str, str], dict[str, float]]] = {}
        for labels, fields in join_rows(ALERT_MEASUREMENT, result):
            if "id" not in labels or "updated_ts" not in fields or "state" not in fields:
                continue
            key = (labels.get("cluster", ""), labels["id"])
            seen = newest.get(key)
            if seen is None or fields["updated_ts"] >= seen[1]["updated_ts"]:
                newest[key] = (labels, fields)
        out = []
        for labels, fields in newest.values():
            alert = alert_from(labels, fields)
            if alert.state in states and (since_ts is None or alert.updated_ts >= since_ts):
                out.append(alert)
        return sorted(out, key=lambda a: a.started_ts, reverse=True)

    def annotations(self, start_ts: float, end_ts: float) -> list[Annotation]:
        # Raw samples, not last_over_time: one series may hold several annotations
        # (same kind, node, device and text at different starts).
        end_ms = round(end_ts * 1000)
        if end_ms <= FLOOR_MS:
            return []
        window_ms = max(end_ms - round(start_ts * 1000), 0) + int(
            self.annotation_lookback_s * 1000)
        window_ms = min(window_ms, end_ms - FLOOR_MS)
        result = self.query(
            f'{{__name__=~"{ANNOTATION_MEASUREMENT}_.+"}}[{window_ms}ms]', end_ms - 1)
        found: dict[tuple[str, float, str, str, str], Annotation] = {}
        for labels, fields in join_rows(ANNOTATION_MEASUREMENT, result):
            if "start_ts" not in fields:
                continue
            a = Annotation(labels.get("kind", ""), fields["start_ts"], fields.get("end_ts"),
                           labels.get("node", ""), labels.get("device", ""),
                           labels.get("text", ""), labels.get("cluster", ""))
            if a.start_ts < end_ts and (a.end_ts is None or a.end_ts >= start_ts):
                key = (a.kind, a.start_ts, a.cluster, a.node, a.device)
                # Rewritten with another text: two series; keep the one that has an end.
                if key not in found or found[key].end_ts is None:
                    found[key] = a
        return sorted(found.values(), key=lambda a: a.start_ts)

    def events(self, start_ts: float, end_ts: float, node: str | None = None,
               kinds: Sequence[str] | None = None, device: str | None = None,
               except_xids: Collection[int] = ()) -> list[Event]:
        """Raw samples of ``fleetwatch_event`` in [start, end); ``text`` is empty (not kept).
        With ``except_xids``, XIDs (one selector, those codes left out) and the other kinds
        (another) are read apart: a label matcher cannot depend on the kind."""
        start_ms, end_ms = max(round(start_ts * 1000), FLOOR_MS), round(end_ts * 1000)
        if end_ms <= start_ms or (kinds is not None and not kinds):
            return []
        wanted: dict[str, str | None] = {"node": node, "device": device}
        base = [f'__name__=~"{EVENT_MEASUREMENT}_.+"']
        base += [f'{k}="{quote(v)}"' for k, v in wanted.items() if v is not None]

        def of_kinds(names: Sequence[str]) -> str:
            return 'kind=~"' + "|".join(quote(regex_literal(k)) for k in names) + '"'

        selectors = [base + ([of_kinds(kinds)] if kinds is not None else [])]
        if except_xids and (kinds is None or "xid" in kinds):
            codes = "|".join(str(int(c)) for c in sorted(set(except_xids)))
            others = None if kinds is None else [k for k in kinds if k != "xid"]
            selectors = [base + ['kind="xid"', f'code!~"{codes}"']]
            if others is None or others:
                selectors.append(base + (['kind!="xid"'] if others is None
                                         else [of_kinds(others)]))
        found = []
        for matchers in selectors:
            result = self.query("{" + ",".join(matchers) + f"}}[{end_ms - start_ms}ms]",
                                end_ms - 1)
            found += [event_from(labels, fields["ts"]) for labels, fields
                      in join_rows(EVENT_MEASUREMENT, result) if "ts" in fields]
        return select_events(found, start_ts, end_ts, node, kinds, device, except_xids)

    def notifications(self, start_ts: float, end_ts: float,
                      alert_ids: Sequence[str] | None = None) -> list[Notification]:
        """What was notified in [start, end) (``lpnotify``), of these alerts where given."""
        start_ms = max(round(start_ts * 1000), FLOOR_MS)
        end_ms = min(round(end_ts * 1000), int(time.time() * 1000) + 86_400_000)
        if end_ms <= start_ms or alert_ids is not None and not alert_ids:
            return []
        result = self.query(f'{{__name__=~"{NOTIFY_MEASUREMENT}_.+"}}'
                            f"[{end_ms - start_ms}ms]", end_ms - 1)
        return select_notes([notification_from(labels, fields) for labels, fields
                             in join_rows(NOTIFY_MEASUREMENT, result)],
                            start_ts, end_ts, alert_ids)

    def _last_rows(self, measurement: str, lookback_s: float
                   ) -> list[tuple[dict[str, str], dict[str, float]]]:
        """The last row of every series of ``measurement`` written within ``lookback_s``."""
        at_ms = int(time.time() * 1000) + 60_000  # past the server's latency offset
        window_ms = min(int(lookback_s * 1000), at_ms - FLOOR_MS)
        result = self.query(
            f'last_over_time({{__name__=~"{measurement}_.+"}}[{window_ms}ms])', at_ms)
        return join_rows(measurement, result)

    def silences(self, active_at: float | None = None) -> list[Silence]:
        """Every silence written within ``silence_lookback_s``, or those in force at
        ``active_at``; comments are empty (not kept here)."""
        rows = [(labels.get("id", ""), fields["written_ts"], silence_from(labels, fields))
                for labels, fields in self._last_rows(SILENCE_MEASUREMENT,
                                                      self.silence_lookback_s)
                if {"written_ts", "start_ts", "end_ts"} <= fields.keys() and labels.get("id")]
        found = [s for s in newest(rows) if isinstance(s, Silence)]
        if active_at is not None:
            found = [s for s in found if s.start_ts <= active_at < s.end_ts]
        return sorted(found, key=lambda s: (s.start_ts, s.id))

    def acks(self) -> list[Acknowledgement]:
        """Acknowledgements written within ``alert_lookback_s``; comments are empty."""
        rows = [(labels["alert_id"], fields["written_ts"], ack_from(labels, fields))
                for labels, fields in self._last_rows(ACK_MEASUREMENT, self.alert_lookback_s)
                if {"written_ts", "ts"} <= fields.keys() and labels.get("alert_id")]
        found = [a for a in newest(rows) if isinstance(a, Acknowledgement)]
        return sorted(found, key=lambda a: (a.ts, a.alert_id))
