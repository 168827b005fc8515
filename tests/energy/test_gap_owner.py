"""Who a silence is charged to: time across a gap longer than max_gap_s is the job's only
when the same job holds the GPU at both ends; else it is no job's (a job that started after
the silence, or ended during it, did not hold the GPU for all of it)."""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.energy_arrays import integrate_arrays
from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.store.sqlite import SqliteStore

from .helpers import frame

T0 = 1_651_795_200.0  # 2022-05-06 00:00 UTC, an hour boundary
GPU = {0: {"gpu_power_w": 200.0, "gpu_sm_active_ratio": 0.5},
       1: {"gpu_power_w": 200.0, "gpu_sm_active_ratio": 0.5}}
SETTINGS = EnergySettings(max_gap_s=60, node_static_w=100.0)


def _frames(before: str | None, after: str | None) -> list:
    """Node n1 samples every 15 s for 5 min, is silent 20 min, then 5 min more."""
    out = [frame(T0 + 15 * i, GPU, job=before) for i in range(21)]          # .. T0+300
    out += [frame(T0 + 1500 + 15 * i, GPU, job=after) for i in range(21)]   # T0+1500 ..
    return out


def _by_job(rows: list, field: str, device: str | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        if device is None or r.device == device:
            out[r.job] = out.get(r.job, 0.0) + getattr(r, field)
    return {k: v for k, v in out.items() if v}


def test_a_job_that_starts_after_a_silence_is_not_charged_for_it():
    # Job "a" ran before the silence, job "b" only after: the 1200 s of each GPU and of the
    # node's rest are no job's, not b's.
    _, rows, _ = EnergyIntegrator(None, SETTINGS).integrate(_frames("a", "b"))
    assert _by_job(rows, "missing_s", "gpu0") == {"": pytest.approx(1200.0)}
    assert _by_job(rows, "missing_s", "gpu1") == {"": pytest.approx(1200.0)}
    assert _by_job(rows, "missing_s", "rest") == {"": pytest.approx(1200.0)}
    assert _by_job(rows, "seconds", "gpu0") == {"a": pytest.approx(300.0),
                                                "b": pytest.approx(300.0)}


def test_no_job_before_a_silence_and_a_job_after_it_leaves_the_silence_to_no_job():
    _, rows, _ = EnergyIntegrator(None, SETTINGS).integrate(_frames(None, "b"))
    assert _by_job(rows, "missing_s") == {"": pytest.approx(3 * 1200.0)}


def test_a_job_that_spans_a_silence_is_charged_its_missing_time():
    _, rows, _ = EnergyIntegrator(None, SETTINGS).integrate(_frames("a", "a"))
    assert _by_job(rows, "missing_s") == {"a": pytest.approx(3 * 1200.0)}


def test_the_silence_is_booked_to_no_job_in_the_sqlite_ledger_across_batches(tmp_path):
    # Batches of 10 frames: the silence is met by a later batch than its start.
    store = SqliteStore(tmp_path / "s.db")
    try:
        ei = EnergyIntegrator(store, SETTINGS)
        frames = _frames("a", "b")
        for i in range(0, len(frames), 10):
            ei.observe(frames[i:i + 10])
        rows = store.energy(0, 1e12)
        assert _by_job(rows, "missing_s", "gpu0") == {"": pytest.approx(1200.0)}
        assert _by_job(rows, "missing_s") == {"": pytest.approx(3 * 1200.0)}
        assert "b" not in _by_job(rows, "missing_s")
        assert _by_job(rows, "seconds", "gpu1") == {"a": pytest.approx(300.0),
                                                    "b": pytest.approx(300.0)}
    finally:
        store.close()


def test_a_processor_that_takes_over_in_the_silence_books_it_to_no_job(tmp_path):
    # The first processor saw the frames before the silence; a new one (a restart) meets
    # the frames after it with the watermarks from the store, not who held the GPUs.
    store = SqliteStore(tmp_path / "s.db")
    try:
        frames = _frames("a", "a")
        EnergyIntegrator(store, SETTINGS).observe(frames[:21])
        EnergyIntegrator(store, SETTINGS).observe(frames[21:])
        rows = store.energy(0, 1e12)
        assert _by_job(rows, "missing_s") == {"": pytest.approx(3 * 1200.0)}
        assert _by_job(rows, "seconds", "gpu0") == {"a": pytest.approx(600.0)}
    finally:
        store.close()


def test_the_array_path_leaves_a_silence_before_a_new_job_to_no_job():
    ts = np.array([T0, T0 + 15, T0 + 1215, T0 + 1230, T0 + 2430, T0 + 2445])
    power = np.full((6, 1), 200.0)
    owner = np.array([[0], [0], [1], [1], [1], [1]])   # job a, then b after the first gap
    rows = integrate_arrays(ts, power, None, np.zeros((6, 1), bool), owner,
                            [("c", "r", "n", "gpu0")], [("a", "u", "t"), ("b", "u", "t")],
                            EnergySettings(max_gap_s=60))
    assert _by_job(rows, "missing_s") == {"": pytest.approx(1200.0), "b": pytest.approx(1200.0)}
    assert _by_job(rows, "seconds") == {"a": pytest.approx(15.0), "b": pytest.approx(30.0)}
