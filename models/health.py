"""Failing GPUs and nodes: XID events, error counters, lost GPUs, silent nodes.

Events (an XID, a jump of an error counter) are latched: a finding carries
``hold_s`` and the alert lifecycle keeps the condition for that long after its
last sighting. States (a row remap pending, a GPU lost, NVLinks down) hold
while the GPU reports them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import REVISION, Finding, OpenAlert
from fleetwatch.models.batch import COL, Batch, GpuTable, WaveDetector, gpu_finding
from fleetwatch.xids import describe

RATE_HOLD_S = 600.0     # an error-rate finding holds this long after the rate was seen
RATE_WINDOW_S = 60.0    # error rates are judged over at least this long
FORGET_S = 7 * 86400.0  # a node silent this long is no longer reported (decommissioned)
CONFLICT_S = 120.0      # a node's GPU set switching twice this close: two agents, one name
DRAIN = "Drain the node, reset the GPU and run diagnostics (dcgmi diag -r 3)"


# One XID code on one open XID alert: how often it came, first and last time.
_Seen = dict[int, list[float]]  # code -> [count, first ts, last ts]
_XidKey = tuple[str, str, int, str]  # (cluster, node, gpu, severity)


class XidEvents:
    """Each XID a GPU reports, classified by the XID table (fleetwatch/xids.csv).

    One alert per GPU and severity; while it holds (``hold_s`` after the last XID),
    every XID of that severity joins it: the message lists each code with its count
    and times, the action is that of the most drastic (the table's ``rank``: RMA over
    drain-and-reset), and a code new to the alert bumps its ``revision`` so the sinks
    hear of it. The codes seen are kept in the evidence (``xid_CODE_count``,
    ``xid_CODE_first_ts``, ``xid_CODE_last_ts``), from which ``adopt`` takes an open
    alert over after a restart."""

    name = "xid"
    rules: dict[str, tuple[str, ...]] = {
        "gpu_xid_critical": (), "gpu_xid_warning": (), "gpu_xid_info": ()}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self._seen: dict[_XidKey, _Seen] = {}

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self._seen if k[1] in gone]:
            del self._seen[key]

    def adopt(self, alerts: Iterable[OpenAlert]) -> None:
        """Take over the XIDs of open XID alerts (loaded from the store at start, or for
        nodes this processor now owns), so later XIDs join them."""
        for a in alerts:
            severity = a.rule.removeprefix("gpu_xid_")
            digits = a.device.removeprefix("gpu")
            if a.rule not in self.rules or not digits.isdigit() or a.state == "resolved":
                continue
            gpu = int(digits)
            seen = _seen_of(a.evidence or {})
            if seen:
                self._seen[(a.cluster, a.node, gpu, severity)] = seen

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        out = []
        for f in frames:
            for g in f.gpus:
                if g.xids:
                    out.extend(self._classify(f, g.index, g.xids))
        return out

    def _classify(self, f: Frame, gpu: int, codes: tuple[int, ...]) -> list[Finding]:
        by_severity: dict[str, list[int]] = {}
        for code in codes:
            by_severity.setdefault(describe(code).severity, []).append(code)
        out = []
        for severity, now in by_severity.items():
            hold = self.c.xid_info_hold_s if severity == "info" else self.c.xid_hold_s
            key = (f.cluster, f.node, gpu, severity)
            seen = self._seen.get(key)
            if seen is None or f.ts >= max(s[2] for s in seen.values()) + hold:
                seen = self._seen[key] = {}  # the alert before (if any) has ended
            for code in now:
                s = seen.setdefault(code, [0.0, f.ts, f.ts])
                s[0] += 1
                s[1], s[2] = min(s[1], f.ts), max(s[2], f.ts)
            out.append(_xid_finding(f, gpu, severity, seen, hold))
        return out


def _seen_of(evidence: Mapping[str, float]) -> _Seen:
    """The codes an XID alert's evidence lists (see ``_xid_finding``)."""
    seen: _Seen = {}
    for k, v in evidence.items():
        parts = k.split("_")
        if len(parts) == 3 and parts[0] == "xid" and parts[1].isdigit() and parts[2] == "count":
            code = int(parts[1])
            first = evidence.get(f"xid_{code}_first_ts")
            last = evidence.get(f"xid_{code}_last_ts")
            if first is not None and last is not None:
                seen[code] = [float(v), float(first), float(last)]
    return seen


