"""Deltas of the kernel's cumulative counters across a wrap or a reset.

A counter that wraps (a NIC driver's 32-bit ``rx_bytes``, an InfiniBand 64-bit
PortCountersExtended counter) goes on from 0 after its top: the delta across it is
the modular one. A counter reset (a driver reload, ``perfquery -R``) also gives a
smaller value, and the two cannot be told apart from two readings; the modular delta
is taken only when it is under half the counter's range, i.e. when the previous
value was near the top, as a wrap leaves it. 32-bit InfiniBand PortCounters do not
wrap, they saturate (IBA): the InfiniBand source handles those itself.
"""

from __future__ import annotations


def counter_delta(before: float, after: float, bits: int) -> float | None:
    """How much a ``bits``-wide counter moved from ``before`` to ``after``; None for a reset."""
    if after >= before:
        return after - before
    span = float(1 << bits)
    if before >= span:  # wider than we were told: not a wrap of this width
        return None
    delta = span - before + after
    return delta if delta < span / 2 else None


def counter_bits(before: float, after: float) -> int:
    """32 while both readings fit in 32 bits (a driver that keeps 32-bit counters), else 64."""
    return 32 if max(before, after) < 1 << 32 else 64
