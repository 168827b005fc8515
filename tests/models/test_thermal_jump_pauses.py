"""gpu_warming_at_steady_power through a training job's checkpoint pauses.

An 8-GPU node runs one job at full power that pauses at low power for 12-20 s about every
ten minutes (a checkpoint). When the pause falls between two samples, the sampled powers
never show it: the heat sink cools unseen and warms back at steady sampled power, 3-6 °C
in 15-30 s on all eight GPUs at once. That is the job's power, not a failed cooler: the
GPU's energy counter shows it (its mean power over the interval well below the samples),
and so do its node peers (all climb alike in the same sample). A cooler that stops on
one GPU during such a job is still caught on its first faulty sample.

Physics: the simulator's parts (collectors/sim/hardware.py): the die r_th x r_die_share x P
above the sink at once, the sink approaching air + the rest with tau 23 s, integrated
every 0.1 s; readings in whole degrees, as NVML's; the energy counter the exact integral.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetwatch.models.thermal import ThermalLimits
from tests.models.helpers import busy, node

LIM = {"gpu_slowdown_temp_c": 89.0, "gpu_shutdown_temp_c": 92.0}
RULE = "gpu_warming_at_steady_power"
# (r_th, run W, pause W) of the simulator's A100 and H100
PARTS = {"a100": (0.10, 400.0, 95.0), "h100": (0.0535, 700.0, 130.0)}


def job_node(part: str, every_s: float, pause_s: float, hours: float = 2.0,
             gpus: int = 8, counter: bool = True, failed: int | None = None,
             fail_at_s: float = 0.0, r_extra: float = 0.10, pause_every_s: float = 613.0,
             ) -> list:
    """Frames of one node running one job that pauses for ``pause_s`` every
    ``pause_every_s`` (its phase drifting against the samples); GPU ``failed``'s cooler
    adds ``r_extra`` °C/W to its sink's path from ``fail_at_s``."""
    r_th, run_w, pause_w = PARTS[part]
    share, tau, air, dt = 0.47, 23.0, 24.0, 0.1
    rng = np.random.default_rng(1)
    offs = rng.uniform(-0.3, 0.3, gpus)
    phase = np.arange(gpus, dtype=float)
    r_sink = np.full(gpus, r_th * (1 - share))
    sink = air + offs + run_w * r_sink
    energy = rng.uniform(1e8, 5e9, gpus)
    frames, k_every = [], int(round(every_s / dt))
    for k in range(int(hours * 3600 / dt)):
        t = k * dt
        since = (t - 300.0) % pause_every_s if t >= 300.0 else 1e9
        p = (pause_w if since < pause_s else run_w) + 3.0 * np.sin(t / 7.0 + phase)
        r = r_sink.copy()
        if failed is not None and t >= fail_at_s:
            r[failed] += r_extra
        level = air + offs + p * r
        sink = level + (sink - level) * np.exp(-dt / (tau * r / r_sink))
        energy += p * dt
        if k % k_every == 0:
            die = np.round(sink + p * r_th * share)
            frames.append(node(1_764_300_000.0 + t, [
                busy(float(die[g]), power=round(float(p[g]), 1), **LIM,
                     **({"gpu_energy_j": round(float(energy[g]), 3)} if counter else {}))
                for g in range(gpus)]))
    return frames


def pages(frames: list) -> list:
    d = ThermalLimits()
    return [f for fr in frames for f in d.update([fr]) if f.rule == RULE]


@pytest.mark.parametrize("counter", [True, False], ids=["counter", "no-counter"])
@pytest.mark.parametrize("part,every,pause", [
    ("a100", 30.0, 20.0), ("a100", 15.0, 12.0), ("a100", 15.0, 20.0),
    ("h100", 30.0, 20.0), ("h100", 15.0, 12.0)])
def test_checkpoint_pauses_between_samples_do_not_page_a_healthy_node(
        part: str, every: float, pause: float, counter: bool) -> None:
    """Two hours, a pause every ~10 minutes, some falling between two samples: the sink
    cools and warms back unseen by the sampled powers, on all 8 GPUs alike. No page: the
    energy counter's mean power shows the pause, and where no counter is read the node's
    peers climb alike in the same sample."""
    assert pages(job_node(part, every, pause, counter=counter)) == []


@pytest.mark.parametrize("part", ["a100", "h100"])
@pytest.mark.parametrize("every", [15.0, 30.0])
def test_a_lone_gpu_with_an_energy_counter_is_explained_by_its_mean_power(
        part: str, every: float) -> None:
    """A GPU without peers (a one-GPU node): its counter alone explains the pause."""
    assert pages(job_node(part, every, 20.0 if every == 30.0 else 12.0, gpus=1)) == []


def test_without_a_counter_or_peers_the_unseen_pause_still_reads_as_a_climb() -> None:
    """What the fix rests on: a lone GPU read without an energy counter cannot tell the
    unseen pause from a failing cooler (the climb is there in the samples)."""
    assert pages(job_node("a100", 30.0, 20.0, gpus=1, counter=False)) != []


@pytest.mark.parametrize("counter", [True, False], ids=["counter", "no-counter"])
@pytest.mark.parametrize("part,every,pause", [
    ("a100", 15.0, 12.0), ("a100", 30.0, 20.0), ("h100", 15.0, 12.0), ("h100", 30.0, 20.0)])
def test_one_failed_cooler_among_eight_is_caught_through_the_pauses(
        part: str, every: float, pause: float, counter: bool) -> None:
    """GPU 3's cooler stops under load 40 minutes in (between pauses): it pages on its
    first faulty sample (or the next), and no other GPU does."""
    fail_at = 2400.0 + 7.0
    found = pages(job_node(part, every, pause, hours=1.0, counter=counter, failed=3,
                           fail_at_s=fail_at))
    assert found, "the failed cooler was not caught"
    assert {f.gpu for f in found} == {3}
    first_sample = math.ceil(fail_at / every) * every
    assert found[0].ts - 1_764_300_000.0 <= first_sample + every
