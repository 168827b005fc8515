"""Mirroring fleetwatch's silences and acknowledgements as Alertmanager silences, for the
``AlertmanagerSink`` (``pipeline.sinks.alertmanager``): one reconciling pass (read
Alertmanager's, plan with ``am_silences``, expire, change or create only what differs), a
person's edit there set back and said, a refused silence said once, and the warning for an
``alerts.clusters`` entry never seen. The state used here is set up in the sink's
``__init__``; the sink decides when a pass runs (``mutes``, ``tick``, after a failed post).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from fleetwatch.pipeline.sinks.am_payload import ack_labels
from fleetwatch.pipeline.sinks.am_silences import (
    AlertmanagerSilences,
    Wanted,
    clusters_warning,
    edit_said,
    plan,
    ts,
    wanted_of,
)
from fleetwatch.pipeline.sinks.base import SinkError, SinkRejected
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence

# The sink's own logger: a user's logging configuration names it.
log = logging.getLogger("fleetwatch.pipeline.sinks.alertmanager")


class SilenceMirroring:
    """The silence-mirroring half of an ``AlertmanagerSink``."""

    clock: Callable[[], float]
    resend_s: float
    silence_api: AlertmanagerSilences
    owner: str
    clusters: tuple[str, ...]
    silence_errors: int
    _lock: threading.Lock
    _firing: dict[str, Alert]
    _clusters_seen: Callable[[], Iterable[str]]
    _alert_clusters: set[str]
    _silences: list[Silence] | None
    _acks: dict[str, Acknowledgement]
    _resolved_ids: set[str]
    _mirror_failing: bool
    _mirrored_at: float
    _refused: set[str]
    _put_last: dict[str, tuple[tuple[Any, ...], float]]

    def check_clusters(self) -> str:
        """Warn when an ``alerts.clusters`` entry was never seen (at start, and whenever a
        silence is mirrored); returns the warning, "" if none."""
        if not self.clusters:
            return ""
        with self._lock:
            seen = set(self._alert_clusters)
        try:
            seen.update(self._clusters_seen())
        except Exception as exc:  # noqa: BLE001 - a check, never a reason to stop mirroring
            log.debug("could not read the clusters seen from the store: %s", exc)
            return ""  # nothing to judge by: no warning that may be false
        said = clusters_warning(self.clusters, seen)
        if said:
            log.warning("%s", said)
        return said

    def _mirror(self) -> None:
        """One reconciling pass of Alertmanager's silences with fleetwatch's; never raises:
        a failure is logged once per outage, counted, and tried again at the next call."""
        now = self.clock()
        with self._lock:
            if self._silences is None:
                return
            firing = [(a, ack_labels(a)) for a in self._firing.values()]
            wanted = wanted_of(self._silences, self._acks, firing, now, self.resend_s,
                               self.clusters)
            owned = {a.id for a, _ in firing} | self._resolved_ids
            ended = {f"silence {s.id}" for s in self._silences
                     if s.end_ts <= max(now, s.start_ts)}  # expired, or before its start
            resolved_ids = set(self._resolved_ids)

        def mine(key: str) -> bool:
            kind, _, what = key.partition(" ")
            return kind == "silence" or what in owned

        refused = 0
        try:
            todo = plan(wanted, self.silence_api.list(), mine, self.owner, ended)
            if any(w.key.startswith("silence ")
                   for w in (*todo.create, *(w for _, w in todo.update))):
                self.check_clusters()
            for silence_id in todo.expire:
                self.silence_api.expire(silence_id)
            for have, w in todo.update:
                self._say_edit(have, w)
                active = (have.get("status") or {}).get("state") == "active"
                start = ts(have["startsAt"]) if active else None
                refused += not self._put(w, w.body(now, have["id"], start, self.owner))
            for w in todo.create:
                refused += not self._put(w, w.body(now, created_by=self.owner))
        except SinkError as exc:
            self.silence_errors += 1
            if not self._mirror_failing:
                log.warning("could not mirror fleetwatch's silences and acknowledgements to "
                            "Alertmanager (tried again at the next reload): %s", exc)
            self._mirror_failing = True
            return
        if refused:
            self.silence_errors += 1  # a silence that does not mute there: counted each pass
        if self._mirror_failing:
            log.info("fleetwatch's silences are mirrored to Alertmanager again")
        self._mirror_failing = False
        self._mirrored_at = now
        with self._lock:
            self._resolved_ids -= resolved_ids

    def _say_edit(self, have: dict[str, Any], w: Wanted) -> None:
        """A silence of ours that differs from what this processor last put there, while
        fleetwatch's is unchanged: a person edited it in Alertmanager (its edit form keeps
        our createdBy and comment). Set back (the store is the source: other processors
        and restarts mirror it), so said, with how to change it."""
        if (not w.key.startswith("silence ") or have.get("createdBy") != self.owner
                or self._put_last.get(w.key) != (w.matchers, w.end_ts)):
            return
        sid = w.key.partition(" ")[2]
        log.warning("Alertmanager silence %s (fleetwatch silence %s) was changed there "
                    "(%s): fleetwatch's copy is the source and wins, so it is set back now. "
                    "Change it with fleetwatch instead: `fleetwatch silence expire %s`, then "
                    "`fleetwatch silence add MATCHER... --for DUR`", have.get("id"), sid,
                    edit_said(have, w) or "changed", sid)

    def _put(self, w: Wanted, body: dict[str, Any]) -> bool:
        """Create or change one silence; False if Alertmanager refused it."""
        key = w.key
        self._put_last[key] = (w.matchers, w.end_ts)
        try:
            self.silence_api.put(body)
        except SinkRejected as exc:  # this one can never be made: say so once, go on
            if key not in self._refused:
                log.error("Alertmanager refused the silence for fleetwatch %s, so its "
                          "alerts may still be notified there: %s", key, exc)
            self._refused.add(key)
            return False
        return True
