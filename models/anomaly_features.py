"""What the fleet anomaly model (anomaly.py) measures of a GPU: ten-minute windows of
one-minute means of its inputs, turned into features, and the phase of work (idle,
light, medium, heavy by SM activity) a window belongs to. Training and the detector
compute them alike."""

from __future__ import annotations

import numpy as np

WINDOW_MIN = 10
# The per-minute inputs, in this order (NaN when a GPU does not report one).
INPUTS: tuple[str, ...] = ("temp", "power", "sm", "clock", "node_temp", "node_power", "errors")
FEATURES: tuple[str, ...] = (
    "temp_mean", "temp_std", "temp_slope", "power_mean", "power_std", "sm_mean", "sm_std",
    "clock_mean", "temp_vs_node", "power_vs_node", "errors_log")
PHASES: tuple[float, ...] = (0.05, 0.3, 0.6)  # SM activity edges: idle | light | medium | heavy
PHASE_NAMES: tuple[str, ...] = ("idle", "light", "medium", "heavy")  # phase_of's 0, 1, 2, 3
# Per feature: what it is, its unit as written in a message, its unit in evidence names,
# and the format of its values.
FEATURE_UNITS: dict[str, tuple[str, str, str, str]] = {
    "temp_mean": ("mean temperature", " °C", "c", ".1f"),
    "temp_std": ("temperature swing (std)", " °C", "c", ".2f"),
    "temp_slope": ("temperature slope", " °C/min", "c_per_min", ".2f"),
    "power_mean": ("mean power", " W", "w", ".0f"),
    "power_std": ("power swing (std)", " W", "w", ".0f"),
    "sm_mean": ("mean SM activity", "", "ratio", ".2f"),
    "sm_std": ("SM activity swing (std)", "", "ratio", ".3f"),
    "clock_mean": ("mean SM clock", " MHz", "mhz", ".0f"),
    "temp_vs_node": ("temperature above its node's median", " °C", "c", ".1f"),
    "power_vs_node": ("power above its node's median", " W", "w", ".0f"),
    "errors_log": ("error counter growth, log(1 + count)", "", "log1p", ".2f")}
# A window whose SM activity swings more than this spans two phases of work (a job
# starting, a checkpoint): it is compared with nothing, in training or in service.
MAX_PHASE_SWING = 0.1


def steady(features: np.ndarray) -> np.ndarray:
    """Which rows (windows) stay within one phase of work."""
    return features[:, FEATURES.index("sm_std")] <= MAX_PHASE_SWING


def phase_of(sm_mean: float) -> int:
    if sm_mean != sm_mean:
        return 0
    return int(np.searchsorted(PHASES, sm_mean, side="right"))


def window_features(minutes: np.ndarray) -> np.ndarray:
    """Features of windows: ``minutes`` is (windows, WINDOW_MIN, len(INPUTS)) of minute means
    (or one window, (WINDOW_MIN, len(INPUTS))); returns (windows, len(FEATURES))."""
    block = minutes[None] if minutes.ndim == 2 else minutes
    t, p, sm, clk, nt, npw, err = np.moveaxis(block, -1, 0)
    # Least-squares slope of temperature per minute, over the minutes that have one.
    x = np.broadcast_to(np.arange(t.shape[1], dtype=float), t.shape)
    ok = ~np.isnan(t)
    with np.errstate(all="ignore"):
        n = ok.sum(axis=1)
        xm = np.where(ok, x, 0).sum(axis=1) / n
        tm = np.where(ok, t, 0).sum(axis=1) / n
        dx = np.where(ok, x - xm[:, None], 0)
        dt = np.where(ok, t - tm[:, None], 0)
        slope = np.where(n >= 3, (dx * dt).sum(axis=1) / (dx * dx).sum(axis=1), np.nan)
        return np.stack([
            np.nanmean(t, axis=1), np.nanstd(t, axis=1), slope, np.nanmean(p, axis=1),
            np.nanstd(p, axis=1), np.nanmean(sm, axis=1), np.nanstd(sm, axis=1),
            np.nanmean(clk, axis=1), np.nanmean(t - nt, axis=1), np.nanmean(p - npw, axis=1),
            np.log1p(np.clip(np.nansum(err, axis=1), 0, None))], axis=1)
