"""A failing GPU from its error counters and state: ECC, retired pages, row remapping, PCIe
and NVLink errors, links down, a lost GPU.

Events (a jump of an error counter) are latched: a finding carries ``hold_s`` and the
alert lifecycle keeps the condition for that long after its last sighting. States (a
row remap pending, a GPU lost, NVLinks down) hold while the GPU reports them. Each
counter is rated on its own: a reading NVML did not give this tick is no reading.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import KEEP_FIRING, Finding, OpenAlert
from fleetwatch.models.batch import COL, Batch, gpu_finding
from fleetwatch.models.board_places import Missing, MissingBoards
from fleetwatch.models.gpu_slots import GpuTable, WaveDetector
from fleetwatch.models.held_jobs import HeldJobs

RATE_HOLD_S = 600.0     # an error-rate finding holds this long after the rate was seen
RATE_WINDOW_S = 60.0    # error rates are judged over at least this long
DRAIN = "Drain the node, reset the GPU and run diagnostics (dcgmi diag -r 3)"


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
        "gpu_nvlink_errors": (), "gpu_lost": (), "gpu_missing": (),
        "gpu_retired_pages_limit": ("gpu_retired_pages_dbe",),
        "gpu_row_remap_pending": ("gpu_row_remap_pending",),
        "gpu_row_remap_failure": ("gpu_row_remap_failure",),
        "gpu_nvlink_down": ("gpu_nvlink_links_down",),
    }

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        # dbe_ts: when the GPU's last DBE finding was made (a reset ends its hold);
        # quiet: the first frame of the GPU's current run of frames without a sample.
        self.table = GpuTable(dbe_v=np.nan, dbe_a=np.nan, dbe_ts=np.nan, ret_sbe=np.nan,
                              ret_dbe=np.nan, rec=np.nan, pcie=np.nan, pcie_ts=np.nan,
                              crc=np.nan, crc_ts=np.nan, nvrep=np.nan, nvrep_ts=np.nan,
                              quiet=np.nan)
        self.jobs = HeldJobs()  # the job each GPU held: what a lost GPU's alert names
        self.missing = MissingBoards()

    def drop(self, nodes: Iterable[str]) -> None:
        super().drop(nodes)
        self.jobs.drop(nodes)
        self.missing.drop(nodes)

    def adopt(self, alerts: Iterable[OpenAlert]) -> None:
        """Open ``gpu_missing`` alerts (loaded from the store at a start, or for nodes this
        processor now owns): their boards stay missing until seen again, so a restart
        does not end the alert of a board still missing."""
        self.missing.adopt(
            (a.cluster, a.node, Missing(
                uuid, int(a.device[3:]), getattr(a, "serial", ""), getattr(a, "pci_bus_id", ""),
                "", a.started_ts, int(a.evidence.get("gpus_before", 0.0)),
                int(a.evidence.get("gpus_now", 0.0))))
            for a in alerts if a.rule == "gpu_missing" and a.state != "resolved"
            and (uuid := getattr(a, "uuid", "")) and a.device[3:].isdigit())

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        out = super().update(frames)
        see = self.missing.see
        for f in frames:
            out.extend(_missing(f, m) for m in see(f))
        return out

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

    def _quiet(self, s: np.ndarray, sampled: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Since when each GPU has had no sample (NaN: it has one now). A GPU judged lost
        after its samples stopped (a recording: 5 minutes on; the agent: a few ticks on)
        was lost since then: its alert starts there (``Finding.since``), as other alerts
        start where their condition began, while it fires when it is judged."""
        quiet = self.table["quiet"]
        quiet[s[sampled]] = np.nan
        fresh = ~sampled & np.isnan(quiet[s])
        quiet[s[fresh]] = ts[fresh]
        return quiet[s]

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
        lost_in = b.lost[rows].any(axis=1).tolist()
        for r, lost in zip(rows.tolist(), lost_in, strict=True):  # before its findings
            self.jobs.see(b.frames[r], lost)
        x = b.x[rows]
        have = slots >= 0
        s = slots[have]
        v = {name: x[..., i][have] for name, i in _C.items()}
        ts = np.broadcast_to(b.ts[rows][:, None], slots.shape)[have]
        quiet = self._quiet(s, np.isfinite(x).any(axis=-1)[have], ts)
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
                 "recovery": recovery.astype(float), "quiet": quiet}
        where = np.argwhere(have)
        for k in np.flatnonzero(any_flag).tolist():
            i, j = where[k]
            f = b.frames[rows[i]]
            g = f.gpus[j].index
            vals = {n: float(a[k]) for n, a in v.items() if math.isfinite(a[k])}
            e = {n: float(a[k]) for n, a in extra.items()}
            tags = self.jobs.tags(f, g)
            for rule, mask in masks.items():
                if mask[k]:
                    out.append(replace(self._finding(rule, f, g, vals, e), **tags))

    def _finding(self, rule: str, f: Frame, g: int, v: dict[str, float],
                 e: dict[str, float]) -> Finding:
        c, where = self.c, self.jobs.where(f, g)
        hold = c.event_hold_s
        if rule == "gpu_ecc_dbe":
            n = v.get("gpu_ecc_dbe_volatile_total", v.get("gpu_ecc_dbe_aggregate_total", 0.0))
            if e["reset"]:
                # Hold 0: the alert resolves on the next sample judged clear. How it ended
                # (``ends``): the alert keeps the job and the action it fired with.
                return replace(gpu_finding(f, g, rule, n, f"{where} was reset: its volatile "
                                           "double-bit ECC count went back down with no new "
                                           "error", "critical", 0.0, v, "Nothing more for "
                                           "these errors; a pending row remap or page "
                                           "retirement has its own alert"), ends=True)
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
            # (collectors/nvml/reader.py LOST_AFTER_INTERVALS), for over gpu_lost_silent_s.
            # A GPU that answers again is back: its alert ends at once (no keep-firing).
            # It began at the first frame without a sample (``_quiet``).
            lost = gpu_finding(f, g, rule, 1.0, f"{where} is lost: it no longer answers while "
                               "its node does (fallen off the bus?)", "critical", 0.0,
                               {**v, KEEP_FIRING: 0.0},
                               "Drain the node and reboot it; check the GPU's PCIe slot and "
                               "power if it repeats")
            quiet = e["quiet"]
            return replace(lost, since=quiet) if math.isfinite(quiet) else lost
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
        where, pages = self.jobs.where(f, g), e["pages"]
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
        c, where = self.c, self.jobs.where(f, g)
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


