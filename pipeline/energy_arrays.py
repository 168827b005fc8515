"""The integrator's rules over arrays: a block of synchronous samples in, ledger rows out.

For bulk work (a month of history imported at once, the report benchmark),
where feeding frames one by one through ``EnergyIntegrator`` would take
minutes. The rules are the processor's, one for one (``tests/energy`` checks
that both give the same rows): the energy counter's step where it is
plausible, else the trapezoid of power, else the end sample's power; an
interval longer than ``max_gap_s`` or without power is missing time; the
interval belongs to its end sample's owner, idle flag and power; intervals
that cross an hour are split in proportion to time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fleetwatch.pipeline.energy import EnergySettings
from fleetwatch.pipeline.store.ledger import BUCKET_S, EnergyRow

Device = tuple[str, str, str, str]   # cluster, rack, node, device
Owner = tuple[str, str, str]         # job, user, team


def integrate_arrays(ts: np.ndarray, power: np.ndarray, counter: np.ndarray | None,
                     idle: np.ndarray, owner: np.ndarray, devices: Sequence[Device],
                     owners: Sequence[Owner], settings: EnergySettings = EnergySettings()
                     ) -> list[EnergyRow]:
    """Rows for the intervals between consecutive samples of a block.

    ``ts``: (T,) sample times, increasing; ``power``, ``counter``: (T, G) with NaN
    where a GPU did not report (``counter`` None: no GPU has one); ``idle``: (T, G)
    bool; ``owner``: (T, G) int index into ``owners``. Rows are per (hour, device,
    owner) and are the block's own totals: blocks that share an hour add up.
    """
    s = settings
    t0, t1 = ts[:-1], ts[1:]
    dt = (t1 - t0)[:, None]
    p0, p1 = power[:-1], power[1:]
    energy = np.where(np.isnan(p0), p1 * dt, 0.5 * (p0 + p1) * dt)
    if counter is not None:
        step = counter[1:] - counter[:-1]
        good = (step >= 0) & (step <= dt * s.max_plausible_w)  # NaN compares False
        energy = np.where(good, step, energy)
    measured = ~np.isnan(energy) & (dt <= s.max_gap_s)
    energy = np.where(measured, energy, 0.0)
    span = np.broadcast_to(dt, energy.shape)
    is_idle = idle[1:] & measured
    over = (p1 > s.tdp_w) & measured
    cols = np.stack([energy, np.where(is_idle, energy, 0.0), np.where(measured, span, 0.0),
                     np.where(is_idle, span, 0.0), np.where(measured, 0.0, span),
                     np.where(over, span, 0.0)], axis=-1)          # (T-1, G, 6)
    # Split each interval between the hour of its start and the next (intervals longer
    # than an hour are missing time and are split over every hour they cover below).
    b0 = (t0 // BUCKET_S).astype(np.int64)
    b1 = ((t1 - 1e-9) // BUCKET_S).astype(np.int64)
    first_share = np.where(b1 > b0, ((b0 + 1) * BUCKET_S - t0) / (t1 - t0), 1.0)
    n_g = power.shape[1]
    sums: dict[tuple[int, int, int], np.ndarray] = {}
    own = owner[1:]

    def add(bucket: np.ndarray, share: np.ndarray, rows: np.ndarray) -> None:
        """Sum ``cols[rows] * share`` into (bucket, gpu, owner) keys."""
        if not len(rows):
            return
        g = np.broadcast_to(np.arange(n_g), (len(rows), n_g))
        keys = (np.broadcast_to(bucket[rows, None], g.shape).astype(np.int64) * n_g + g) \
            * len(owners) + own[rows]
        flat = keys.ravel()
        values = (cols[rows] * share[rows, None, None]).reshape(-1, 6)
        uniq, inverse = np.unique(flat, return_inverse=True)
        acc = np.zeros((len(uniq), 6))
        np.add.at(acc, inverse, values)
        for k, v in zip(uniq.tolist(), acc):
            key = (k // len(owners) // n_g, k // len(owners) % n_g, k % len(owners))
            have = sums.get(key)
            sums[key] = v if have is None else have + v

    idx = np.arange(len(t0))
    add(b0, first_share, idx)
    crossing = np.flatnonzero(b1 > b0)
    for i in crossing.tolist():  # rare: an interval across an hour boundary (or a gap)
        for b in range(int(b0[i]) + 1, int(b1[i]) + 1):
            lo, hi = max(t0[i], b * BUCKET_S), min(t1[i], (b + 1) * BUCKET_S)
            share = np.zeros(len(t0))
            share[i] = (hi - lo) / (t1[i] - t0[i])
            add(np.full(len(t0), b), share, np.array([i]))
    return [EnergyRow(b * BUCKET_S, *devices[g], *owners[o], *map(float, v))
            for (b, g, o), v in sorted(sums.items())]
