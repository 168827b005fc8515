"""The XID table: each NVIDIA driver XID's name, severity, meaning and suggested action.

It is data (``xids.csv``), checked on load with the line number of any mistake,
like the metric catalogue. The xid detector classifies events with it and
dashboards can show what an XID means.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")
_COLUMNS = ["code", "name", "severity", "rank", "action", "meaning"]
RANK_RMA = 6  # the top of the rank scale: the GPU needs service (see xids.csv)
# The class of action of each rank (xids.csv's comments), as the ``remedy`` label that the
# Alertmanager sink gives an XID alert: a label, so that an escalation is a new alert there
# (notified at once) and routes may send an RMA to the hardware team. Rank 3 is not used.
REMEDIES: dict[int, str] = {0: "none", 1: "restart", 2: "reset", 4: "drain", 5: "reboot",
                            RANK_RMA: "rma"}


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    name: str
    severity: Severity
    rank: int  # how drastic the action is, 0 (nothing) .. RANK_RMA; see xids.csv
    action: str
    meaning: str


class XidTableError(ValueError):
    """The XID table is malformed; the message names the line."""


def parse(text: str, origin: str = "xids.csv") -> dict[int, Xid]:
    """Parse and check XID table text; comment lines start with '#'."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise XidTableError(f"{origin}: no header line")
    header_no, header = lines[0]
    if next(csv.reader([header])) != _COLUMNS:
        raise XidTableError(f"{origin} line {header_no}: header must be {','.join(_COLUMNS)}")
    table: dict[int, Xid] = {}
    for n, line in lines[1:]:
        where = f"{origin} line {n}"
        row = next(csv.reader([line]))
        if len(row) != len(_COLUMNS):
            raise XidTableError(f"{where}: expected {len(_COLUMNS)} columns, found {len(row)}"
                                " (quote a field that holds a comma)")
        code_text, name, severity, rank_text, action, meaning = (s.strip() for s in row)
        try:
            code = int(code_text)
        except ValueError:
            raise XidTableError(f"{where}: code {code_text!r} is not a whole number") from None
        if not 0 < code < 65536:
            raise XidTableError(f"{where}: code must be in 1..65535")
        if code in table:
            raise XidTableError(f"{where}: XID {code} is listed twice")
        if severity not in SEVERITIES:
            raise XidTableError(f"{where}: severity {severity!r} is not one of "
                                f"{', '.join(SEVERITIES)}")
        if not (rank_text.isdigit() and 0 <= int(rank_text) <= RANK_RMA):
            raise XidTableError(f"{where}: rank {rank_text!r} must be a whole number 0..{RANK_RMA}"
                                " (how drastic the action is; see the table's comments)")
        if not (name and action and meaning):
            raise XidTableError(f"{where}: name, action and meaning must not be empty")
        table[code] = Xid(code, name, severity, int(rank_text),  # type: ignore[arg-type]
                          action, meaning)
    return table


@cache
def xid_table() -> dict[int, Xid]:
    """The XID table shipped with fleetwatch."""
    return parse(resources.files("fleetwatch").joinpath("xids.csv").read_text("utf-8"))


def describe(code: int) -> Xid:
    """The table's entry, or a warning that names the code when the table does not know it."""
    known = xid_table().get(code)
    if known is not None:
        return known
    return Xid(code, f"XID {code}", "warning", 1,
               "Look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)",
               "An XID this table does not describe")


def remedy(code: int) -> str:
    """The class of the XID's action (``REMEDIES``), e.g. ``rma`` for XID 64."""
    rank = describe(code).rank
    return REMEDIES.get(rank, f"rank{rank}")


# -- an XID alert's codes, as its evidence keeps them ------------------------------------

# An XID alert lists at most this many codes (the most drastic, then the latest): a GPU
# that reports a new code every second must not grow its message and evidence (webhook,
# Kafka, Alertmanager annotations, three store series per code) without bound.
XID_LISTED = 8
# Evidence of the codes an XID alert does not list: how many, and their XIDs' count.
MORE_CODES, MORE_COUNT = "more_codes", "more_count"

