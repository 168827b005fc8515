"""Statistics of each GPU's peers in its frame: (F, G, G) masks over a batch's (F, G) values.

A node has at most a few dozen GPUs, so each GPU's peers are a row of a small
(G, G) mask per frame, and a median over them is a sort of that masked block:
far cheaper than ``nanmedian`` on many small groups.
"""

from __future__ import annotations

import numpy as np

from fleetwatch.models.batch import NAN, Batch, parts


def peer_count(peers: np.ndarray) -> np.ndarray:
    """How many peers each GPU has: ``peers`` (F, G, G) summed over the last axis.

    Summed as bytes by a matrix product: about half the time of ``peers.sum(axis=2)``,
    which the processor pays several times a batch (a node has at most 64 GPUs: no byte
    overflows).
    """
    g = peers.shape[-1]
    return (peers.view(np.uint8) @ np.ones(g, np.uint8)).astype(np.intp)


def peer_median(values: np.ndarray, peers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and count of ``values`` (F, G) over each GPU's ``peers`` (F, G, G) mask.

    Sorting the masked (F, G, G) block once is far cheaper than nanmedian on
    small groups, and a node has at most a few dozen GPUs.
    """
    g = values.shape[1]
    count = peer_count(peers)
    return (peer_median_block(np.broadcast_to(values[:, None, :], (len(values), g, g)), peers,
                              count), count)


def peer_median_block(block_values: np.ndarray, peers: np.ndarray,
                      count: np.ndarray | None = None) -> np.ndarray:
    """Median over the last axis of (F, G, G) values where ``peers`` holds; NaN for none.
    ``count``: ``peer_count(peers)``, where the caller has it."""
    block = np.where(peers, block_values, np.inf)
    block.sort(axis=2)
    if count is None:
        count = peer_count(peers)
    g = block.shape[2]
    if g == 0:  # frames without a GPU (host-only agents): no one has peers
        return np.full(count.shape, NAN)
    # The middle one or two of each sorted row, gathered from the flat block (cheaper
    # than take_along_axis on small blocks).
    flat = block.reshape(-1)
    row = np.arange(0, flat.size, g)
    c = count.reshape(-1)
    lo = flat[row + np.maximum((c - 1) // 2, 0)]
    hi = flat[row + np.maximum(c // 2, 0)]
    with np.errstate(invalid="ignore"):
        return np.where(c > 0, (lo + hi) * 0.5, NAN).reshape(count.shape)


def node_peers(batch: Batch, rows: np.ndarray, ok: np.ndarray,
               same_model: bool = False) -> np.ndarray:
    """(F, G, G): GPU j is a peer of GPU i (same frame, both ``ok``, not itself), whatever
    their jobs.

    ``same_model``: and the same model too. Readings in watts, MHz or degrees differ by
    part whatever the load (an A100 tops out at 1410 MHz and 400-500 W, an H100 at 1980
    MHz and 700 W), so a node that mixes parts compares those only within a part; shares
    (SM activity, utilization) compare across parts."""
    g = ok.shape[1]
    mask = ok[:, None, :] & ok[:, :, None]
    if same_model:  # the same part: memory size aside (batch.part_of)
        part = parts(batch.model[rows])
        mask &= part[:, :, None] == part[:, None, :]
    mask &= ~np.eye(g, dtype=bool)[None]
    return mask


def same_job_peers(batch: Batch, rows: np.ndarray, ok: np.ndarray,
                   same_model: bool = False) -> np.ndarray:
    """(F, G, G): ``node_peers`` of the same job (or both none): GPUs that share the work
    of one job (work done, clocks, power) are compared only within it."""
    job = batch.job[rows]
    return node_peers(batch, rows, ok, same_model) & (job[:, :, None] == job[:, None, :])


def heat_peers(batch: Batch, rows: np.ndarray, ok: np.ndarray, metered: np.ndarray,
               plag: np.ndarray, min_peers: int, near_w: float,
               settled: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(F, G, G): the GPUs whose heat GPU i is compared with, before the thermal rules pick
    those drawing more (too hot) or less (reads low) lagged power ``plag`` (F, G, W).

    The node's GPUs of the same part share its air or coolant whatever job they run. Those
    of its own job (or, without a job, the others without one) come first: in data-parallel
    training they move through the same phases at the same minute, so even the seconds in
    which their heat sinks catch up with a change of power are alike. Where it has fewer
    than ``min_peers`` of those (an inference node, where each pod is its own job; a small
    job beside others), the node's GPUs of other jobs within ``near_w`` of its lagged power
    are its peers too: at the same power their heat sinks sit at the same temperature, while
    one idling at 60 W beside busy ones at 600 W says nothing of theirs, nor they of its.
    Across jobs both must be ``metered`` (F, G: without power, nothing says two jobs load
    their GPUs alike) and ``settled`` (F, G; all where None): another job's power changes
    at its own minute, and while a sink catches up the lagged power is only a model of it.
    A GPU whose power is metered is never compared with one whose power is not.

    Returns the mask and, where any GPU has peers of other jobs, the (F, G, G) mask of
    those (None where none has: a training fleet pays for no more)."""
    node = node_peers(batch, rows, ok, same_model=True) \
        & (metered[:, :, None] == metered[:, None, :])
    job = batch.job[rows]
    peers = node & (job[:, :, None] == job[:, None, :])
    across = metered if settled is None else metered & settled
    few = (peer_count(peers) < min_peers) & across
    if not few.any():
        return peers, None
    near = np.abs(plag[:, None, :] - plag[:, :, None]) <= near_w
    other = few[:, :, None] & across[:, None, :] & node & near & ~peers
    return peers | other, other