def _xid_finding(f: Frame, gpu: int, severity: str, seen: _Seen, hold: float) -> Finding:
    """One XID alert's finding: every code seen while it holds, the worst first."""
    # The most drastic action wins; of equal ones, the latest XID.
    order = sorted(seen, key=lambda c: (-describe(c).rank, -seen[c][2], c))
    worst = describe(order[0])
    evidence = {"xid": float(worst.code), "count": sum(s[0] for s in seen.values()),
                REVISION: float(len(seen))}
    listed = []
    for code in order:
        n, first, last = seen[code]
        evidence.update({f"xid_{code}_count": n, f"xid_{code}_first_ts": first,
                         f"xid_{code}_last_ts": last})
        when = _hms(first) if n == 1 else f"{n:.0f}x, {_hms(first)} to {_hms(last)}"
        listed.append(f"{code} ({describe(code).name}) {when}")
    return gpu_finding(f, gpu, f"gpu_xid_{severity}", worst.code,
                       f"GPU {gpu} on {f.node}: XID {'; '.join(listed)}", severity, 0.0,
                       evidence, worst.action, hold)


def _hms(ts: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(ts))


_C = {name: COL[name] for name in (
    "gpu_ecc_dbe_volatile_total", "gpu_ecc_dbe_aggregate_total", "gpu_retired_pages_sbe",
    "gpu_retired_pages_dbe", "gpu_retired_pages_pending", "gpu_row_remap_pending",
    "gpu_row_remap_failure", "gpu_pcie_replay_total", "gpu_nvlink_crc_errors_total",
    "gpu_nvlink_replay_errors_total", "gpu_nvlink_recovery_errors_total",
    "gpu_nvlink_links_down")}
# Dynamic page retirement (GPUs before A100): a page is retired after one double-bit or
# two single-bit errors on it, at most 64 pages per board (NVIDIA, "Dynamic Page
# Retirement"; "A100 GPU memory error management"). DCGM's health check fails a GPU at
# 60 retired pages, SBE and DBE together (63 in newer releases): near the limit, an RMA.
RETIRED_PAGES_MAX = 64
RETIRED_PAGES_RMA = 60


