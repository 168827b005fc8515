"""Where a simulated ``fleetwatch up`` picks up the timeline a kept store holds
(``--keep``): the store's newest sample, and the fleet run on, unseen, to that moment
with the faults the store holds that are still on, so that the seam shows neither a gap
of samples written twice nor a cold start; a fault whose stored window has ended is not
replayed. Read-only on the store; ``up`` decides.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from pathlib import Path

from fleetwatch.collectors.sim import Fault, FleetSim, SimParams
from fleetwatch.pipeline.store.base import Annotation
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.simulate import continued_faults, last_job_id

# The metric every simulated GPU reports: its newest sample is where a kept store ends.
_NEWEST_METRIC = "gpu_temp_c"
# A continued simulation runs this long unseen before the store's newest sample: over ten
# of a GPU heat sink's time constants (hardware.tau_sink_s, 23 s), so that temperatures
# are where the fleet's load and faults hold them, not those of a cold start.
PREROLL_S = 300.0
# How the simulator names its nodes and racks (``collectors.sim.faults.node_name`` and
# ``rack_name``): a sample of the simulated cluster's name from any other node is a real
# writer's (an agent of a live cluster of that name), never an earlier ``up``'s.
_SIM_NODE = re.compile(r"node-\d{3,}")
_SIM_RACK = re.compile(r"rack-\d{2,}")


def newest_sample_s(path: str, cluster: str | None = None) -> float | None:
    """The newest GPU sample in the SQLite store at ``path``, of ``cluster`` alone where
    given (None: the store is new, or an empty file, which the store turns into a new one,
    or holds no sample of ``cluster``). A store other clusters share goes on from the
    simulated cluster's own newest sample: another cluster's newer one left a hole."""
    if not Path(path).exists() or Path(path).stat().st_size == 0:
        return None
    store = SqliteStore(path, read_only=True)
    try:
        newest = max((ts for key, ts, _ in store.latest(_NEWEST_METRIC, 0)
                      if cluster is None or key.cluster == cluster), default=None)
    finally:
        store.close()
    return None if newest is None else newest / 1000


def live_clusters(path: str, sim_cluster: str, since_s: float) -> dict[str, float]:
    """Clusters with a sample in the SQLite store at ``path`` after ``since_s`` that no
    simulation wrote, with their newest sample's time: other clusters, and
    ``sim_cluster`` itself where a node the simulator does not name (``_SIM_NODE`` in a
    ``_SIM_RACK``) sent it (named ``CLUSTER (node N)``). A store that processors of a real
    fleet write now (or another ``up``'s cluster), never one to write a simulation into."""
    if not Path(path).exists() or Path(path).stat().st_size == 0:
        return {}
    store = SqliteStore(path, read_only=True)
    try:
        out: dict[str, float] = {}
        for metric in ("host_cpu_util_pct", _NEWEST_METRIC):
            for key, ts_ms, _ in store.latest(metric, int(since_s * 1000)):
                name = key.cluster
                if name == sim_cluster:
                    if _SIM_NODE.fullmatch(key.node) and _SIM_RACK.fullmatch(key.rack):
                        continue
                    name = f"{name} (node {key.node})"
                out[name] = max(out.get(name, 0.0), ts_ms / 1000)
        return out
    finally:
        store.close()


def continued_sim(params: SimParams, start: float, faults: Sequence[Fault], kept: str | None
                  ) -> tuple[FleetSim, list[str], list[tuple[Fault, Annotation]]]:
    """The simulated fleet from ``start``, a note per fault it injects for the banner, and
    the faults it does not inject again, each with the stored window that ended.

    ``kept``: the store a ``--keep`` run continues. A fault it holds that has not ended
    goes on in its stored window, one whose stored window has ended is not replayed
    (``simulate.continued_faults``), and the fleet is run ``PREROLL_S`` before ``start``
    unseen, so that temperatures and jobs carry on at the seam instead of starting cold.
    """
    stored = _stored_faults(kept, params.cluster) if kept is not None else None
    if stored is None or kept is None:  # a new timeline: as it always was
        return FleetSim(params, start, faults), ["" for _ in faults], []
    params = dataclasses.replace(params, first_job_id=max(
        params.first_job_id, last_job_id(kept, params.cluster) + 1))
    fixed, continued, ended = continued_faults(faults, stored, start)
    steps = max(1, math.ceil(PREROLL_S / params.interval_s))
    sim = FleetSim(params, start - steps * params.interval_s, fixed)
    for _ in range(steps):
        sim.step()
    return sim, [" (continued from the store)" if c else
                 " (a new one: the store holds none of it that is still on)"
                 for c in continued], ended


def _stored_faults(path: str, cluster: str) -> list[Annotation] | None:
    """The fault annotations of ``cluster`` (or of none: older stores) in the store at
    ``path``, ended or not (an ended one is not replayed); None for a store that holds no
    sample yet (nothing to continue)."""
    if newest_sample_s(path) is None:
        return None
    store = SqliteStore(path, read_only=True)
    try:
        return [a for a in store.annotations(0.0, 1e11)
                if a.kind == "fault" and a.cluster in ("", cluster)]
    finally:
        store.close()
