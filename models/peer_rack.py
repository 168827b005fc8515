"""Peers beyond the node, for a GPU whose node has too few at its power.

A small inference node (four GPUs, two busy pods, each its own job) leaves a busy GPU
one peer at its power, or none: the node alone cannot say it runs hot. The GPUs of the
same part in its rack, at about its power (``near_w`` of its lagged power, the tolerance
the node's own GPUs of other jobs get), then stand in: at the same power their heat sinks
sit the same height above their air. Where the rack has too few too, those of its
cluster (the fleet) do, but only where every node involved reports its inlet air.

Nodes do not breathe the same air: one higher in a rack takes air a degree or two warmer
than one at the bottom, and racks' air differs by degrees and drifts apart over the day
(a CRAC's set point, a hot aisle). So where both nodes report their BMC inlet
(``host_inlet_temp_c``), each reading is taken relative to its own node's inlet air and
a peer is put back at this node's; a node's lasting place in its rack (what its inlet
sensor does not see: a neighbour's exhaust) is part of the offset the GPU learns against
these peers, like a node GPU's place in its chassis. Without inlet readings only the rack
is used: its nodes share their air's swings, and the lasting part is learned; across
racks, swings that nothing learned can follow would be called heat.

Nothing is kept between batches: the peers are the GPUs of the wave being judged (one
frame of each node; of those, the frames under ``batch.SAME_TIME_S`` from the GPU's own:
a backlog read unevenly puts other nodes' warm-up minutes in a wave beside its steady
state), grouped by (cluster, rack, part), and the work is only for the GPUs that need
it, group by group (a rack holds a few dozen GPUs), so memory stays bounded by the wave
whatever the fleet's size.
"""

from __future__ import annotations

import numpy as np

from fleetwatch.models.batch import NAN, SAME_TIME_S, Batch, parts

# Where a GPU's peers came from (``wide_peers``' scope), for its alert's words.
SCOPES = ("", " in its rack", " of its cluster")


def wide_peers(b: Batch, rows: np.ndarray, need: np.ndarray, ok: np.ndarray,
               adj: np.ndarray, plag: np.ndarray, moving: np.ndarray, near_w: float,
               c_per_w: float, min_peers: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each GPU in ``need`` (F, G): the median, MAD and count of its rack's (else its
    cluster's) peers' ``adj`` (temperature less their own learned offset) taken to its own
    power at ``c_per_w`` and its own node's inlet air, and the median of their ``moving``
    (how far each is from its lagged temperature), and where they came from (``SCOPES``).
    ``ok``: GPUs that may be peers (fresh, metered, settled). NaN / 0 where it has fewer
    than ``min_peers``."""
    shape = need.shape
    median, mad = np.full(shape, NAN), np.full(shape, NAN)
    count, motion = np.zeros(shape, np.intp), np.zeros(shape)
    frames = [b.frames[r] for r in rows]
    when = b.ts[rows]
    inlet = np.array([_inlet(f.host.metrics.get("host_inlet_temp_c")) for f in frames])
    has = np.isfinite(inlet)
    air = np.where(has, inlet, 0.0)[:, None]
    part = parts(b.model[rows])
    rack_key = [(f.cluster, f.rack) for f in frames]
    cluster_key = [(f.cluster, "") for f in frames]
    scope = np.zeros(shape, np.intp)
    left = need.copy()
    for level, (keys, with_air_only) in enumerate(((rack_key, False), (cluster_key, True)),
                                                  start=1):
        if not left.any():
            break
        _group_pass(keys, with_air_only, left, ok, has, air, part, adj, plag, moving,
                    when, near_w, c_per_w, min_peers, median, mad, count, motion)
        scope[left & (count >= min_peers)] = level
        left &= count < min_peers
    return median, mad, count, motion, scope


def _group_pass(keys: list[tuple[str, str]], with_air_only: bool, left: np.ndarray,
                ok: np.ndarray, has: np.ndarray, air: np.ndarray, part: np.ndarray,
                adj: np.ndarray, plag: np.ndarray, moving: np.ndarray, when: np.ndarray,
                near_w: float, c_per_w: float, min_peers: int, median: np.ndarray,
                mad: np.ndarray, count: np.ndarray, motion: np.ndarray) -> None:
    """One pass of ``wide_peers`` over groups of frames with the same key: fills the
    outputs where a GPU of ``left`` finds ``min_peers`` or more, of frames under
    ``SAME_TIME_S`` from its own (``when``: each frame's time)."""
    groups: dict[tuple[str, str, bool], list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault((*k, bool(has[i])), []).append(i)
    for (_, _, aired), members in groups.items():
        if with_air_only and not aired:
            continue
        fi = np.asarray(members)
        want = left[fi]
        if not want.any():
            continue
        # The group's candidates, flat: GPUs that may be peers.
        cf, cg = np.nonzero(ok[fi])
        if len(cf) < min_peers:
            continue
        cand_part = part[fi][cf, cg]
        value = (adj[fi] - air[fi])[cf, cg]
        cand_p = plag[fi][cf, cg]
        cand_move = moving[fi][cf, cg]
        wf, wg = np.nonzero(want)
        own_p = plag[fi][wf, wg]
        stamps = when[fi]
        mask = (cand_part[None, :] == part[fi][wf, wg][:, None]) \
            & (np.abs(cand_p[None, :] - own_p[:, None]) <= near_w) \
            & ~((cf[None, :] == wf[:, None]) & (cg[None, :] == wg[:, None]))
        if np.ptp(stamps) >= SAME_TIME_S:  # live, a wave spans a poll: a second or so
            mask &= np.abs(stamps[cf][None, :] - stamps[wf][:, None]) < SAME_TIME_S
        n = mask.sum(axis=1)
        if not (n >= min_peers).any():
            continue
        # Only the GPUs with enough peers: a row without any would be an all-NaN slice
        # (numpy warns of each, through warnings, into the processor's log).
        got = n >= min_peers
        mask, own_p = mask[got], own_p[got]
        expected = value[None, :] + c_per_w * (own_p[:, None] - cand_p[None, :])
        block = np.where(mask, expected, np.nan)
        with np.errstate(all="ignore"):
            med = np.nanmedian(block, axis=1)
            dev = np.nanmedian(np.abs(block - med[:, None]), axis=1)
            mov = np.nanmedian(np.where(mask, cand_move[None, :], np.nan), axis=1)
        at = (fi[wf[got]], wg[got])
        median[at] = med + air[fi[wf[got]], 0]
        mad[at] = dev
        count[at] = n[got]
        motion[at] = np.nan_to_num(mov)


def _inlet(v: float | None) -> float:
    """A node's inlet reading in °C, NaN where it has none or an impossible one."""
    if v is None or not -40.0 <= v <= 100.0:  # NaN fails both
        return NAN
    return float(v)