class GpuErrors(WaveDetector):
    """ECC, row remapping, retired pages, PCIe replays, NVLink errors and lost GPUs.

    Each counter is judged on its own: a reading NVML did not give this tick (a field
    read that failed) is no reading, never a zero, and never a drop of a sum.
    """

    name = "gpu_errors"
    rules = {
        "gpu_ecc_dbe": (), "gpu_retired_pages": (), "gpu_pcie_replay": (),
        "gpu_nvlink_errors": (), "gpu_lost": (),
        "gpu_retired_pages_limit": ("gpu_retired_pages_dbe",),
        "gpu_row_remap_pending": ("gpu_row_remap_pending",),
        "gpu_row_remap_failure": ("gpu_row_remap_failure",),
        "gpu_nvlink_down": ("gpu_nvlink_links_down",),
    }

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        # dbe_ts: when the GPU's last DBE finding was made (a reset ends its hold).
        self.table = GpuTable(dbe_v=np.nan, dbe_a=np.nan, dbe_ts=np.nan, ret_sbe=np.nan,
                              ret_dbe=np.nan, rec=np.nan, pcie=np.nan, pcie_ts=np.nan,
                              crc=np.nan, crc_ts=np.nan, nvrep=np.nan, nvrep_ts=np.nan)

    def _jump(self, name: str, s: np.ndarray, value: np.ndarray) -> np.ndarray:
        """Where a counter rose since the GPU's last sample; remembers the new value."""
        last = self.table[name][s]
        with np.errstate(invalid="ignore"):
            rose = value > last
        have = np.isfinite(value)
        self.table[name][s[have]] = value[have]
        return rose & have

    def _rate(self, name: str, s: np.ndarray, value: np.ndarray, ts: np.ndarray,
              per_min: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where a counter rose faster than per_min over at least RATE_WINDOW_S (or as
        much within less); the rise and its rate per minute, since the reference sample."""
        t = self.table
        ref, ref_ts = t[name][s], t[name + "_ts"][s]
        have = np.isfinite(value)
        with np.errstate(invalid="ignore"):
            rise = value - ref
            elapsed = ts - ref_ts
            span = np.maximum(elapsed, RATE_WINDOW_S)
            fast = have & (rise >= per_min * span / 60.0)
            reset = have & (np.isnan(ref) | (rise < 0) | (elapsed >= RATE_WINDOW_S) | fast)
            rate = rise * 60.0 / np.maximum(elapsed, 1.0)
        t[name][s[reset]] = value[reset]
        t[name + "_ts"][s[reset]] = ts[reset]
        return fast, np.nan_to_num(rise), np.nan_to_num(rate)

    def _dbe(self, s: np.ndarray, v: dict[str, np.ndarray],
             ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """New double-bit errors; and GPUs with a DBE finding in its hold whose volatile
        count went down while the aggregate did not rise: the GPU was reset (or its
        driver reloaded), which is what the finding asked for."""
        vol = v["gpu_ecc_dbe_volatile_total"]
        with np.errstate(invalid="ignore"):
            down = vol < self.table["dbe_v"][s]
            recent = ts - self.table["dbe_ts"][s] < self.c.event_hold_s
        rose_v = self._jump("dbe_v", s, vol)
        rose_a = self._jump("dbe_a", s, v["gpu_ecc_dbe_aggregate_total"])
        dbe = rose_v | rose_a
        reset = down & recent & ~dbe
        self.table["dbe_ts"][s[dbe]] = ts[dbe]
        self.table["dbe_ts"][s[reset]] = np.nan
        return dbe, reset

    def _pages(self, s: np.ndarray, v: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Pages retired (SBE and DBE, each counted on its own): where one more was
        retired since the last sample, and the GPU's total (its last readings)."""
        new = self._jump("ret_sbe", s, v["gpu_retired_pages_sbe"]) | self._jump(
            "ret_dbe", s, v["gpu_retired_pages_dbe"])
        known = np.stack([self.table["ret_sbe"][s], self.table["ret_dbe"][s]])
        total = np.where(np.isnan(known).all(axis=0), np.nan, np.nansum(known, axis=0))
        return new, np.concatenate([total[None], known])

    def _wave(self, b: Batch, rows: np.ndarray, slots: np.ndarray, out: list[Finding]) -> None:
        c = self.c
        x = b.x[rows]
        have = slots >= 0
        s = slots[have]
        v = {name: x[..., i][have] for name, i in _C.items()}
        ts = np.broadcast_to(b.ts[rows][:, None], slots.shape)[have]
        dbe, reset = self._dbe(s, v, ts)
        new_pages, (pages, pages_sbe, pages_dbe) = self._pages(s, v)
        reported = np.isfinite(v["gpu_retired_pages_sbe"]) | np.isfinite(
            v["gpu_retired_pages_dbe"])
        recovery = self._jump("rec", s, v["gpu_nvlink_recovery_errors_total"])
        pcie, pcie_rise, pcie_rate = self._rate("pcie", s, v["gpu_pcie_replay_total"], ts,
                                                c.pcie_replay_per_min)
        crc, _, crc_rate = self._rate("crc", s, v["gpu_nvlink_crc_errors_total"], ts,
                                      c.nvlink_errors_per_min)
        nvrep, _, nvrep_rate = self._rate("nvrep", s, v["gpu_nvlink_replay_errors_total"], ts,
                                          c.nvlink_errors_per_min)
        masks = {
            "gpu_ecc_dbe": dbe | reset,
            "gpu_retired_pages": new_pages | (v["gpu_retired_pages_pending"] >= 1),
            "gpu_retired_pages_limit": reported & (pages >= RETIRED_PAGES_RMA),
            "gpu_pcie_replay": pcie,
            "gpu_nvlink_errors": crc | nvrep | recovery, "gpu_lost": b.lost[rows][have],
            "gpu_row_remap_pending": v["gpu_row_remap_pending"] >= 1,
            "gpu_row_remap_failure": v["gpu_row_remap_failure"] >= 1,
            "gpu_nvlink_down": v["gpu_nvlink_links_down"] >= 1,
        }
        any_flag = np.zeros(len(s), bool)
        for m in masks.values():
            any_flag |= m
        if not any_flag.any():
            return
        # What the messages say beyond the readings: per-minute rates of the counters
        # that rose too fast (NaN: not this one), the pages retired, a reset seen.
        extra = {"reset": reset.astype(float), "pages": pages, "pages_sbe": pages_sbe,
                 "pages_dbe": pages_dbe,
                 "replays_per_min": np.where(pcie, pcie_rate, np.nan),
                 "pcie_rise": np.where(pcie, pcie_rise, np.nan),
                 "crc_errors_per_min": np.where(crc, crc_rate, np.nan),
                 "replay_errors_per_min": np.where(nvrep, nvrep_rate, np.nan),
                 "recovery": recovery.astype(float)}
        where = np.argwhere(have)
        for k in np.flatnonzero(any_flag).tolist():
            i, j = where[k]
            f = b.frames[rows[i]]
            g = f.gpus[j].index
            vals = {n: float(a[k]) for n, a in v.items() if math.isfinite(a[k])}
            e = {n: float(a[k]) for n, a in extra.items()}
            for rule, mask in masks.items():
                if mask[k]:
                    out.append(self._finding(rule, f, g, vals, e))

    def _finding(self, rule: str, f: Frame, g: int, v: dict[str, float],
                 e: dict[str, float]) -> Finding:
        c, where = self.c, f"GPU {g} on {f.node}"
        hold = c.event_hold_s
        if rule == "gpu_ecc_dbe":
            n = v.get("gpu_ecc_dbe_volatile_total", v.get("gpu_ecc_dbe_aggregate_total", 0.0))
            if e["reset"]:
                # Hold 0: the alert resolves on the next sample judged clear.
                return gpu_finding(f, g, rule, n, f"{where} was reset: its volatile "
                                   "double-bit ECC count went back down with no new error",
                                   "critical", 0.0, v, "Nothing more for these errors; a "
                                   "pending row remap or page retirement has its own alert")
            return gpu_finding(f, g, rule, n, f"{where}: new double-bit (uncorrectable) ECC "
                               f"errors, {n:.0f} since the driver loaded", "critical", 0.0, v,
                               DRAIN + "; the memory is remapped or retired at reset", hold)
        if rule in ("gpu_retired_pages", "gpu_retired_pages_limit"):
            return self._pages_finding(rule, f, g, v, e)
        if rule in ("gpu_pcie_replay", "gpu_nvlink_errors"):
            return self._rate_finding(rule, f, g, v, e)
        if rule == "gpu_lost":
            # The agent reports a GPU NVML calls lost, or one that answered no call for
            # several ticks while its node's other GPUs did; a recording, one whose series
            # stop for as many intervals while its node's other GPUs go on
            # (collectors/nvml/reader.py LOST_AFTER_INTERVALS).
            return gpu_finding(f, g, rule, 1.0, f"{where} is lost: it no longer answers while "
                               "its node does (fallen off the bus?)", "critical", 0.0, v,
                               "Drain the node and reboot it; check the GPU's PCIe slot and "
                               "power if it repeats")
        if rule in ("gpu_row_remap_pending", "gpu_row_remap_failure"):
            v = {**v, **_remapped_rows(f, g)}  # how many rows: what an RMA ticket asks
        if rule == "gpu_row_remap_pending":
            return gpu_finding(f, g, rule, 1.0, f"{where}: a memory row remap waits for a GPU "
                               "reset", "warning", 0.0, v,
                               "Reset the GPU when its job ends (drain, nvidia-smi -r)")
        if rule == "gpu_row_remap_failure":
            return gpu_finding(f, g, rule, 1.0, f"{where}: a memory row remap failed",
                               "critical", 0.0, v, "Drain the node: the GPU needs service (RMA)")
        n = v.get("gpu_nvlink_links_down", 0.0)
        return gpu_finding(f, g, rule, n, f"{where}: {n:.0f} NVLink(s) down", "critical", 0.0,
                           v, "Drain the node; check the NVLink fabric and fabric manager, "
                           "then reset the GPUs")

    def _pages_finding(self, rule: str, f: Frame, g: int, v: dict[str, float],
                       e: dict[str, float]) -> Finding:
        """Pages as last read (a field missing this tick keeps its last reading)."""
        where, pages = f"GPU {g} on {f.node}", e["pages"]
        split = (f"{np.nan_to_num(e['pages_sbe']):.0f} for single-bit, "
                 f"{np.nan_to_num(e['pages_dbe']):.0f} for double-bit errors")
        pending = v.get("gpu_retired_pages_pending", 0.0) >= 1
        total = (f"{pages:.0f} memory pages retired ({split}) of the limit of "
                 f"{RETIRED_PAGES_MAX}" if pages == pages else "")
        if not total:   # a retirement pending on a GPU whose counts are not read
            return gpu_finding(f, g, rule, 1.0, f"{where}: a page retirement waits for a GPU "
                               "reset", "warning", 0.0, v, "Reset the GPU when its job ends "
                               "so the retirement takes effect", self.c.event_hold_s)
        evidence = {**v, "retired_pages": pages, "retired_pages_max": RETIRED_PAGES_MAX}
        if rule == "gpu_retired_pages_limit":
            return gpu_finding(f, g, rule, pages, f"{where}: {total}: at the RMA threshold "
                               f"({RETIRED_PAGES_RMA})", "critical", 0.0, evidence,
                               "Drain the node and replace the GPU (RMA): it is running out "
                               "of pages to retire")
        return gpu_finding(f, g, rule, pages, f"{where}: {total}"
                           + ("; a retirement waits for a GPU reset" if pending else ""),
                           "warning", 0.0, evidence,
                           "Reset the GPU when its job ends so the retirement takes effect; "
                           f"plan an RMA as the total nears {RETIRED_PAGES_RMA}",
                           self.c.event_hold_s)

    def _rate_finding(self, rule: str, f: Frame, g: int, v: dict[str, float],
                      e: dict[str, float]) -> Finding:
        c, where = self.c, f"GPU {g} on {f.node}"
        rates = {k: e[k] for k in ("replays_per_min", "crc_errors_per_min",
                                   "replay_errors_per_min") if e[k] == e[k]}
        evidence = {**v, **{k: round(r, 1) for k, r in rates.items()}}
        if rule == "gpu_pcie_replay":
            rate = rates["replays_per_min"]
            rise = e["pcie_rise"]
            over = rise * 60.0 / rate if rate > 0 else 0.0
            return gpu_finding(f, g, rule, rate, f"{where}: {rate:.0f} PCIe replays/min "
                               f"({rise:.0f} in the last {over:.0f} s; limit "
                               f"{c.pcie_replay_per_min:g}/min)", "warning", 0.0,
                               evidence, "Check the GPU's PCIe link: reseat the GPU or riser, "
                               "check lspci link speed and width", RATE_HOLD_S)
        parts = [f"{rates['crc_errors_per_min']:.0f} NVLink CRC errors/min"
                 if "crc_errors_per_min" in rates else "",
                 f"{rates['replay_errors_per_min']:.0f} NVLink replay errors/min"
                 if "replay_errors_per_min" in rates else "",
                 "a link recovery" if e["recovery"] else ""]
        rate = max(rates.values(), default=0.0)
        return gpu_finding(f, g, rule, rate, f"{where}: " + ", ".join(p for p in parts if p)
                           + f" (limit {c.nvlink_errors_per_min:g}/min; NVML's totals over "
                           "all links)", "warning", 0.0, evidence,
                           f"Find the link: nvidia-smi nvlink -e -i {g} shows each link's "
                           "error counters; check that link's cable or NVSwitch port, drain "
                           "and reset the GPUs if the errors keep rising", RATE_HOLD_S)


class _Identities:
    """The GPU UUIDs of a node's frames: the current set, and when it last switched. A
    GPU replaced (or a node rebuilt) switches it once; two agents that report under one
    name switch it back and forth, frame after frame."""

    __slots__ = ("current", "switches", "recent")

    def __init__(self, ident: tuple[str, ...]) -> None:
        self.current = ident
        self.switches: list[float] = []
        self.recent: dict[tuple[str, ...], float] = {}

    def switch(self, ident: tuple[str, ...], ts: float) -> bool:
        """The frame at ``ts`` shows another set: do two agents report as the node?"""
        self.recent[self.current] = ts
        self.recent[ident] = ts
        self.current = ident
        self.switches = [t for t in self.switches if ts - t <= CONFLICT_S] + [ts]
        self.recent = {k: t for k, t in self.recent.items() if ts - t <= CONFLICT_S}
        return len(self.switches) >= 2


class NodeSilence:
    """A node that sent no frame for several of its own intervals, on the stream's clock.

    "Now" is the stream's own time, never the wall clock alone, so replays and
    simulations that run faster than real time are judged as they happened. But a few
    nodes whose clocks are wrong (two agents 2 h ahead, one frame stamped 2099) must
    not move it: "now" is a consensus of the nodes heard from lately (those among the
    last ``2 x nodes`` frames to arrive): the newest of their latest times that is at
    most ``step`` (``silent_min_s`` / 2, or two of the fleet's usual intervals) past
    their lower median. A minority ahead is above that, one behind below it; a node
    that died leaves the set once the others have sent that many frames, so that even
    most of the fleet dying does not stop the clock. Where there is a wall clock (a
    live processor passes its own as ``wall``), "now" is never later than it: no alert
    is ever stamped in the future.

    Each node is judged on when it was last heard of: its frame's time when that is
    within its silence limit of "now" (the exact time, as it reported); "now" itself
    when the frame was ahead of "now", or further behind than that and behind every
    frame of the batch's nodes in step (its clock is wrong, or a spool flushes old
    frames: either way it is arriving, which is a clock problem, not a silent node).
    A node whose clock runs ahead is therefore reported silent a limit after its last
    frame arrived, not when "now" reaches its clock. A jump of
    "now" by more than ``step`` ends a pause of the whole fleet (a replay's gap, an
    outage of the brokers): it counts against none of the nodes heard from lately.
    """

    name = "node_silent"
    rules: dict[str, tuple[str, ...]] = {"node_silent": (), "node_name_conflict": ()}
    uses_wall = True  # the processor passes its clock to ``update`` (live frames only)

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self.now = -math.inf
        self._index: dict[str, int] = {}
        self._where: list[tuple[str, str, str]] = []
        self._last = np.full(64, np.nan)      # the newest frame time, on the node's clock
        self._heard = np.full(64, np.nan)     # when it was last heard of, on "now"'s clock
        self._seq = np.full(64, -np.inf)      # the arrival count at its newest frame
        self._skew = np.zeros(64)             # how far off its clock was when last heard of
        self._interval = np.full(64, np.nan)
        self._arrived = 0                     # frames seen so far
        # Per node: the GPU UUIDs each agent reporting as it showed, and when last. Two
        # seen within CONFLICT_S of each other: two machines share the node's name.
        self._identities: dict[str, _Identities] = {}

    def drop(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            i = self._index.get(node)
            if i is not None:
                self._last[i] = self._heard[i] = np.nan
                self._seq[i], self._skew[i] = -np.inf, 0.0
            self._identities.pop(node, None)

    def expect(self, nodes: Iterable[tuple[str, str, str, float]]) -> None:
        """Nodes this processor now owns but has no frame from: (cluster, rack, node,
        their last frame's time, from the store). One that sends nothing more is
        reported once it has been silent for long enough."""
        for cluster, rack, node, ts in nodes:
            i = self._index.get(node)
            if i is None:
                i = self._add_node(cluster, rack, node)
            if not self._last[i] >= ts:
                self._last[i] = ts
            if not self._heard[i] >= ts:
                self._heard[i] = ts

    def update(self, frames: Sequence[Frame], wall: float | None = None) -> list[Finding]:
        """Findings at the time of these frames; ``wall``: the processor's own clock
        (None in a replay or a simulation, judged on stream time alone)."""
        if not frames:
            return []
        identities, conflicts = self._identities, {}
        span: dict[int, tuple[float, float]] = {}  # node -> its oldest, newest frame here
        for f in frames:
            i = self._index.get(f.node)
            if i is None:
                i = self._add(f)
            self._arrived += 1
            self._seq[i] = self._arrived
            prev = self._last[i]
            if prev == prev and f.ts > prev:   # not NaN: learn the node's interval
                gap = min(f.ts - prev, 3600.0)
                iv = self._interval[i]
                self._interval[i] = gap if iv != iv else iv + 0.1 * (gap - iv)
            if not prev >= f.ts:
                self._last[i] = f.ts
            oldest, newest = span.get(i, (f.ts, f.ts))
            span[i] = (min(oldest, f.ts), max(newest, f.ts))
            self._where[i] = (f.cluster, f.rack, f.node)
            ident = tuple([g.uuid for g in f.gpus])
            seen = identities.get(f.node)
            if seen is None:
                identities[f.node] = _Identities(ident)
            elif ident != seen.current and seen.switch(ident, f.ts):
                conflicts[f.node] = f
        self._advance(wall)
        self._hear(span)
        return self._judge() + [self._conflict(f) for f in conflicts.values()]

    def _recent(self) -> np.ndarray:
        """The nodes among the senders of the last ``2 x nodes`` frames to arrive."""
        n = len(self._where)
        return self._seq[:n] > self._arrived - 2 * n

    def _advance(self, wall: float | None) -> None:
        """Move "now" to the consensus of the nodes heard from lately (see the class)."""
        n, step, prev = len(self._where), self._step(), self.now
        recent = self._recent()
        lasts = self._last[:n][recent]
        lasts = lasts[~np.isnan(lasts)]
        if not len(lasts):
            return
        median = float(np.sort(lasts)[(len(lasts) - 1) // 2])
        now = float(lasts[lasts <= median + step].max())
        if wall is not None:
            now = min(now, wall)
        if now > prev + step and prev > -math.inf:
            # The whole fleet paused: the pause counts against none of the nodes heard
            # from lately; each one's silence so far is kept.
            heard = self._heard[:n]
            shift = recent & (heard <= prev)
            heard[shift] += now - prev
        if now >= prev or now < prev - step:
            # Back by more than a step: the earlier "now" was set by nodes no longer
            # heard from (a first batch of one frame stamped years ahead).
            self.now = now

    def _hear(self, span: dict[int, tuple[float, float]]) -> None:
        """When each node of the batch was heard of, on "now"'s clock (see the class).

        ``span``: each node's oldest and newest frame time in the batch. A node whose
        newest frame is older than its limit, and older than every frame in the batch of
        the nodes in step (a batch that spans minutes, a backlog or a replay's, holds the
        last frames of a node that died in it), is behind: heard of now."""
        limits, now = self._limits(), self.now
        in_step = {i: now - limits[i] <= newest <= now for i, (_, newest) in span.items()}
        floor = min((oldest for i, (oldest, _) in span.items() if in_step[i]),
                    default=math.inf)
        for i, (_, ts) in span.items():
            heard = ts if in_step[i] or now >= ts >= floor else now
            if not self._heard[i] >= heard:
                self._heard[i] = heard
                self._skew[i] = 0.0 if heard == ts else ts - now

    def _conflict(self, f: Frame) -> Finding:
        seen = self._identities[f.node].recent
        shown = "; ".join(f"{len(k)} GPUs ({', '.join(k[:2])}{', ...' if len(k) > 2 else ''})"
                          if k else "no GPU" for k in sorted(seen))
        return Finding(
            "node_name_conflict", f.cluster, f.rack, f.node, None, f.ts, float(len(seen)),
            f"{len(seen)} agents report as {f.node}, their frames interleaved: {shown}",
            "warning", 0.0, 0.0, {"agents": len(seen)},
            "Give each machine its own name (node.node, FLEETWATCH_NODE_NODE; a cloned image "
            "or a copied config keeps the first one's): the node's series mix two machines' "
            "readings until then", "node")

    def _step(self) -> float:
        """How far past the nodes' median a node's time may set "now"."""
        known = self._interval[:len(self._where)]
        known = known[~np.isnan(known)]
        usual = float(np.median(known)) if len(known) else 0.0
        return max(self.c.silent_min_s / 2, 2 * usual)

    def _limits(self) -> np.ndarray:
        """Each node's silence limit: ``silent_intervals`` of its interval, at least
        ``silent_min_s``. A node whose interval is not known yet (one frame, or none since
        this processor took it over) is given the fleet's usual one: agents share a
        configuration."""
        n, c = len(self._where), self.c
        known = self._interval[:n][~np.isnan(self._interval[:n])]
        usual = float(np.median(known)) if len(known) else c.silent_min_s / c.silent_intervals
        return np.maximum(c.silent_min_s, c.silent_intervals * np.nan_to_num(
            self._interval[:n], nan=usual))

    def _add(self, f: Frame) -> int:
        return self._add_node(f.cluster, f.rack, f.node)

    def _add_node(self, cluster: str, rack: str, node: str) -> int:
        i = self._index[node] = len(self._where)
        self._where.append((cluster, rack, node))
        if i >= len(self._last):
            grow = len(self._last)
            self._last = np.concatenate([self._last, np.full(grow, np.nan)])
            self._heard = np.concatenate([self._heard, np.full(grow, np.nan)])
            self._seq = np.concatenate([self._seq, np.full(grow, -np.inf)])
            self._skew = np.concatenate([self._skew, np.zeros(grow)])
            self._interval = np.concatenate([self._interval, np.full(grow, np.nan)])
        return i

    def _judge(self) -> list[Finding]:
        n = len(self._where)
        gap = self.now - self._heard[:n]
        with np.errstate(invalid="ignore"):
            silent = (gap > self._limits()) & (gap < FORGET_S)
        out = []
        for i in np.flatnonzero(silent).tolist():
            cluster, rack, node = self._where[i]
            interval, skew = self._interval[i], float(self._skew[i])
            how = (f"it reports every {interval:.0f} s" if interval == interval else
                   f"its last frame: {_utc(self._last[i])}")
            if skew:  # its frames were not in step with the fleet's when last heard of
                how += f"; its clock was {_offset(skew)} of the fleet's"
            out.append(Finding(
                "node_silent", cluster, rack, node, None, self.now, float(gap[i]),
                f"{node} has sent nothing for {gap[i]:.0f} s ({how})", "critical", 0.0, 0.0,
                {"silent_s": round(float(gap[i]), 1), "interval_s":
                 round(float(np.nan_to_num(interval)), 2)},
                "Check the node: is it up, is its agent running (systemctl status "
                "fleetwatch-agent), can it reach the brokers?", "node"))
        return out


def _offset(seconds: float) -> str:
    """A clock's offset in words: "2 h ahead", "90 s behind"."""
    size = abs(seconds)
    amount = f"{size / 3600:.1f} h" if size >= 3600 else f"{size:.0f} s"
    return f"{amount} {'ahead' if seconds > 0 else 'behind'}"


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


REMAPPED_ROWS = ("gpu_remapped_rows_uncorrectable", "gpu_remapped_rows_correctable")


def _remapped_rows(f: Frame, g: int) -> dict[str, float]:
    """The GPU's remapped-row counts in this frame (NVML's nvmlDeviceGetRemappedRows), where
    read."""
    gpu = f.gpu(g)
    metrics = gpu.metrics if gpu is not None else {}
    return {m: metrics[m] for m in REMAPPED_ROWS if m in metrics}
