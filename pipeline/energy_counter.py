"""One device's interval in joules (``pipeline.energy``): the energy counter's step where
it can be trusted, else the trapezoid of the power samples; what a counter that stood
still owes back; and, over a long gap, how much time the counter says really passed, or
the energy it measured across the gap where it can be trusted there."""

from __future__ import annotations

from fleetwatch.pipeline.energy_settings import EnergySettings
from fleetwatch.pipeline.energy_state import Watermark


def max_w(s: EnergySettings, limit_w: float | None) -> float:
    """The highest mean power a counter step may imply: ``limit_ratio`` x the GPU's
    enforced power limit when the sample has one, capped by ``max_plausible_w`` (a
    limit misread, e.g. in mW, must not lift the bound); else that cap alone."""
    cap = s.max_plausible_w
    if limit_w is None or not limit_w > 0:
        return cap
    return min(cap, limit_w * s.limit_ratio)


def interval_energy(s: EnergySettings, prev: Watermark, dt: float, power: float | None,
                    counter: float | None, limit_w: float | None = None
                    ) -> tuple[float | None, float, bool]:
    """(energy or None, joules the counter owes after it, whether it stood still)."""
    if counter is not None and prev.counter is not None:
        step = counter - prev.counter
        if step >= 0.0:
            low = power if power is None or prev.power is None else min(power, prev.power)
            if power is not None and step < s.stale_ratio * (low or 0.0) * dt:
                # The counter stood still while the board drew power: the power
                # samples book it, and the counter owes them back when it moves.
                booked = trapezoid(prev.power, power, dt)
                return booked, prev.owed + booked - step, True
            net = step - prev.owed
            if net <= dt * max_w(s, limit_w):
                # A catch-up: pay back what the power samples booked, never below 0.
                return (net, 0.0, False) if net >= 0.0 else (0.0, -net, False)
        # Went down (driver reload, counter reset) or jumped: use the power samples.
    if power is None:
        return None, 0.0, False
    return trapezoid(prev.power, power, dt), 0.0, False


def clock_ran(s: EnergySettings, prev: Watermark, dt: float, power: float | None,
              counter: float | None) -> float | None:
    """Over a gap longer than ``max_gap_s``: the seconds that really passed where the
    node's clock stepped forward, else None (missing time, as for a silent node). The
    counter runs on real time: a step of it that the board's power, at both ends,
    draws in ``max_gap_s`` or less (and more than ``stale_ratio`` of that power would
    draw over the whole gap) says that this much time passed, not ``dt``."""
    if counter is None or prev.counter is None or not power or not prev.power:
        return None
    net = counter - prev.counter - prev.owed
    mean = 0.5 * (power + prev.power)
    if not 0.0 < net < s.stale_ratio * min(power, prev.power) * dt:
        return None
    ran = net / mean
    return ran if ran <= s.max_gap_s else None


def gap_energy(s: EnergySettings, prev: Watermark, dt: float, power: float | None,
               counter: float | None, limit_w: float | None) -> float | None:
    """Over a gap longer than ``max_gap_s`` (the node's clock did not step: ``clock_ran``
    said no): the joules the counter measured across it where it is sound, else None
    (missing time; nothing is invented). Sound: read at both ends and gone on from the
    same reading (it went down: the driver reloaded, the counter reset), its step less
    what it owed at a mean power the board can draw (``limit_w``, its enforced power
    limit, times ``gap_limit_ratio``; no limit known: not judged, not sound), and not
    under ``stale_ratio`` of the power read at both ends (a counter that stood still or
    restarted within the gap reads less than the board drew)."""
    if counter is None or prev.counter is None or not limit_w or limit_w <= 0:
        return None
    net = counter - prev.counter - prev.owed
    if counter < prev.counter or net < 0.0:
        return None
    if net > dt * min(limit_w * s.gap_limit_ratio, s.max_plausible_w):
        return None
    ends = [p for p in (power, prev.power) if p is not None]
    if ends and net < s.stale_ratio * min(ends) * dt:
        return None
    return net


def trapezoid(p0: float | None, p1: float, dt: float) -> float:
    return p1 * dt if p0 is None else 0.5 * (p0 + p1) * dt
