"""A replay holds what the fleet's size calls for, not what the recording's length does: the
coverage memo is keyed by which GPUs share a job (not the job ids a churning fleet makes by
the thousand), racks forget nodes gone stale, and the replay's store keeps only what is read
back (each GPU slot's board, state and open jobs; each open alert's newest version)."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

import fleetwatch.replay as replay_mod
from fleetwatch import replay_coverage
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.job_recall import open_jobs
from fleetwatch.pipeline.store.base import Alert, Event
from fleetwatch.recording import RecordingStore
from fleetwatch.replay_coverage import Coverage, ReplaySummary, _Racks
from fleetwatch.wiring import detectors

METRICS = {"gpu_temp_c": 60.0, "gpu_power_w": 300.0, "gpu_util_pct": 90.0}
# Which GPUs of a 4-GPU node share a job, as indices of the partition's jobs (None: idle).
PARTITIONS = [(0, 0, 1, 1), (0, 1, 2, 3), (0, 0, 0, 0), (0, 0, None, None), (0, 1, 0, 1)]


def churned(ticks: int) -> list[list[Frame]]:
    """Two 4-GPU nodes whose GPUs change jobs every tick: new job ids each time, in one of
    a few partitions."""
    rnd = random.Random(3)
    out, job = [], 0
    for t in range(ticks):
        batch = []
        for node in ("a", "b"):
            part = rnd.choice(PARTITIONS)
            job += 1
            gpus = tuple(GpuReading(i, f"GPU-{node}{i}", "NVIDIA A100-SXM4-80GB", METRICS,
                                    job=None if k is None else f"job-{job}-{k}")
                         for i, k in enumerate(part))
            batch.append(Frame("c", "r1", node, 1_700_000_000.0 + 15 * t, gpus, HostReading()))
        out.append(batch)
    return out


def summary(batches: list[list[Frame]]) -> tuple[ReplaySummary, Coverage]:
    cov = Coverage(detectors(DetectorsConfig()))
    for b in batches:
        cov.see(b)
    s = ReplaySummary()
    cov.done(s, False)
    return s, cov


def test_the_coverage_memo_holds_the_partitions_not_the_job_ids() -> None:
    s, cov = summary(churned(300))
    assert len(cov.shapes) <= len(PARTITIONS)
    assert 0 < s.coverage["gpu_stuck"] < 1  # idle GPUs and one-GPU jobs are not judged


def test_the_memo_judges_as_each_frame_judged_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    memo, _ = summary(churned(120))
    monkeypatch.setattr(replay_coverage, "SHAPES_MAX", 0)  # cleared at every new shape
    fresh, cov = summary(churned(120))
    assert len(cov.shapes) == 1
    assert (memo.coverage, memo.unjudged) == (fresh.coverage, fresh.unjudged)


def test_the_memo_is_bounded_where_shapes_keep_changing(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr(replay_coverage, "SHAPES_MAX", 8)
    cov = Coverage(detectors(DetectorsConfig()))
    for t in range(50):  # a new metric each tick: a new shape each tick
        g = GpuReading(0, "GPU-x", "", {**METRICS, f"m{t}": 1.0})
        cov.see([Frame("c", "r", "n", 1e9 + t, (g,))])
    assert len(cov.shapes) <= 8 and cov.samples == 50


def test_racks_forget_nodes_gone_stale() -> None:
    racks = _Racks(2, "gpu_temp_c")
    for t in range(200):  # a new node every tick, each in a rack renamed every 10 ticks
        gpus = tuple(GpuReading(i, f"GPU-{t}-{i}", "", METRICS) for i in range(4))
        racks.see([Frame("c", f"rack-{t // 10}", f"n{t}", 1e9 + 60.0 * t, gpus)])
    held = sum(len(v) for v in racks.gpus.values())
    assert held <= 3 * 4 and len(racks.gpus) <= 4


def alert(i: int, state: str, value: float) -> Alert:
    return Alert(f"node_silent/c/n{i}//1", "node_silent", "critical", "c", "r", f"n{i}", "",
                 state, 1.0, value, value, "silent", fired_ts=1.0)  # type: ignore[arg-type]


def test_a_replay_store_keeps_each_open_alert_once() -> None:
    kept, every = RecordingStore(history=False), RecordingStore()
    for store in (kept, every):
        for v in range(500):  # an open alert re-written as its value moves
            store.write_alerts([alert(0, "firing", v), alert(1, "firing", v)])
        store.write_alerts([alert(1, "resolved", 500)])
    assert kept.changes == [] and list(kept.open.values()) == [alert(0, "firing", 499)]
    assert len(every.changes) == 1001  # evaluate scores every change


def ev(ts: float, kind: str, node: str, gpu: int, value: str) -> Event:
    return Event(ts, "c", "r", node, f"gpu{gpu}", kind, 0, value)


def folded(events: list[Event]) -> tuple[object, ...]:
    """What ``EventTracker.recall`` makes of events: boards, states and open jobs."""
    boards: dict[tuple[str, str], str] = {}
    states: dict[tuple[str, str], str] = {}
    for e in sorted(events, key=lambda e: (e.ts, e.kind == "job_start")):
        if e.kind == "gpu_identity":
            for k in [k for k, u in boards.items() if k[0] == e.node and k != (e.node, e.device)
                      and u == e.value]:
                del boards[k]
            boards[(e.node, e.device)] = e.value
        elif e.kind == "gpu_state" and e.value:
            states[(e.node, e.device)] = e.value
    jobs = {k: {i: set(v) for i, v in slots.items() if v}
            for k, slots in open_jobs(events).items()}
    return boards, states, {k: v for k, v in jobs.items() if v}


def test_a_store_keeps_what_recall_reads_in_the_fleets_size() -> None:
    rnd = random.Random(5)
    events = []
    for t in range(3000):
        node, gpu = rnd.choice("ab"), rnd.randrange(3)
        kind = rnd.choice(["job_start", "job_end", "job_start", "job_end", "gpu_identity",
                           "gpu_state", "xid"])
        value = {"gpu_identity": f"GPU-{rnd.randrange(4)}", "gpu_state": rnd.choice(
            ["ok", "lost", ""]), "xid": ""}.get(kind, rnd.choice(
                [f"j{t // 4}", f"j{t // 4 - 1}", f"j{t // 4},k{t // 4}"]))
        events.append(ev(1e9 + t // 2, kind, node, gpu, value))
    store = RecordingStore()
    for i in range(0, len(events), 7):
        store.write_events(events[i:i + 7])
    kept = store.recorded_events
    assert folded(kept) == folded(events)
    assert len(kept) < 60  # 6 slots: a board, a state, the open jobs' events each
    assert store.events(0, 2e9, node="a", kinds=["gpu_identity"]) == [
        e for e in kept if e.node == "a" and e.kind == "gpu_identity"]


def test_a_replay_of_churning_jobs_holds_the_fleets_size(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """The real replay: 8 GPUs, a new job every tick on each, 600 ticks."""
    made: dict[str, object] = {}

    class Cov(Coverage):
        def __init__(self, *a: object) -> None:
            super().__init__(*a)  # type: ignore[arg-type]
            made["coverage"] = self

    class Store(RecordingStore):
        def __init__(self, history: bool = True) -> None:
            super().__init__(history)
            made["store"] = self

    monkeypatch.setattr(replay_mod, "Coverage", Cov)
    monkeypatch.setattr(replay_mod, "RecordingStore", Store)
    lines = ["timestamp,node,gpu,metric,value,job"]
    for t in range(600):
        for node in ("a", "b"):
            for g in range(4):
                job = f"{node}-{t}-{g // 2}"  # two jobs of two GPUs, new each tick
                for m, v in METRICS.items():
                    lines.append(f"{1_700_000_000 + 15 * t},{node},{g},{m},{v},{job}")
    path = tmp_path / "jobs.csv"
    path.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    s = replay_mod.replay([path], detectors(DetectorsConfig()), out=out)
    assert s.frames == 1200 and s.coverage["gpu_stuck"] == 1.0
    cov, store = made["coverage"], made["store"]
    assert len(cov.shapes) == 1  # type: ignore[attr-defined]
    assert store.changes == []  # type: ignore[attr-defined]
    assert len(store.recorded_events) <= 8 * 3  # type: ignore[attr-defined]
