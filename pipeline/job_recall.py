"""The jobs a processor's start (or a partition taken over) finds open in the store, however
old, and when each node was last seen: what ``EventTracker.recall`` starts a node from.

The processor reads a week of job events for every node it meets (``JOB_RECALL_S``: a
fleet's whole history is seconds and gigabytes to read at each start). A GPU slot of a
node's first frame with no job event in that week is idle, or holds a job started before
it: only such nodes' older job events are read, one node at a time (an index of the
store's; an idle node has few). A recalled job the first frame no longer names ended
while no one watched, at the node's newest stored sample before it (``last_seen``), so
that a job ten days gone does not read as ten days long.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline.events import NodeKey, split_jobs
from fleetwatch.pipeline.store.base import RAW_SPAN_MS, Event, Store, gpu_index

JOB_KINDS = ("job_start", "job_end")
# A node's own series, newest first tried: one for the host, one per GPU.
SEEN_METRICS = ("host_cpu_util_pct", "gpu_temp_c")


def first_frames(frames: Iterable[Frame], nodes: Iterable[NodeKey]) -> dict[NodeKey, Frame]:
    """Each of ``nodes``' earliest frame among ``frames``."""
    wanted, out = set(nodes), {}
    for f in frames:
        key = (f.cluster, f.node)
        if key in wanted and (key not in out or f.ts < out[key].ts):
            out[key] = f
    return out


def unknown_slots(frames: Iterable[Frame], nodes: Iterable[NodeKey], events: Iterable[Event]
                  ) -> dict[NodeKey, set[int]]:
    """The GPU slots of each node's first frame that no job event in ``events`` names:
    idle, or running a job older than the events read (none: every slot is known)."""
    named: dict[NodeKey, set[int]] = {}
    for e in events:
        index = gpu_index(e.device)
        if e.kind in JOB_KINDS and index is not None:
            named.setdefault((e.cluster, e.node), set()).add(index)
    out = {}
    for key, f in first_frames(frames, nodes).items():
        missing = {g.index for g in f.gpus} - named.get(key, set())
        if missing:
            out[key] = missing
    return out


def older_job_events(store: Store, frames: Sequence[Frame], nodes: Sequence[NodeKey],
                     events: Sequence[Event], before: float) -> list[Event]:
    """The job events before ``before`` of the nodes with a slot ``events`` leave unknown."""
    out: list[Event] = []
    for (cluster, node) in unknown_slots(frames, nodes, events):
        out += [e for e in store.events(0.0, before, node=node, kinds=JOB_KINDS)
                if e.cluster == cluster]
    return out


def open_jobs(events: Iterable[Event]) -> dict[NodeKey, dict[int, dict[str, float]]]:
    """The jobs ``events`` leave open on each node's GPU slots, with their starts."""
    out: dict[NodeKey, dict[int, dict[str, float]]] = {}
    for e in sorted(events, key=lambda e: (e.ts, e.kind == "job_start")):
        index = gpu_index(e.device)
        if index is None or e.kind not in JOB_KINDS:
            continue
        held = out.setdefault((e.cluster, e.node), {}).setdefault(index, {})
        for job in split_jobs(e.value):
            if e.kind == "job_end":
                held.pop(job, None)
            else:
                held.setdefault(job, e.ts)
    return out


def dropping(frames: Sequence[Frame], nodes: Sequence[NodeKey], events: Sequence[Event]
             ) -> dict[NodeKey, tuple[float, float]]:
    """The nodes whose first frame no longer names a job ``events`` leave open on it: the
    oldest such job's start and that frame's time (between them, it was last seen)."""
    held = open_jobs(events)
    out = {}
    for key, f in first_frames(frames, nodes).items():
        now = {g.index: split_jobs(g.job) for g in f.gpus}
        gone = [start for i, jobs in held.get(key, {}).items()
                for job, start in jobs.items() if job not in now.get(i, set())]
        if gone:
            out[key] = (min(gone), f.ts)
    return out


def last_seen(store: Store, spans: Mapping[NodeKey, tuple[float, float]]
              ) -> dict[NodeKey, float]:
    """Each node's newest stored sample in its span [since, until) (none found: left out):
    the raw samples of the last ``RAW_SPAN_MS``; else the newest minute rolled up before,
    and the raw samples from it (or from ``since``) on, which no rollup holds yet where
    the run that wrote them was killed."""
    out = {}
    own = getattr(store, "newest_sample_ms", None)  # SQLite: its range walks every node's rows
    for (cluster, node), (since, until) in spans.items():
        if callable(own):
            found = own(node, cluster, round(since * 1000), round(until * 1000))
            if found is not None:
                out[(cluster, node)] = found / 1000
            continue

        def newest(lo: int, hi: int, key: NodeKey = (cluster, node)) -> int | None:
            return _newest(store, key, lo, hi)

        lo, hi = round(since * 1000), round(until * 1000)
        found = newest(max(lo, hi - RAW_SPAN_MS), hi)
        if found is None and lo < hi - RAW_SPAN_MS:
            rolled = newest(lo, hi - RAW_SPAN_MS)  # a minute's start
            start = lo if rolled is None else rolled
            found = newest(start, min(start + RAW_SPAN_MS, hi - RAW_SPAN_MS))
            found = rolled if found is None else found
        if found is not None:
            out[(cluster, node)] = found / 1000
    return out


def _newest(store: Store, key: NodeKey, lo: int, hi: int) -> int | None:
    """The newest time (ms) of the node's own series in [lo, hi): raw samples, or minute
    rollups where the span is longer than ``RAW_SPAN_MS``."""
    return max((t for metric in SEEN_METRICS for _, t, _ in
                store.range(metric, lo, hi, node=key[1], cluster=key[0]) if lo <= t < hi),
               default=None)
