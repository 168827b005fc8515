"""The XID table: each NVIDIA driver XID's name, severity, meaning and suggested action.

It is data (``xids.csv``), checked on load with the line number of any mistake,
like the metric catalogue. The xid detector classifies events with it and
dashboards can show what an XID means.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")
_COLUMNS = ["code", "name", "severity", "rank", "action", "meaning"]
RANK_RMA = 6  # the top of the rank scale: the GPU needs service (see xids.csv)


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