def _missing(f: Frame, m: Missing) -> Finding:
    """A board the node's frames no longer name: a GPU finding about that board (``board``)
    at the index it was at. NVML numbers GPUs in PCI bus order, so the boards after it
    moved down one index: the alert names the board itself (its serial, PCI bus id), not
    whatever board that index holds now. It ends at once when the board is seen again."""
    return replace(gpu_finding(
        f, m.index, "gpu_missing", float(m.before - m.now),
        f"{f.node}: GPU board {m.text()}, gpu{m.index} before, is no longer seen: the node "
        f"names {m.now} of its {m.before} GPU boards", "critical", 0.0,
        {"gpus_before": float(m.before), "gpus_now": float(m.now), KEEP_FIRING: 0.0},
        "Drain the node; check that board (lspci for its PCI bus id, the kernel log for "
        "NVRM/Xid errors), reseat it or check its power, and reboot; RMA it if it stays "
        "missing. The boards after it are numbered one lower by NVML until it is back"),
        board=m.uuid, since=m.since)


REMAPPED_ROWS = ("gpu_remapped_rows_uncorrectable", "gpu_remapped_rows_correctable")


def _remapped_rows(f: Frame, g: int) -> dict[str, float]:
    """The GPU's remapped-row counts in this frame (NVML's nvmlDeviceGetRemappedRows), where
    read."""
    gpu = f.gpu(g)
    metrics = gpu.metrics if gpu is not None else {}
    return {m: metrics[m] for m in REMAPPED_ROWS if m in metrics}