Seen = dict[int, list[float]]  # code -> [count, first ts, last ts]


def worst_first(seen: Mapping[int, Sequence[float]]) -> list[int]:
    """The codes, the most drastic action first (the table's ``rank``); of equal ones, the
    latest XID."""
    return sorted(seen, key=lambda c: (-describe(c).rank, -seen[c][2], c))


def seen_of(evidence: Mapping[str, float]) -> Seen:
    """The codes an XID alert's evidence lists (``xid_CODE_count``, ``_first_ts``,
    ``_last_ts``, as ``xid_evidence`` writes them)."""
    seen: Seen = {}
    for k, v in evidence.items():
        parts = k.split("_")
        if len(parts) == 3 and parts[0] == "xid" and parts[1].isdigit() and parts[2] == "count":
            code = int(parts[1])
            first = evidence.get(f"xid_{code}_first_ts")
            last = evidence.get(f"xid_{code}_last_ts")
            if first is not None and last is not None:
                seen[code] = [float(v), float(first), float(last)]
    return seen


def xid_evidence(seen: Mapping[int, Sequence[float]],
                 more: tuple[float, float] = (0.0, 0.0)) -> dict[str, float]:
    """An XID alert's evidence: the worst code (``xid``), the count of all its XIDs, and
    per listed code (``XID_LISTED``, worst first) its count, first and last time; the
    codes left out in ``MORE_CODES`` and ``MORE_COUNT``. ``more``: (codes, count) known
    only as a number (an alert adopted from a store, whose unlisted codes are not kept)."""
    order = worst_first(seen)
    evidence = {"xid": float(order[0]),
                "count": sum(s[0] for s in seen.values()) + more[1]}
    for code in order[:XID_LISTED]:
        n, first, last = seen[code]
        evidence.update({f"xid_{code}_count": float(n), f"xid_{code}_first_ts": float(first),
                         f"xid_{code}_last_ts": float(last)})
    left = order[XID_LISTED:]
    if left or more[0]:
        evidence[MORE_CODES] = len(left) + more[0]
        evidence[MORE_COUNT] = sum(seen[c][0] for c in left) + more[1]
    return evidence


def xid_listing(evidence: Mapping[str, float]) -> str:
    """The codes of an XID alert's evidence in words, the worst first, e.g. ``64 (ECC page
    retirement or row remapping failure) 08:00:12Z; 48 (Double-bit ECC error) 3x,
    08:00:00Z to 08:00:30Z; and 2 more codes (5 XIDs)``."""
    seen = seen_of(evidence)
    listed = []
    for code in worst_first(seen):
        n, first, last = seen[code]
        when = _hms(first) if n == 1 else f"{n:.0f}x, {_hms(first)} to {_hms(last)}"
        listed.append(f"{code} ({describe(code).name}) {when}")
    codes, count = evidence.get(MORE_CODES, 0.0), evidence.get(MORE_COUNT, 0.0)
    if codes:
        listed.append(f"and {codes:.0f} more code{'s' if codes != 1 else ''} "
                      f"({count:.0f} XID{'s' if count != 1 else ''})")
    return "; ".join(listed)


def xid_text(node: str, gpu: int, evidence: Mapping[str, float],
             job: str = "") -> tuple[str, str]:
    """An XID alert's message and action from its evidence: what a store that keeps no
    text (VictoriaMetrics) gives back, the same words the detector wrote (less the job
    that held the GPU, ``job``: "job 42" or "job 42, alice, team vision", which the
    detector names and numbers cannot keep)."""
    listing = xid_listing(evidence)
    if not listing and "xid" in evidence:  # the evidence of an older release: one code
        code = int(evidence["xid"])
        listing = f"{code} ({describe(code).name})"
        if evidence.get("count", 1) > 1:
            listing += f" {evidence['count']:.0f}x"
    action = describe(int(evidence["xid"])).action if "xid" in evidence else ""
    held = "" if not job else f" ({job})" if job.startswith("job ") else f" (job {job})"
    return f"GPU {gpu} on {node}{held}: XID {listing}", action


def _hms(ts: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(ts))
