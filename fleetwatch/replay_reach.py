"""What each rule needs of the data to judge a GPU sample, and whether one frame has it.

``REACH`` says, rule by rule, what a rule compares with besides its metrics (peers, a
job, a rack, XIDs, UUIDs); ``judge_frame`` applies it to one frame. ``replay_coverage``
sums these verdicts over a replay into each rule's share of GPU samples judged.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.frame import Frame, is_board_uuid

POWER = "gpu_power_w"

# Rules that judge any frame of their subject, and need nothing more: a node that sends
# no frame for a while is silent in a recording too.
ANY_FRAME = frozenset({"node_silent", "rack_silent"})


@dataclass(frozen=True)
class Reach:
    """What a rule needs of the data besides the metrics ``Detector.rules`` names.

    Those say on which frames the alert lifecycle may resolve an alert, and are
    empty for event rules ("any frame will do"): an ECC rule with no ECC counter
    in the data, or a peer rule with one GPU a node, judged nothing, and the
    summary said 100%. What the detectors compare with is read from their code
    (models/peers.py, jobs.py, rack.py, gpu_errors.py, xid_events.py) and kept here, beside its
    reader (``judge_frame``); a test checks that every rule of the registry is placed.
    """

    any_of: tuple[str, ...] = ()  # an event rule: one of these counters on the GPU
    peers: int | str = 0          # other GPUs of the node with the rule's metrics (a number,
    #                               or the name of the DetectorsConfig setting that says it)
    same_job: bool = False        # ... of the GPU's job (no job: with the others of none)
    job: bool = False             # compares the GPUs of one job: the GPU must be in one
    rack: bool = False            # rack_cooling: many GPUs on two or more nodes of a rack
    xid: bool = False             # reads XID events: the data must carry them
    never: str = ""               # what no recording carries
    uuid: bool = False            # compares GPU UUIDs: the data must name them
    near_w: str = ""              # with too few of its job: also the node's GPUs of other
    #                               jobs within this setting's watts of its power (heat_peers)


_THERMAL_PEERS = Reach(peers="min_peers", same_job=True, near_w="peer_power_tol_w")
_JOB_PEERS = Reach(peers=1, same_job=True, job=True)
REACH: dict[str, Reach] = {
    "gpu_hot_vs_peers": _THERMAL_PEERS, "gpu_hot_vs_peers_critical": _THERMAL_PEERS,
    "gpu_temp_sensor_low": _THERMAL_PEERS,
    "gpu_stuck": _JOB_PEERS, "gpu_straggler": _JOB_PEERS, "gpu_power_low_vs_peers": _JOB_PEERS,
    "job_hung": _JOB_PEERS, "job_waiting": _JOB_PEERS,
    "gpu_power_limit_low": Reach(peers=1),
    "node_cooling": Reach(peers=1),   # two or more GPUs of the node, against their models
    "rack_cooling": Reach(rack=True),
    "gpu_xid_critical": Reach(xid=True), "gpu_xid_warning": Reach(xid=True),
    "gpu_xid_info": Reach(xid=True),
    "gpu_ecc_dbe": Reach(any_of=("gpu_ecc_dbe_volatile_total", "gpu_ecc_dbe_aggregate_total")),
    "gpu_retired_pages": Reach(any_of=("gpu_retired_pages_sbe", "gpu_retired_pages_dbe",
                                       "gpu_retired_pages_pending")),
    "gpu_retired_pages_limit": Reach(any_of=("gpu_retired_pages_dbe",)),
    "gpu_pcie_replay": Reach(any_of=("gpu_pcie_replay_total",)),
    "gpu_nvlink_errors": Reach(any_of=("gpu_nvlink_crc_errors_total",
                                       "gpu_nvlink_replay_errors_total",
                                       "gpu_nvlink_recovery_errors_total")),
    # A recording has no GPU state: a GPU is read as lost where its samples stop while
    # another GPU of its node goes on (fleetwatch.recorded_ticks.mark_lost).
    "gpu_lost": Reach(peers=1),
    # Two agents under one name show two sets of GPU UUIDs: only the agent's JSON frames
    # name them (fleetwatch.recorded_frames); other files have none.
    "node_name_conflict": Reach(uuid=True),
    # A board missing is told by its UUID, which only the agent's JSON frames name.
    "gpu_missing": Reach(uuid=True),
    # NVML away: only the agent's own frames say so (host_nvml_up), as only they name UUIDs.
    "node_nvml_down": Reach(uuid=True),
    # A clean stop: only the agent's own last frame says so (host_agent_stopped).
    "agent_stopped": Reach(uuid=True),
}


def judge_frame(f: Frame, wanted: tuple[str, ...], r: Reach, peers: int, xid_channel: bool,
           rack_ok: bool) -> tuple[int, dict[str, int], int]:
    """One rule on one frame: the GPUs it judged, why not the others (reason -> GPUs), and
    the most GPUs of one node that had its metrics, of those it lacked peers for."""
    host = f.host.metrics
    fed = [all(m in g.metrics or m in host for m in wanted)
           and (not r.any_of or any(m in g.metrics for m in r.any_of)) for g in f.gpus]
    group = [g.job if r.same_job else None for g in f.gpus]
    sizes: dict[str | None, int] = {}
    for k, ok in zip(group, fed):
        sizes[k] = sizes.get(k, 0) + ok
    on_node = sum(fed)  # the node's GPUs with the rule's metrics, whatever their job
    judged, fails, largest = 0, dict[str, int](), 0
    for g, ok, k in zip(f.gpus, fed, group):
        if not (g.metrics or g.xids or g.state != "ok"):
            continue  # no sample of this GPU in this tick: nothing to judge, nothing lacked
        why = _lack(r, ok, xid_channel, g.job is not None, sizes[k] - 1 >= peers, rack_ok)
        if why == "peers" and r.same_job and on_node - 1 >= peers:
            # the node has enough GPUs, in other jobs (or none): with near_w, they are its
            # peers at its power (judged frame by frame, ``near_peers``), else never
            why = "peers_power" if r.near_w else "peers_job"
        elif why == "peers":
            largest = max(largest, on_node)
        if not why and r.uuid and not is_board_uuid(g.uuid):
            why = "uuid"
        if why:
            fails[why] = fails.get(why, 0) + 1
        else:
            judged += 1
    return judged, fails, largest


def near_peers(f: Frame, wanted: tuple[str, ...], peers: int, near_w: float) -> int:
    """Of a frame's GPUs with too few peers of their job, how many have enough with the
    node's GPUs of other jobs within ``near_w`` of their power (``heat_peers``, on the power
    read now: the rule's lagged power and settling are not in one frame)."""
    host = f.host.metrics
    fed = [g for g in f.gpus if all(m in g.metrics or m in host for m in wanted)]
    n = 0
    for g in fed:
        mine = sum(1 for o in fed if o is not g and o.job == g.job)
        if mine >= peers:
            continue
        p = g.metrics.get(POWER)
        if p is None:
            continue
        near = sum(1 for o in fed if o.job != g.job and o.model == g.model
                   and (q := o.metrics.get(POWER)) is not None and abs(q - p) <= near_w)
        n += mine + near >= peers
    return n


def _lack(r: Reach, fed: bool, xid_channel: bool, in_job: bool, enough_peers: bool,
          rack_ok: bool) -> str:
    """The first thing a rule lacked to judge one GPU sample, or "" where it judged it."""
    if r.never:
        return "never"
    if not fed:
        return "metrics"
    if r.xid and not xid_channel:
        return "xid"
    if r.job and not in_job:
        return "job"
    if not enough_peers:
        return "peers"
    if r.rack and not rack_ok:
        return "rack"
    return ""
