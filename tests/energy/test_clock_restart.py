"""The ledger across an agent restart after its node's clock was stepped back (the agent's
seq starts again from the corrected clock, so seq and time both go back while the boards'
energy counters run on), a clock error of one frame, and a step back to before the node's
first frame: 2 GPUs at 300 W with an exact counter, a frame every 5 s, read back from a
real SQLite store."""

from __future__ import annotations

import logging

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.energy import EnergyIntegrator
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = 1_764_000_000.0
W = 300.0
AHEAD = 7200.0


def frame(ts: float, true: float, seq: int) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB",
                            {"gpu_power_w": W, "gpu_energy_j": 1e6 + W * (true - T0),
                             "gpu_power_limit_w": 400.0, "gpu_sm_active_ratio": 0.8}, "j1")
                 for i in range(2))
    return Frame("clk", "r9", "rs", ts, gpus, HostReading({}), seq=seq)


def restarted(n1: int = 720, n2: int = 1440) -> list[Frame]:
    """The clock 2 h ahead for n1 frames (the agent's seq from that clock's ms), then the
    clock stepped back and the agent restarted (seq from the right clock's ms)."""
    fr = []
    for k in range(n1):
        fr.append(frame(T0 + AHEAD + 5 * k, T0 + 5 * k, int((T0 + AHEAD) * 1000) + k + 1))
    for j in range(n2):
        true = T0 + 5 * (n1 + j)
        fr.append(frame(true, true, int((T0 + 5 * n1) * 1000) + j + 1))
    return fr


def energy(store: SqliteStore) -> float:
    return sum(r.energy_j for r in store.energy(0, 5e9))


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


@pytest.mark.parametrize("batch", [20, 500])
def test_an_agent_restarted_after_its_clock_stepped_back_keeps_its_energy(store, caplog, batch):
    fr = restarted()
    with caplog.at_level(logging.WARNING):
        ei = EnergyIntegrator(store)
        for i in range(0, len(fr), batch):
            ei.observe(fr[i:i + batch])
    exact = 2 * W * 5 * (len(fr) - 1)
    assert energy(store) == pytest.approx(exact, abs=2 * W * 5 + 1)
    assert ei.clock.counts.get("back") == 1
    assert sum("stepped back" in r.getMessage() for r in caplog.records) == 1


def test_frames_of_an_earlier_agent_run_delivered_again_add_nothing(store):
    # A plain agent restart (no clock step: the new run's seq is above the old one's),
    # then the old run's frames again: behind the watermark, their counters behind too.
    a = [frame(T0 + 5 * k, T0 + 5 * k, 1000 + k) for k in range(60)]
    b = [frame(T0 + 5 * k, T0 + 5 * k, int((T0 + 300) * 1000) + k) for k in range(60, 121)]
    ei = EnergyIntegrator(store)
    ei.observe(a[:30])
    ei.observe(a[30:])
    ei.observe(b)
    ei.observe(a[20:50])
    ei.observe(b[40:])
    assert energy(store) == pytest.approx(2 * W * 600)
    assert ei.clock.counts == {}


def test_one_frame_stamped_in_2099_is_one_error_and_no_overlap_after_it(store):
    fr = [frame(T0 + 5 * k, T0 + 5 * k, 1000 + k) for k in range(221)]
    fr[60] = frame(4070908800.0, T0 + 300, 1060)
    ei = EnergyIntegrator(store)
    for i in range(0, len(fr), 20):
        ei.observe(fr[i:i + 20])
    assert ei.clock.counts == {"error": 1}
    assert energy(store) == pytest.approx(2 * W * 1100, abs=2 * 2 * W * 5 + 1)


def test_a_step_back_to_before_the_nodes_first_frame_overlaps_nothing(store, caplog):
    fr = [frame(T0 + 5 * k - (3 * 3600 if 60 <= k < 80 else 0), T0 + 5 * k, 1000 + k)
          for k in range(121)]
    with caplog.at_level(logging.WARNING):
        ei = EnergyIntegrator(store)
        for i in range(0, len(fr), 20):
            ei.observe(fr[i:i + 20])
    assert ei.clock.counts.get("overlap", 0) == 0 and ei.clock.counts["back"] == 1
    assert energy(store) == pytest.approx(2 * W * 600)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "replace those stored" not in said


def test_the_processors_metrics_after_one_frame_in_2099_and_a_restart(store):
    # What a scrape sees: one error for the 2099 frame, no overlap rising on later frames,
    # and the restart after a step back counted once.
    from fleetwatch.pipeline.health import ProcessorCollector
    from fleetwatch.pipeline.processor import Processor

    p = Processor(store)
    fr = restarted(200, 300)
    fr[100] = frame(4070908800.0, T0 + 500, fr[100].seq)
    for i in range(0, len(fr), 20):
        p.process(fr[i:i + 20])
    family = next(m for m in ProcessorCollector(p, None).collect()  # type: ignore[arg-type]
                  if m.name == "fleetwatch_processor_clock_steps")
    kinds = {s.labels["kind"]: s.value for s in family.samples}
    assert kinds.get("error") == 1 and kinds.get("back") == 1
    assert kinds.get("overlap", 0) == 0  # the new run is stamped before any time sent
    assert energy(store) == pytest.approx(2 * W * 5 * 499, abs=4 * 2 * W * 5 + 1)
