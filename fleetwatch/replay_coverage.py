"""What a replay held, and what each rule could judge of it.

Real recordings carry only some metrics, often one GPU of a node, and no jobs,
GPU state or error counters. ``Coverage`` is fed the batches as they are
replayed and says, for each rule, on what share of the GPU samples it could
judge anything, and why not (``replay_reach.REACH``: what a rule compares with
besides its metrics); a rule the data cannot feed is reported "not judged", never
as silence that reads like health. The summary also says which thermal limits
were assumed, and whether the learned detectors ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, is_board_uuid
from fleetwatch.models import Detector
from fleetwatch.parts import thermal_limits_c
from fleetwatch.replay_reach import REACH, Reach, judge_frame, near_peers

__all__ = ["EXAMPLE_MODEL", "Coverage", "ReplaySummary", "coverage"]


@dataclass
class ReplaySummary:
    frames: int = 0
    gpus: int = 0
    start_ts: float = 0.0
    end_ts: float = 0.0
    transitions: int = 0
    firing: int = 0
    bad_rows: int = 0
    late_rows: int = 0    # rows passed over: behind what was already replayed
    bad_examples: list[str] = field(default_factory=list)
    metrics: dict[str, int] = field(default_factory=dict)   # metric -> GPU/host samples
    # rule -> share of GPU samples it could judge: every metric it needs, and what else it
    # compares with (peers, a job, a rack) or reads (XIDs, counters), in the data
    coverage: dict[str, float] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)  # rule -> metrics absent
    # rule -> why it judged no GPU sample, or not the others (where coverage < 1)
    unjudged: dict[str, str] = field(default_factory=dict)
    counted: set[str] = field(default_factory=set)  # rules whose detector counted coverage
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        span = self.end_ts - self.start_ts
        out = [f"replayed {self.frames:,} frames of {self.gpus:,} GPUs over {span / 3600:.2f} h: "
               f"{self.transitions} alert transitions, {self.firing} alerts fired"]
        if self.bad_rows:
            rows = "bad row" if self.bad_rows == 1 else "bad rows"
            out.append(f"skipped {self.bad_rows} {rows}, e.g. " + "; ".join(self.bad_examples))
        out.append("metrics in the data: " + (", ".join(
            f"{m} ({n:,})" for m, n in sorted(self.metrics.items())) or "none"))
        for rule, share in sorted(self.coverage.items()):
            why = self.unjudged.get(rule, "")
            own = " (its detector's count)" if rule in self.counted else ""
            if share <= 0:
                out.append(f"  {rule}: not judged: {why or 'no GPU sample'}")
            else:
                out.append(f"  {rule}: judged {_share(share)} of GPU samples{own}"
                           + (f"; not the others: {why}" if why and share < 1 else ""))
        out += self.notes
        return out


def _share(share: float) -> str:
    """A share as a percentage that never rounds a few samples to 0% or most to 100%."""
    if 0 < share < 0.001:
        return "under 0.1%"
    if share < 0.01 or 0.99 <= share < 1:
        return f"{min(share, 0.999):.1%}"
    return f"{share:.0%}"


def needs_of(detectors: Sequence[Detector]) -> dict[str, tuple[str, ...]]:
    return {rule: tuple(m) for d in detectors for rule, m in getattr(d, "rules", {}).items()}


TEMP, SLOW, SHUT = "gpu_temp_c", "gpu_slowdown_temp_c", "gpu_shutdown_temp_c"
EXAMPLE_MODEL = "NVIDIA H100 80GB HBM3"
RACK_STALE_S = 120.0  # models/rack.py STALE_S: a GPU counts for its rack this long
INLET = "host_inlet_temp_c"


class _Racks:
    """Which racks have enough of their GPUs, or of their nodes' inlet air, of late, for
    rack_cooling: ``rack_min_gpus`` GPUs on two or more nodes, or two or more inlets."""

    def __init__(self, min_gpus: int, metric: str) -> None:
        self.min_gpus, self.metric = min_gpus, metric
        self.gpus: dict[tuple[str, str], dict[tuple[str, int], float]] = {}
        self.inlets: dict[tuple[str, str], dict[str, float]] = {}
        self.swept = float("-inf")  # when racks with nothing fresh were last dropped

    def see(self, batch: Sequence[Frame]) -> set[tuple[str, str]]:
        """The racks of this batch that can be judged."""
        for f in batch:
            key = (f.cluster, f.rack)
            gpus = self.gpus.setdefault(key, {})
            for g in f.gpus:
                if self.metric in g.metrics:
                    gpus[(f.node, g.index)] = f.ts
            if INLET in f.host.metrics:
                self.inlets.setdefault(key, {})[f.node] = f.ts
        out = set()
        now = max(f.ts for f in batch)
        if now - self.swept > RACK_STALE_S:  # racks renamed or emptied: gone for good
            self.swept = now
            for held in (self.gpus, self.inlets):
                for key in [k for k, seen in held.items()
                            if all(now - ts > RACK_STALE_S for ts in seen.values())]:
                    del held[key]
        for key in {(f.cluster, f.rack) for f in batch}:
            # Only the fresh are kept: a rack's nodes come and go (re-imaged, renamed) and
            # what went stale here counts no more (a replay's time only moves on).
            gpus = self.gpus[key] = {k: ts for k, ts in self.gpus.get(key, {}).items()
                                     if now - ts <= RACK_STALE_S}
            fresh = [n for n, _ in gpus]
            inlet = self.inlets[key] = {n: ts for n, ts in self.inlets.get(key, {}).items()
                                        if now - ts <= RACK_STALE_S}
            inlets = list(inlet)
            if len(fresh) >= self.min_gpus and len(set(fresh)) >= 2 or len(inlets) >= 2:
                out.add(key)
        return out


# Most frame shapes remembered: a fleet of many node types and metric sets has a few
# hundred; more is a recording whose shapes keep changing, judged again as they come.
SHAPES_MAX = 4096


def shape_of(f: Frame, rack_ok: bool) -> tuple[object, ...]:
    """What ``judge_frame`` reads of a frame: each GPU's metrics, state, XIDs, board UUID
    or not, and its job only as which GPUs share one (each GPU's job as the first GPU of the
    frame in it; None without one). Not the job ids: a churning fleet has new ones every
    minute, and the judgement is the same for every job of the same partition."""
    first: dict[str, int] = {}
    return (tuple((None if g.job is None else first.setdefault(g.job, i),
                   frozenset(g.metrics), g.state, bool(g.xids), is_board_uuid(g.uuid))
                  for i, g in enumerate(f.gpus)), frozenset(f.host.metrics), rack_ok)


class Coverage:
    """What the data held, and for each rule the share of GPU samples it could judge:
    the GPU had the rule's metrics, and the rule had what it compares with (``REACH``).
    Fed batch by batch as they are replayed; whether the data carries XIDs is known only
    at the end, so the XID rules are counted both ways."""

    def __init__(self, detectors: Sequence[Detector]) -> None:
        self.seen: dict[str, int] = {}
        self.needs = needs = needs_of(detectors)
        self.reach = reach = {rule: REACH.get(rule, Reach()) for rule in needs}
        settings: dict[str, DetectorsConfig] = {}  # the detector's own numbers (min_peers...)
        for d in detectors:
            c = getattr(d, "c", None)
            for rule in getattr(d, "rules", {}):
                settings[rule] = c if isinstance(c, DetectorsConfig) else DetectorsConfig()
        self.settings = settings
        self.peers = {rule: r.peers if isinstance(r.peers, int)
                      else getattr(settings[rule], r.peers) for rule, r in reach.items()}
        self.near_w = {rule: float(getattr(settings[rule], r.near_w)) if r.near_w else 0.0
                       for rule, r in reach.items()}
        self.rack_rules = rack_rules = [rule for rule, r in reach.items() if r.rack]
        self.racks = _Racks(min((settings[r].rack_min_gpus for r in rack_rules), default=1),
                            needs[rack_rules[0]][0] if rack_rules and needs[rack_rules[0]]
                            else "")
        # [without XIDs, with XIDs]: rule -> GPU samples judged; -> why not -> samples
        self.judged = [dict.fromkeys(needs, 0), dict.fromkeys(needs, 0)]
        self.failed: list[dict[str, dict[str, int]]] = [{rule: {} for rule in needs}
                                                        for _ in range(2)]
        # rule -> most GPUs of one node with its metrics, where it lacked peers
        self.most = dict.fromkeys(needs, 0)
        # A recording's frames come in few shapes (which GPUs, metrics, and which GPUs
        # share a job): judge each once. Keyed by the partition into jobs, not the job ids
        # (``shape_of``), and cleared at SHAPES_MAX, so that it stays the fleet's size.
        self.shapes: dict[object, list[list[tuple[str, int, dict[str, int], int]]]] = {}
        self.samples = 0
        self.jobs = False  # whether any GPU of the data was in a job
        self.gpus: set[tuple[str, int]] = set()
        self.limits: dict[tuple[str, int], tuple[bool, str]] = {}  # GPU -> (NVML's, model)

    def see(self, batch: Sequence[Frame]) -> None:
        seen, limits = self.seen, self.limits
        judged_racks = self.racks.see(batch) if self.rack_rules else set()
        for f in batch:
            host = f.host.metrics
            for m in host:
                seen[m] = seen.get(m, 0) + 1
            for g in f.gpus:
                if not (g.metrics or g.xids or g.state != "ok"):
                    continue  # listed so that the node's GPU set holds; no sample this tick
                self.samples += 1
                self.jobs = self.jobs or bool(g.job)
                self.gpus.add((f.node, g.index))
                for m in g.metrics:
                    seen[m] = seen.get(m, 0) + 1
                if TEMP in g.metrics:
                    nvml = SLOW in g.metrics and SHUT in g.metrics
                    limits[(f.node, g.index)] = (nvml or limits.get((f.node, g.index),
                                                                    (False, ""))[0], g.model)
                if g.xids:
                    seen["xid"] = seen.get("xid", 0) + len(g.xids)
            rack_ok = (f.cluster, f.rack) in judged_racks
            shape = shape_of(f, rack_ok)
            both = self.shapes.get(shape)
            if both is None:  # [the XID rules without XIDs, every rule with them]
                if len(self.shapes) >= SHAPES_MAX:
                    self.shapes.clear()  # judged again as met: slower, never wrong
                both = self.shapes[shape] = [
                    [(rule, *judge_frame(f, wanted, self.reach[rule], self.peers[rule], xid,
                                         rack_ok))
                     for rule, wanted in self.needs.items() if xid or self.reach[rule].xid]
                    for xid in (False, True)]
            for verdicts, judged, failed in zip(both, self.judged, self.failed):
                for rule, n, fails, largest in verdicts:
                    if fails.get("peers_power"):  # depends on this frame's powers
                        near = near_peers(f, self.needs[rule], self.peers[rule], self.near_w[rule])
                        n, fails = n + near, {**fails, "peers_power": fails["peers_power"] - near}
                    judged[rule] += n
                    for why, k in fails.items():
                        if k:
                            failed[rule][why] = failed[rule].get(why, 0) + k
                    if largest > self.most[rule]:
                        self.most[rule] = largest

    def done(self, summary: ReplaySummary, xid_channel: bool) -> None:
        seen, samples, settings = self.seen, self.samples, self.settings
        judged, failed = self.judged[1], self.failed[1]
        if not xid_channel:  # the XID rules judged nothing where the data carries no XIDs
            judged = {**judged, **{r: n for r, n in self.judged[0].items() if self.reach[r].xid}}
            failed = {**failed, **{r: w for r, w in self.failed[0].items() if self.reach[r].xid}}
        summary.gpus = len(self.gpus)
        summary.metrics = dict(seen)
        thermal = next((settings[r] for r in ("gpu_temp_high", "gpu_temp_critical")
                        if r in settings), None)
        if thermal is not None and self.limits:
            summary.notes.append(_limits_note(self.limits, thermal))
        for rule, metrics in self.needs.items():
            summary.coverage[rule] = judged[rule] / samples if samples else 0.0
            lacked = [m for m in metrics if m not in seen]
            if lacked:
                summary.missing[rule] = lacked
            if failed[rule]:  # each reason, the commonest first, with its share if several
                fails = sorted(failed[rule].items(), key=lambda kv: -kv[1])
                said = [_why(why, metrics, self.reach[rule], self.peers[rule], lacked,
                             self.most[rule], self.racks.min_gpus, self.jobs,
                             self.near_w[rule])
                        + (f" ({_share(n / samples)} of GPU samples)" if len(fails) > 1 else "")
                        for why, n in fails]
                summary.unjudged[rule] = "; ".join(said)
            elif not samples:
                summary.unjudged[rule] = "no GPU sample"


def coverage(batches: Sequence[Sequence[Frame]], detectors: Sequence[Detector],
              summary: ReplaySummary, xid_channel: bool = False) -> None:
    """``Coverage`` over batches already read."""
    cov = Coverage(detectors)
    for batch in batches:
        cov.see(batch)
    cov.done(summary, xid_channel)


def _why(why: str, metrics: tuple[str, ...], r: Reach, peers: int, lacked: list[str],
         most: int, rack_min_gpus: int, jobs: bool = False, near_w: float = 0.0) -> str:
    """The summary's words for one reason a rule did not judge a GPU sample. ``jobs``:
    whether any GPU of the data was in a job."""
    what = " and ".join(metrics) or "a sample"
    if why == "never":
        return r.never
    if why == "uuid":
        return ("the data names no GPU UUID (only the agent's JSON frames do: "
                "fleetwatch agent --json)")
    if why == "metrics":
        if lacked:
            return f"lacked {', '.join(lacked)}"
        if r.any_of:
            return f"lacked {' or '.join(r.any_of)}"
        return f"the GPU samples lacked {what}"
    if why == "xid":
        return "lacked xid (the data has no xid rows or XID_ERRORS file)"
    if why == "job":
        if jobs:
            return ("GPUs without a job (unallocated, or not labelled; it compares the GPUs "
                    "of one job)")
        return "no jobs in the data (it compares the GPUs of one job)"
    if why == "peers_power":
        return (f"no peers at its power (it compares a GPU with the other GPUs of its node "
                f"in its job, and where it has fewer than {peers}, with those of other jobs "
                f"within {near_w:g} W of its power; its node's others drew "
                "other powers: inference pods at other loads, a GPU beside idle or "
                "unallocated ones)")
    if why == "peers_job":
        if r.job:
            return (f"GPUs alone in their job on their node (it compares a GPU with {peers} "
                    f"or more other GPUs of its job on its node reporting {what}; their "
                    "node's other GPUs are in other jobs, as with one job a GPU)")
        return (f"no peers in its job (it compares a GPU only with the other GPUs of its "
                f"node in its job, or with those without one where it has none, and needs "
                f"{peers} or more reporting {what}; its node's others are in other jobs, as "
                "with one job a GPU (inference pods), or a job beside unallocated GPUs)")
    if why == "peers":
        of = "its job on its node" if r.job else "its node"
        has = f"at most {most - 1}" if most > 1 else "none"
        return (f"no peers (it needs {peers} or more other GPUs of {of} reporting {what}; "
                f"the data has {has})")
    return (f"no peers (it needs {rack_min_gpus} or more GPUs on two or more nodes of a rack "
            f"reporting {what}, or the inlet air ({INLET}) of two or more nodes; the data "
            "has fewer)")


def _limits_note(limits: dict[tuple[str, int], tuple[bool, str]], c: DetectorsConfig) -> str:
    """Which slowdown and shutdown temperatures the thermal rules judged the GPUs by."""
    nvml = sum(own for own, _ in limits.values())
    parts: dict[str, int] = {}
    assumed = 0
    for own, model in limits.values():
        if own:
            continue
        if thermal_limits_c(model) is None:
            assumed += 1
        else:
            parts[model] = parts.get(model, 0) + 1
    said = [f"NVML's own (gpu_slowdown_temp_c, gpu_shutdown_temp_c in the data) for {nvml:,} "
            "GPUs"] if nvml else []
    for model, n in sorted(parts.items()):
        slow, shut = thermal_limits_c(model)  # type: ignore[misc]
        said.append(f"{model}'s for {n:,} GPUs: slowdown {slow:g} °C, shutdown {shut:g} °C")
    if assumed:
        unknown = sorted({m for own, m in limits.values() if m and not own
                          and thermal_limits_c(m) is None})
        unnamed = any(not m for own, m in limits.values() if not own)
        said.append(
            f"assumed for {assumed:,} GPUs: slowdown {c.fallback_slowdown_c:g} °C, shutdown "
            f"{c.fallback_shutdown_c:g} °C (detectors.fallback_slowdown_c and "
            "fallback_shutdown_c), as the data has no NVML thresholds ("
            + (f"and fleetwatch knows no thermal limits of {', '.join(unknown)}"
               + (", and some GPUs name no model" if unnamed else "") if unknown
               else "and names no GPU model") + "); " + _limits_advice(bool(unknown), unnamed))
    return "thermal limits: " + "; ".join(said)


def _limits_advice(unknown: bool, unnamed: bool) -> str:
    """What to do about assumed limits: naming a part helps only where its limits are
    known; for a part fleetwatch does not know, its own limits must be given."""
    give = ("give gpu_slowdown_temp_c and gpu_shutdown_temp_c samples (NVML's thresholds: "
            "nvidia-smi -q, GPU Slowdown Temp and GPU Shutdown Temp)")
    if not unknown:
        return (f"name the part with --gpu-model, e.g. --gpu-model '{EXAMPLE_MODEL}', or a "
                f"model column, or {give}")
    return (f"{give}, or set detectors.fallback_slowdown_c and detectors.fallback_shutdown_c "
            "in the config to that part's limits"
            + ("; name the other GPUs' part with --gpu-model or a model column"
               if unnamed else ""))
