"""What one command-line flag's text may be: the argparse types of ``fleetwatch.cli_args``
(durations with their unit, look-backs, bounded numbers, fault specs), each refusing a
wrong value with a usage error that says what to type instead."""

from __future__ import annotations

import argparse
import math

from fleetwatch.durations import HOW, parse_duration


def duration(text: str) -> float:
    """A duration with its unit: 90s, 15m, 2h, 7d, 3h30m (0 needs none).

    A bare number is refused: ``--for 2`` meant two hours to whoever typed it and
    made a two-second silence, ``--since 24`` meant a day and looked back 24 s.
    """
    text = text.strip()
    try:
        return parse_duration(text)
    except ValueError as exc:
        wrong = str(exc)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(wrong) from None
    if value == 0:
        return 0.0
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; {HOW}")
    raise argparse.ArgumentTypeError(
        f"{text!r} has no unit: write {text}s for seconds, or e.g. 30m, 2h, 1d")


class Typed(float):
    """A flag's number that keeps the text typed, so that a message can echo it
    (``alerts --since 48h`` answered "in the last 172800 s")."""

    text: str

    def __new__(cls, value: float, text: str) -> Typed:
        self = super().__new__(cls, value)
        self.text = text
        return self


def look_back(text: str) -> float:
    """A look-back: a duration above 0 and at most ten years."""
    seconds = duration(text)
    if not 0 < seconds <= 3650 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0 and at most 3650d")
    return Typed(seconds, text.strip())


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def bounded(lo: float, hi: float, integer: bool = False):  # -> an argparse type
    """A number within [lo, hi] (finite), or a usage error that says the range."""
    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if integer else 'a number'}") from None
        if not lo <= value <= hi:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"{text!r} must be between {lo:g} and {hi:g}")
        return value
    return parse


def duration_within(lo: float, hi: float):  # -> an argparse type
    """A duration with its unit within [lo, hi] seconds, as every duration flag takes."""
    def parse(text: str) -> float:
        seconds = duration(text)
        if not lo <= seconds <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} must be between {lo:g}s and {hi:g}s")
        return seconds
    return parse


def fault(text: str):  # -> Fault, imported lazily to keep --help fast
    from fleetwatch.collectors.sim import parse_fault

    try:
        return parse_fault(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
