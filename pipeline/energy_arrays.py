"""The integrator's rules over arrays: a block of synchronous samples in, ledger rows out.

For bulk work (a month of history imported at once, the report benchmark),
where feeding frames one by one through ``EnergyIntegrator`` would take
minutes. The rules are the processor's (``tests/energy`` checks that both give
the same rows): the energy counter's step where it is
plausible, else the trapezoid of power, else the end sample's power; an
interval longer than ``max_gap_s`` or without power is missing time; the
interval belongs to its end sample's owner, idle flag and power, but for one longer than
``max_gap_s``, which is no owner's unless the same job holds the GPU at both ends; intervals
that cross an hour are split in proportion to time. Five rules of the processor
are not here, for what a block does not hold: a counter that stands still while
the board draws power, a counter's energy across a silence (a block's gaps stay
missing time), a GPU the node stops listing, a GPU shared by several jobs, and a
node's CPU and static energy shared among its jobs (a block's owner per sample is
its caller's).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fleetwatch.pipeline.energy_owners import NO_OWNER
from fleetwatch.pipeline.energy_settings import TDP_MARGIN, EnergySettings
from fleetwatch.pipeline.store.ledger import BUCKET_S, EnergyRow

Device = tuple[str, str, str, str]   # cluster, rack, node, device
Owner = tuple[str, str, str]         # job, user, team


def integrate_arrays(ts: np.ndarray, power: np.ndarray, counter: np.ndarray | None,
                     idle: np.ndarray, owner: np.ndarray, devices: Sequence[Device],
                     owners: Sequence[Owner], settings: EnergySettings | None = None,
                     tdp: np.ndarray | None = None) -> list[EnergyRow]:
    """Rows for the intervals between consecutive samples of a block.

    ``ts``: (T,) sample times, increasing; ``power``, ``counter``: (T, G) with NaN
    where a GPU did not report (``counter`` None: no GPU has one); ``idle``: (T, G)
    bool; ``owner``: (T, G) int index into ``owners``; ``tdp``: (G,) each GPU's TDP in W
    (``EnergyIntegrator`` takes it from the part's name), else ``settings.tdp_w`` for all
    (0: time over TDP is not counted). Rows are per (hour, device,
    owner) and are the block's own totals: blocks that share an hour add up.
    """
    s = settings or EnergySettings()
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
    rated = np.asarray(tdp, dtype=float) if tdp is not None else np.full(power.shape[1], s.tdp_w)
    with np.errstate(invalid="ignore"):
        over = (rated > 0) & (p1 > rated * (1.0 + TDP_MARGIN)) & measured
    cols = (energy, np.where(is_idle, energy, 0.0), np.where(measured, span, 0.0),
            np.where(is_idle, span, 0.0), np.where(measured, 0.0, span),
            np.where(over, span, 0.0))                              # each (T-1, G)
    # The hours of each interval's start and end; ceil so that an interval ending
    # exactly on the hour stays in the hour it ends.
    b0 = (t0 // BUCKET_S).astype(np.int64)
    b1 = np.ceil(t1 / BUCKET_S).astype(np.int64) - 1
    owners = list(owners)
    own = _gap_owner(owner, owners, np.broadcast_to(dt > s.max_gap_s, energy.shape))
    n_g, n_o = power.shape[1], len(owners)
    sums: dict[tuple[int, int, int], np.ndarray] = {}

    def add(bucket: np.ndarray, share: np.ndarray, rows: np.ndarray) -> None:
        """Sum ``col[rows] * share`` into (bucket, gpu, owner) keys, one bincount a column."""
        keys = ((bucket[:, None] * n_g + np.arange(n_g)) * n_o + own[rows]).ravel()
        uniq, inverse = np.unique(keys, return_inverse=True)
        w = np.broadcast_to(share[:, None], (len(rows), n_g)).ravel()
        acc = np.stack([np.bincount(inverse, weights=c[rows].ravel() * w, minlength=len(uniq))
                        for c in cols], axis=-1)
        for k, v in zip(uniq.tolist(), acc):
            key = (k // n_o // n_g, k // n_o % n_g, k % n_o)
            have = sums.get(key)
            sums[key] = v if have is None else have + v

    inside = b1 == b0
    if inside.all():
        _add_runs(sums, b0, own, cols, n_g, n_o)
    elif inside.any():
        rows = np.flatnonzero(inside)
        add(b0[rows], np.ones(len(rows)), rows)
    for i in np.flatnonzero(b1 > b0).tolist():  # rare: across an hour boundary, or a gap
        for b in range(int(b0[i]), int(b1[i]) + 1):
            lo, hi = max(t0[i], b * BUCKET_S), min(t1[i], (b + 1) * BUCKET_S)
            add(np.array([b]), np.array([(hi - lo) / (t1[i] - t0[i])]), np.array([i]))
    return [EnergyRow(b * BUCKET_S, *devices[g], *owners[o], *map(float, v))
            for (b, g, o), v in sorted(sums.items())]


def _gap_owner(owner: np.ndarray, owners: list[Owner], gap: np.ndarray) -> np.ndarray:
    """Each interval's owner index: its end sample's, but across a gap (``gap``, (T-1, G))
    that of no owner unless the same job holds the GPU at both ends (a job that started
    after a silence is not charged for it). Appends no owner to ``owners`` if needed."""
    own = owner[1:].astype(np.int64)
    if not gap.any():  # the common block: no silence, no comparison of jobs
        return own
    jobs = np.array([o[0] for o in owners], dtype=object)
    kept = (jobs[own] == jobs[owner[:-1].astype(np.int64)]) & (jobs[own] != "")
    moved = gap & ~kept
    if not moved.any():
        return own
    if NO_OWNER not in owners:
        owners.append(NO_OWNER)
    return np.where(moved, owners.index(NO_OWNER), own)


def _add_runs(sums: dict[tuple[int, int, int], np.ndarray], bucket: np.ndarray,
              own: np.ndarray, cols: Sequence[np.ndarray], n_g: int, n_o: int) -> None:
    """The common case, no interval across an hour: per GPU, consecutive intervals of one
    (hour, owner) are runs; each run is one ``reduceat`` slice, no sort needed."""
    n_t = len(bucket)
    key = (bucket[:, None] * n_o + own).T.ravel()      # GPU-major: each GPU's time in a row
    change = np.empty(len(key), bool)
    change[0] = True
    np.not_equal(key[1:], key[:-1], out=change[1:])
    change[::n_t] = True                                  # a new GPU starts a new run
    starts = np.flatnonzero(change)
    acc = np.stack([np.add.reduceat(c.T.ravel(), starts) for c in cols], axis=-1)
    for start, k, v in zip(starts.tolist(), key[starts].tolist(), acc):
        entry = (k // n_o, start // n_t, k % n_o)
        have = sums.get(entry)
        sums[entry] = v if have is None else have + v
