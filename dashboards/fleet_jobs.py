"""Each GPU's job (and its user) for the fleet heatmap's hover, kept between refreshes.

The store keeps no job label on its series: a GPU's job is that of its last
``job_start`` event with no ``job_end`` after it, as the node page reads it
(``job_data.current_jobs``), here for every node at once. A month of a big fleet's job
events is too many to read for a page (half a million at 1,000 nodes with a job a day:
4 s), so the events read are the last day's, once, and then only the newest since
(the last ``RECENT_S`` read again on each refresh: a processor catching up writes them
late). A GPU with no job event in that day has held the same job all day: the energy
ledger's rows of this hour and the last book its GPU-time to that job and its user
(read at most once per ``LEDGER_EVERY_S``); the ledger also gives the users of the
others' jobs (the events do not carry them).
"""

from __future__ import annotations

import threading
from typing import Any

from fleetwatch.dashboards.data import FUTURE_SLACK_S, GpuKey
from fleetwatch.dashboards.job_data import JOB_EVENTS, LOOKBACKS_S, fold_jobs
from fleetwatch.pipeline.store.base import Event, gpu_index
from fleetwatch.pipeline.store.ledger import BUCKET_S, EnergyRow, bucket_floor

RECENT_S = 3600.0        # job events read again on every refresh
EVENTS_S = LOOKBACKS_S[0]  # a day: a GPU with no job event in it is told by the ledger
LEDGER_EVERY_S = 300.0   # the ledger's rows fill as the hour goes: not worth more often


def _gpu(e: Event, index: int) -> GpuKey:
    return e.cluster, e.node, index


def booked(rows: list[EnergyRow]) -> dict[GpuKey, tuple[str, str]]:
    """(cluster, node, gpu) -> (job, user) the ledger books it to: of the newest hour
    with a row for it ("" for a GPU that held no job)."""
    out: dict[GpuKey, tuple[str, str]] = {}
    for r in sorted(rows, key=lambda r: (r.bucket_ts, bool(r.job))):
        index = gpu_index(r.device)
        if index is not None:
            out[r.cluster, r.node, index] = (r.job, r.user)
    return out


def label(job: str, user: str | None) -> str:
    """What a cell's hover says of its GPU's holder."""
    return f"{job} · user {user}" if user else job


class FleetJobs:
    """One per dashboard: the job events folded so far, and the ledger last read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the server's threads refresh several tabs at once
        self._reset(None)

    def _reset(self, since: float | None) -> None:
        self.held: dict[GpuKey, str] = {}
        self.seen: set[GpuKey] = set()   # GPUs with a job event since the first read
        self.folded_to = since
        self.ledger: dict[GpuKey, tuple[str, str]] = {}
        self.ledger_read: float | None = None

    def read(self, store: Any, now_s: float) -> dict[GpuKey, str]:
        """(cluster, node, gpu) -> its job now, with its user where known (``label``)."""
        if not callable(getattr(store, "events", None)):
            return {}  # a store that keeps no events knows no jobs
        with self._lock:
            return self._read(store, now_s)

    def _read(self, store: Any, now_s: float) -> dict[GpuKey, str]:
        edge = now_s - RECENT_S
        if self.folded_to is None or edge < self.folded_to - RECENT_S:
            # First read, or a clock gone back (a simulation started again): from scratch.
            self._reset(now_s - EVENTS_S)
        if self.folded_to is not None and edge > self.folded_to:
            older = store.events(self.folded_to, edge, kinds=JOB_EVENTS)
            self.held, self.folded_to = fold_jobs(self.held, older, _gpu), edge
            self.seen.update(_gpu(e, i) for e in older if (i := gpu_index(e.device)) is not None)
        since = now_s - EVENTS_S if self.folded_to is None else self.folded_to
        recent = store.events(since, now_s + FUTURE_SLACK_S, kinds=JOB_EVENTS)
        jobs = fold_jobs(self.held, recent, _gpu)
        seen = self.seen | {_gpu(e, i) for e in recent if (i := gpu_index(e.device)) is not None}
        self._read_ledger(store, now_s)
        users = {(c, job): user for (c, _, _), (job, user) in self.ledger.items() if user}
        for gpu, (job, _) in self.ledger.items():
            if gpu not in seen and job:  # the same job all day: the ledger says which
                jobs[gpu] = job
        return {gpu: label(job, users.get((gpu[0], job))) for gpu, job in jobs.items()}

    def _read_ledger(self, store: Any, now_s: float) -> None:
        reader = getattr(store, "energy", None)
        due = self.ledger_read is None or now_s - self.ledger_read >= LEDGER_EVERY_S
        if callable(reader) and due:
            self.ledger_read = now_s
            hour = bucket_floor(now_s)
            self.ledger = booked(reader(hour - BUCKET_S, hour + BUCKET_S))
