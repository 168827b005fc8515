"""AcmeTrace's layout (one CSV per metric, a ``Time`` column, a column per node or GPU)
into a ``Reading``: the layout is described in ``fleetwatch.recorded``, which calls
``read_acme`` for a file whose header starts with ``Time``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from fleetwatch.catalogue import DCGM_ALIASES, catalogue
from fleetwatch.recorded_reading import Reading
from fleetwatch.recorded_values import (
    RATIO_OVERSHOOT,
    XID,
    XID_FIELDS,
    _value,
    parse_time,
    xid_code,
)

# AcmeTrace's cluster (Prometheus) files: their metric, and the scale to our unit.
ACME_HOST = {"NODE_CPU_UTILIZATION": ("host_cpu_util_pct", 100.0)}
# A file of ratios is in percent when more than this share of its values is above 1 (and
# DCGM's overshoot): a busy GPU's percent is above 1 most of the time, while a ratio is
# above it only by a glitch (one cell of 1.0001 once divided a whole file by 100). A file
# with fewer, and epoch times, is read as 0..1; its values far above 1 are bad rows.
PERCENT_SHARE = 0.01
# A GPU's column: IP-N or IP_N (AcmeTrace's servers are named by their IP), or any node
# name with a separator no hostname has (NAME:N, NAME/N, NAME/gpuN) or the word gpu
# (NAME-gpuN). A hostname's own number, as in gpu-node-01, is no GPU index: read as one,
# three machines became GPUs of one invented node "gpu-node".
_GPU_COLUMN = re.compile(r"^(?:(?P<ip>\d{1,3}(?:\.\d{1,3}){3})[-_]"
                         r"|(?P<node>.+?)(?::|/|/gpu|[-_]gpu))(?P<gpu>\d{1,2})$")
_NUMBERED_HOST = re.compile(r"^\D.*[-_]\d{1,3}$")
_SPLIT_STEM = re.compile(r"^(?P<metric>[A-Z_]+?)(?:-\d{4}-.*)?$")


def acme_metric(stem: str) -> tuple[str, float] | None:
    """Our metric and the factor from AcmeTrace's value, for a file's name; None if unknown."""
    m = _SPLIT_STEM.match(stem)
    name = m["metric"] if m else stem
    if name in ACME_HOST:
        return ACME_HOST[name]
    if name in XID_FIELDS:
        return XID, 1.0
    names = (name, f"DCGM_FI_DEV_{name}", f"DCGM_FI_PROF_{name}")
    for metric in catalogue().metrics:
        if metric.dcgm and metric.dcgm in names:
            return metric.name, 1.0 / metric.dcgm_scale
    for alias in names:
        if alias in DCGM_ALIASES:
            metric = catalogue()[DCGM_ALIASES[alias]]
            return metric.name, 1.0 / metric.dcgm_scale
    return None


def read_acme(p: Path, header: list[str], rows: Iterator[list[str]], out: Reading,
               skip: bool, cluster: str, rack: str) -> None:
    found = acme_metric(p.stem)
    if found is None:
        out.notes.append(f"{p.name}: no catalogue metric for {p.stem!r}; file skipped")
        return
    metric, factor = found
    columns = header[1:]
    host = metric != XID and catalogue()[metric].scope == "host"
    subjects: list[tuple[str, int | None]] = []
    per_node: list[str] = []   # a GPU metric's columns that name a node
    for c in columns:
        m = None if host else _GPU_COLUMN.match(c)
        if m:
            subjects.append((m["ip"] or m["node"], int(m["gpu"])))
        elif host:
            subjects.append((c, None))
        else:
            subjects.append((c, 0))
            per_node.append(c)
    if per_node:
        numbered = [c for c in per_node if _NUMBERED_HOST.match(c)]
        out.notes.append(
            f"{p.name}: one column per node; read as GPU 0 of each node" + (
                f" ({numbered[0]} is a node: a hostname's number is no GPU index; name a "
                "GPU's column IP-N, NAME:N or NAME-gpuN)" if numbered else ""))
    table: list[tuple[float, int, list[str]]] = []
    dated = False  # a Time written as date-time text: the AcmeTrace notebook's output
    for n, row in enumerate(rows, 2):
        if not row or not "".join(row).strip():
            continue
        where = f"{p} line {n}"
        if len(row) != len(header):
            out.bad(where, f"{len(row)} fields, the header has {len(header)}", skip)
            continue
        try:
            table.append((parse_time(row[0]), n, row[1:]))
        except ValueError as exc:
            out.bad(where, str(exc), skip)
            continue
        dated = dated or _float(row[0]) is None
    stem = _SPLIT_STEM.match(p.stem)
    if metric.endswith("_ratio") or (stem["metric"] if stem else p.stem) in ACME_HOST:
        factor = _scale(p, factor, table, dated, out)
    table.sort(key=lambda r: r[0])
    out.xid_channel |= metric == XID
    for ts, n, cells in table:
        for (node, gpu), column, cell in zip(subjects, columns, cells):
            if not cell.strip():
                continue  # no sample: the metric is absent, never 0
            out.places.setdefault(node, (cluster, rack))
            try:
                value = xid_code(cell, zero=True) if metric == XID else _value(
                    cell, metric, factor, out.overshoot)
            except ValueError as exc:
                out.bad(f"{p} line {n}, column {column}", str(exc), skip)
                continue
            if metric == XID:  # the last XID seen: events once every file is read
                out.xid_last[(node, gpu or 0)][ts] = int(value)
            else:
                out.put(ts, node, gpu, metric, value)


def _scale(p: Path, factor: float, table: list[tuple[float, int, list[str]]], dated: bool,
           out: Reading) -> float:
    """The factor for a file of ratios (DCGM's 0..1, CPU's 0..1): AcmeTrace's notebook
    multiplies them by 100 as it writes its files, which it writes with date-time times
    (its input, as collected, has epoch seconds). The bulk of the values decides: over
    ``PERCENT_SHARE`` of them above 1 (and DCGM's overshoot) is percent whatever the times;
    on a mostly idle cluster every value may be under 1 either way, so the times decide.
    The summary says which scale was read and how many values led to it."""
    limit = 1.0 + RATIO_OVERSHOOT
    values = [x for _, _, cells in table for v in cells if v and (x := _float(v)) is not None]
    above = sum(x > limit for x in values)
    counted = f"{above:,} of {len(values):,} values above {limit:g}"
    if above > PERCENT_SHARE * len(values):
        out.notes.append(f"{p.name}: ratios read as percent ({counted}, over "
                         f"{PERCENT_SHARE:.0%}); divided by 100")
        return factor / 100.0
    if dated:
        out.notes.append(f"{p.name}: ratios read as percent ({counted}, but date-time times: "
                         "the AcmeTrace notebook's files, which it scales to percent); "
                         "divided by 100")
        return factor / 100.0
    out.notes.append(f"{p.name}: ratios read as 0..1 ({counted}, at most {PERCENT_SHARE:.0%}, "
                     "and epoch times: the layout as collected; the AcmeTrace notebook's "
                     "percent files have date-time times)")
    return factor


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
