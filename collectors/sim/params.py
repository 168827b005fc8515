"""What a simulated fleet is (``FleetSim``, fleet.py): its size and racks, its part, its
jobs' pace and load, its room's air, and the seeds that make it deterministic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimParams:
    nodes: int = 4
    gpus: int = 8
    nodes_per_rack: int = 2
    seed: int = 0
    interval_s: float = 15.0
    cluster: str = "sim"
    job_mean_s: float = 3 * 3600.0   # mean job length
    idle_mean_s: float = 20 * 60.0   # mean idle gap between jobs on a node
    busy_at_start: float = 0.75      # share of nodes already in a job at t=0
    hot_share: float = 0.03          # healthy GPUs that run several °C hot all their life
    # Every node busy at the start and every job compute-bound from start to end (no
    # phases, no interactive jobs): a fleet flat out, for demos and plumbing tests.
    steady_load: bool = False
    # None: one random stream for everything (as before). A number: the GPUs' physical
    # spread still comes from ``seed``, but jobs, air and noise from this stream, so
    # that the same fleet can be run through another history (a model's training week).
    jobs_seed: int | None = None
    part: str = "a100"               # hardware.PARTS: a100, h100
    # The room: the racks' mean inlet air (°C; each rack swings 1.5 °C a day around it and
    # has its own offset), and a warm spell: ``warm_spell_c`` more, every rack alike,
    # reached linearly over ``warm_spell_h`` hours from the start (0: at once).
    inlet_c: float = 22.0
    warm_spell_c: float = 0.0
    warm_spell_h: float = 0.0
    # The id of the run's first job; the next are numbered on from it, as a scheduler's
    # are. A continued timeline (``up --keep``) starts after the ids its store holds, so
    # that no two runs' jobs share one id (and one job history).
    first_job_id: int = 4_000_001
