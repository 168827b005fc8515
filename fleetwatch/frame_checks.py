"""How the decoder (``fleetwatch.codec``) judges one field of a frame: ``FrameError``
naming the field and what is wrong, ``field_shape`` for a metric's label, and the checks
of a number, a text, an array, XID codes, a job's owners, with the sender's text quoted
in a reason only to a bounded length. Pure: no I/O, no state.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Mapping
from typing import Any

MAX_XIDS = 1024
MAX_STR = 256
# Ends a job name the decoder cut to MAX_STR (only another producer sends a longer one).
JOB_CUT = "…"

# What a rejection quotes of the message (a value, a key): the log line and the dead
# letter's reason header of a megabyte of junk stay a line. The whole message is the
# dead letter's value.
MAX_QUOTE = 200
# A bound on FrameError's texts, should a check quote more than ``quote`` gives.
_MAX_FIELD, _MAX_REASON = 300, 1000


class FrameError(ValueError):
    """A frame was rejected. ``field`` names where, ``reason`` says what is wrong.

    Both can hold text of the sender (a metric key, say): bounded here, and
    ``field_shape(field)`` is the field without it, for a metric's label."""

    def __init__(self, field: str, reason: str) -> None:
        field, reason = cut(field, _MAX_FIELD), cut(reason, _MAX_REASON)
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


# The fields of a frame (the layout in ``fleetwatch.codec``), each with the fields inside it.
_FIELDS: dict[str, dict] = {
    "v": {}, "cluster": {}, "rack": {}, "node": {}, "ts": {}, "seq": {},
    "gpus": {k: {} for k in ("index", "uuid", "model", "job", "state", "metrics", "xids",
                             "info")},
    "host": {"metrics": {}, "ports": {"name": {}, "kind": {}, "metrics": {}}},
}
_STEP = re.compile(r"\.?([a-z]+)(?:\[\d+\])?")


def field_shape(field: str) -> str:
    """``field`` (a ``FrameError``'s) without positions, keys or names the sender chose:
    ``gpus[0].metrics[10001]`` is ``gpus.metrics``, ``host.ports[3].kind`` is
    ``host.ports.kind``, the whole message (``""``) is ``frame``. One of a fixed few,
    whatever comes: fit for a metric's label."""
    parts: list[str] = []
    level, at = _FIELDS, 0
    while level:
        m = _STEP.match(field, at)
        if m is None or m.group(1) not in level:
            break
        parts.append(m.group(1))
        level, at = level[m.group(1)], m.end()
    return ".".join(parts) or "frame"


def place(where: str | int) -> str:
    return f"gpus[{where}].metrics" if type(where) is int else str(where)


def check_number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FrameError(where, f"must be a number, got {tname(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise FrameError(where, f"must be finite, got {v!r}")
    return v


def shortened(job: Any) -> Any:
    """A job name longer than ``MAX_STR`` cut to it, ending in ``JOB_CUT`` (as
    fleetwatch's agent cuts it, ``collectors.jobs.MAX_JOB_CHARS``): another producer's long
    job id must not cost the node's whole frame."""
    if type(job) is str and len(job) > MAX_STR:
        return job[:MAX_STR - len(JOB_CUT)] + JOB_CUT
    return job


def check_owners(info: Mapping[str, str], job: str | None, where: str) -> None:
    """A shared GPU's users (teams) are comma-separated, at most one per job (the agent
    pairs them, ``collectors.jobs``): more would split its energy among made-up owners."""
    jobs = job.count(",") + 1 if job else 1
    for key in ("user", "team"):
        names = info.get(key, "").count(",") + 1
        if names > jobs:
            raise FrameError(f"{where}.{key}", f"names {names} comma-separated owners for "
                             f"{jobs} job(s): at most one per job; a name holds no comma")


def check_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise FrameError(where, f"must be a string, got {tname(value)}")
    if not value or len(value) > MAX_STR:
        raise FrameError(where, f"must be 1..{MAX_STR} characters, got {len(value)}")
    if not value.isprintable():
        raise FrameError(where, "must hold printable characters only")
    return value


def check_xids(value: Any, where: str) -> tuple[int, ...]:
    check_array(value, where, MAX_XIDS)
    for k, x in enumerate(value):
        if type(x) is not int or not 0 < x < 1 << 16:
            raise FrameError(f"{where}[{k}]", f"must be an XID code, got {quote(x)}")
    return tuple(value)


def check_array(value: Any, where: str, limit: int) -> None:
    if not isinstance(value, list):
        raise FrameError(where, f"must be an array, got {tname(value)}")
    if len(value) > limit:
        raise FrameError(where, f"has {len(value)} entries, over the limit of {limit}")


def tname(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = MAX_QUOTE
_repr.maxlist = _repr.maxdict = _repr.maxtuple = 4
_repr.maxlevel = 3


def quote(value: Any) -> str:
    """``repr(value)``, of at most ``MAX_QUOTE`` characters and their count: the sender's
    text in a reason, never a megabyte of it."""
    if isinstance(value, (str, bytes, bytearray)) and len(value) > MAX_QUOTE:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:MAX_QUOTE]!r}... ({len(value):,} {unit})"
    return cut(_repr.repr(value), MAX_QUOTE)


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def not_messagepack(data: bytes | bytearray | memoryview) -> str | None:
    """What a message that is no frame looks like, when it is text (JSON, a line of
    Telegraf's, a script's): a producer other than ``fleetwatch agent`` on the topic.
    None for binary data (a frame cut short or corrupt)."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.strip() or not text.replace("\n", " ").replace("\t", " ").replace(
            "\r", " ").isprintable():
        return None
    try:
        json.loads(text)
        looks = "JSON"
    except ValueError:
        looks = "text"
    return (f"not a fleetwatch frame: this message looks like {looks} "
            f"({quote(text[:60])}); fleetwatch frames are MessagePack, as `fleetwatch agent` "
            "sends them. Is another producer (Telegraf, a script) writing to this topic?")
