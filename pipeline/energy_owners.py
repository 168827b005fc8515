"""Who an interval of energy belongs to: the ledger's owners and their shares.

A GPU shared by several jobs (MPS, time slicing: the agent joins them with
commas, sorted, users paired with their jobs) is split equally among its jobs;
a node's CPU packages and static energy among the owners of its GPUs, by their
GPUs' energy in the interval. Pure: owners in, shares out.
"""

from __future__ import annotations

Owner = tuple[str, str, str]                 # job, user, team
Owners = tuple[tuple[Owner, float], ...]     # owners and their shares, summing to 1
NO_OWNER: Owner = ("", "", "")


def split_owner(owner: Owner) -> Owners:
    """A shared GPU's owners: its comma-separated jobs, an equal part each; each part to the
    user (team) at the job's position when there are as many as jobs, else equally to each
    one named. More names than jobs (not a frame of fleetwatch's agent, which the codec
    refuses) are no owners of this GPU: its energy goes to no user (team), never to
    names made up by splitting one at its commas."""
    job, user, team = owner
    jobs = job.split(",")
    users, teams = user.split(","), team.split(",")
    users = [""] if len(users) > len(jobs) else users
    teams = [""] if len(teams) > len(jobs) else teams
    out: dict[Owner, float] = {}
    for i, j in enumerate(jobs):
        us = [users[i]] if len(users) == len(jobs) else users
        ts = [teams[i]] if len(teams) == len(jobs) else teams
        share = 1.0 / (len(jobs) * len(us) * len(ts))
        for u in us:
            for t in ts:
                out[(j, u, t)] = out.get((j, u, t), 0.0) + share
    return tuple(out.items())


def split_node(weights: dict[Owner, float]) -> Owners:
    """The node's CPU and rest, split by the GPU energy of each owner in the interval
    (equally among them where no GPU has a measured interval); no GPU: no owner."""
    if len(weights) == 1:
        return ((next(iter(weights)), 1.0),)
    if not weights:
        return ((NO_OWNER, 1.0),)
    total = sum(weights.values())
    if not total > 0:
        return tuple((o, 1.0 / len(weights)) for o in weights)
    return tuple((o, w / total) for o, w in weights.items() if w > 0)


def across_gap(before: Owners | None, after: Owners) -> Owners:
    """The owners of an interval longer than ``max_gap_s`` (missing time): of ``after`` (the
    sample ending it), those whose job also held the device at its start; the rest of the
    interval, and all of it where the start's owners are not known (a processor that took
    the node over during the silence), to no owner. A job that started after the silence,
    or ended during it, did not hold the device for all of it: it is not charged."""
    held = {o[0] for o, _ in before or () if o[0]}
    kept = tuple((o, share) for o, share in after if o[0] in held)
    rest = 1.0 - sum(share for _, share in kept)
    if rest > 1e-9:
        kept += ((NO_OWNER, rest),)
    return kept
