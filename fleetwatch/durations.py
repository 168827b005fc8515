"""Durations as the command line writes them: a number and its unit (90s, 15m, 2h, 7d), or
several from the largest unit down (3h30m, 1d12h). One parser for every duration flag and
for the simulator's fault specs (``--fault node_silent:node-002@3h30m+1h``)."""

from __future__ import annotations

import math
import re

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
HOW = "write e.g. 90s, 15m, 2h or 7d, or 3h30m"
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([dhms])")
# A unit spelt out ("2hours", "30 min"): answered with its letter, not with the fragment
# the letter left over ("'ours' is not a number ...").
_WORDS = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(days?|hours?|hrs?|minutes?|mins?|"
                    r"seconds?|secs?)\s*", re.IGNORECASE)


def _spelt_out(text: str) -> str | None:
    """``2hours`` -> ``2h``, ``2hrs30mins`` -> ``2h30m``; None if ``text`` is not a
    duration with its units spelt out."""
    parts, pos = [], 0
    while pos < len(text):
        m = _WORDS.match(text, pos)
        if m is None:
            return None
        parts.append(m[1] + m[2][0].lower())
        pos = m.end()
    return "".join(parts) or None


def parse_duration(text: str) -> float:
    """``3h30m`` -> 12600.0. A ``ValueError`` names the part that is wrong. A bare number
    is not a duration here: whether one is seconds or an error is the caller's choice."""
    text = text.strip()
    total, pos, last = 0.0, 0, -1
    order = list(UNITS)
    while pos < len(text) or not text:
        m = _PART.match(text, pos)
        if m is None:
            meant = _spelt_out(text)
            if meant:
                raise ValueError(f"{text!r} is not a duration: a unit is one letter (s, m, "
                                 f"h, d), so write {meant}")
            bad = text[pos:] or text
            raise ValueError(f"{text!r} is not a duration; {HOW}: {bad!r} is not a number "
                             "followed by s, m, h or d")
        unit = order.index(m[2])
        if unit <= last:
            raise ValueError(f"{text!r} is not a duration; {HOW}: its units go from the "
                             f"largest down, each once ({m[0]!r} comes after a "
                             f"{order[last]!r} part)")
        total += float(m[1]) * UNITS[m[2]]
        pos, last = m.end(), unit
    if not math.isfinite(total):
        raise ValueError(f"{text!r} is not a duration; {HOW}")
    return total
