"""AcmeTrace's layout (one CSV per metric, a ``Time`` column, a column per node or GPU)
into a ``Reading``: the layout is described in ``fleetwatch.recorded``, which calls
``read_acme`` for a file whose header starts with ``Time``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from fleetwatch.catalogue import catalogue
from fleetwatch.recorded import XID, Reading, _value, parse_time, xid_code

# AcmeTrace's cluster (Prometheus) files: their metric, and the scale to our unit.
ACME_HOST = {"NODE_CPU_UTILIZATION": ("host_cpu_util_pct", 100.0)}
_GPU_COLUMN = re.compile(r"^(?P<node>.+?)(?:[-_:]|/(?:gpu)?)(?:gpu)?(?P<gpu>\d{1,2})$")
_SPLIT_STEM = re.compile(r"^(?P<metric>[A-Z_]+?)(?:-\d{4}-.*)?$")


def acme_metric(stem: str) -> tuple[str, float] | None:
    """Our metric and the factor from AcmeTrace's value, for a file's name; None if unknown."""
    m = _SPLIT_STEM.match(stem)
    name = m["metric"] if m else stem
    if name in ACME_HOST:
        return ACME_HOST[name]
    if name in ("XID_ERRORS", "DCGM_FI_DEV_XID_ERRORS"):
        return XID, 1.0
    for metric in catalogue().metrics:
        if metric.dcgm and metric.dcgm in (name, f"DCGM_FI_DEV_{name}", f"DCGM_FI_PROF_{name}"):
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
    parsed = [_GPU_COLUMN.match(c) for c in columns]
    per_gpu = bool(columns) and all(parsed) and len({m["gpu"] for m in parsed if m}) > 1
    subjects: list[tuple[str, int | None]] = []
    host = metric != XID and catalogue()[metric].scope == "host"
    for c, m in zip(columns, parsed):
        if per_gpu and m:
            subjects.append((m["node"], int(m["gpu"])))
        else:
            subjects.append((c, None if host else 0))
    if not per_gpu and not host:
        out.notes.append(f"{p.name}: one column per node; read as GPU 0 of each node")
    ratio = metric.endswith("_ratio")
    table: list[tuple[float, int, list[str]]] = []
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
    if ratio and any(_float(v) > 1.0 for _, _, cells in table for v in cells if v):
        factor /= 100.0  # the AcmeTrace notebook's percent scaling
        out.notes.append(f"{p.name}: ratios given in percent; divided by 100")
    last_xid: dict[tuple[str, int | None], int] = {}
    table.sort(key=lambda r: r[0])
    out.xid_channel |= metric == XID
    for ts, n, cells in table:
        for (node, gpu), column, cell in zip(subjects, columns, cells):
            if not cell.strip():
                continue  # no sample: the metric is absent, never 0
            out.places.setdefault(node, (cluster, rack))
            try:
                value = xid_code(cell, zero=True) if metric == XID else _value(cell, metric,
                                                                                factor)
            except ValueError as exc:
                out.bad(f"{p} line {n}, column {column}", str(exc), skip)
                continue
            if metric == XID:
                code = int(value)
                if code and last_xid.get((node, gpu)) != code:
                    out.xids[(ts, node, gpu or 0)].append(code)
                last_xid[(node, gpu)] = code
            else:
                out.samples[(ts, node)][gpu][metric] = value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0
