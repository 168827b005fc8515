"""The long CSV and one-series layouts of ``fleetwatch replay`` (described in
``fleetwatch.recorded``, which opens the files, tells the layouts apart and calls these):
each file's rows into a ``Reading``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from fleetwatch.catalogue import catalogue, dcgm_field_names
from fleetwatch.recorded import LONG_COLUMNS, SERIES_TIME, UNUSED, Series
from fleetwatch.recorded_reading import Reading, ReplayError
from fleetwatch.recorded_values import XID, XID_FIELDS, XID_LAST, _parse_time, _value, xid_code


def is_series(header: list[str]) -> bool:
    if len(header) != 2 or header[0].lower() not in SERIES_TIME:
        return False
    return header[1].lower() == "value" or _series_metric(header[1]) is not None


def _series_metric(name: str) -> tuple[str, float] | None:
    """A catalogue name (our unit) or a DCGM field name (DCGM's unit: the factor to ours)."""
    if name in catalogue():
        return name, 1.0
    from fleetwatch.recorded_acme import acme_metric

    found = acme_metric(name) if name.upper() == name else None
    return found if found is not None and found[0] != XID else None


def read_series(p: Path, header: list[str], rows: Iterator[list[str]], out: Reading,
                 skip: bool, cluster: str, rack: str, series: Series) -> None:
    named = None if header[1].lower() == "value" else header[1]
    wanted = series.metric or named
    if wanted is None:
        raise ReplayError(
            f"{p}: one series ({header[0]},{header[1]}) that does not say what it measures; "
            "name the metric with --metric, e.g. --metric gpu_temp_c for a GPU's die "
            "temperature in °C (the catalogue's names, or a DCGM field name in DCGM's unit)")
    found = _series_metric(wanted)
    if found is None:
        raise ReplayError(f"{p}: unknown metric {wanted!r}; use the catalogue's names, e.g. "
                          "gpu_temp_c, or a DCGM field name, e.g. DCGM_FI_DEV_GPU_TEMP")
    if named is not None and series.metric and _series_metric(named) != found:
        raise ReplayError(f"{p}: the header says {named!r} and --metric says {series.metric!r}; "
                          "leave --metric out, or fix the header")
    metric, factor = found
    node = series.node or p.stem
    gpu = None if catalogue()[metric].scope == "host" else series.gpu
    out.places.setdefault(node, (cluster, rack))
    samples, last_ts = 0, math.nan  # a count, not a set: memory stays flat on long files
    empty = 0
    for n, row in enumerate(rows, 2):
        if not row or not "".join(row).strip():
            continue
        where = f"{p} line {n}"
        if len(row) != 2:
            out.bad(where, f"{len(row)} fields, the header has 2", skip)
            continue
        if not row[1].strip():
            empty += 1
            continue  # no sample: the metric is absent, never 0
        try:
            ts, naive = _parse_time(row[0])
            value = _value(row[1], metric, factor, out.overshoot)
        except ValueError as exc:
            out.bad(where, str(exc), skip)
            continue
        out.went_back(ts, (), f"{p} line {n}")
        if out.too_late(ts, f"{p} line {n}"):
            continue
        if naive and not out.naive_example:
            out.naive_example = f"{p} line {n}: {row[0].strip()}"
        out.naive_times += naive and ts != last_ts
        samples, last_ts = samples + 1, ts
        out.put(ts, node, gpu, metric, value)
    where_to = node if gpu is None else f"{node} GPU {gpu}"
    out.notes.append(f"{p.name}: one series of {metric} ({samples:,} samples), read as "
                     f"{where_to}")
    _note_empty(out, p, empty)


def _note_empty(out: Reading, p: Path, empty: int) -> None:
    if empty:
        out.notes.append(f"{p.name}: {empty:,} row{'s' if empty != 1 else ''} with an empty "
                         "value, read as no sample (absent, not 0)")


def read_long(p: Path, header: list[str], rows: Iterator[list[str]], out: Reading,
               skip: bool, cluster: str, rack: str) -> None:
    # The names in any case, as the one-series layout's; the first of a name repeated.
    col: dict[str, int] = {}
    for i, name in enumerate(header):
        col.setdefault(name.lower(), i)
    i_ts, i_node, i_gpu, i_metric, i_value = (col[c] for c in LONG_COLUMNS)
    i_job, i_model = col.get("job"), col.get("model")
    times: dict[str, float] = {}  # a timestamp's text repeats on every row of its tick
    names: dict[str, tuple[str, float]] = {}  # the metric column's text -> (ours, factor)
    width = len(header)
    empty = 0
    for n, row in enumerate(rows, 2):
        if len(row) != width:
            if row and "".join(row).strip():
                out.bad(f"{p} line {n}", f"{len(row)} fields, the header has {width}", skip)
            continue
        if not row[i_value].strip():
            # No sample (absent, never 0), as in the other layouts: nothing else to check.
            if "".join(row).strip():
                empty += 1
            continue
        node = row[i_node].strip()
        try:
            ts = times.get(row[i_ts])
            if ts is None:
                if len(times) > 100_000:  # series with times of their own: keep it bounded
                    times.clear()
                ts, naive = _parse_time(row[i_ts])
                times[row[i_ts]] = ts
                out.naive_times += naive
                if naive and not out.naive_example:
                    out.naive_example = f"{p} line {n}: {row[i_ts].strip()}"
            if not node:
                raise ValueError("empty node")
            metric, factor = names.get(row[i_metric]) or _long_metric(row[i_metric], names)
            if metric == UNUSED:
                name = row[i_metric].strip()
                out.unused[name] = out.unused.get(name, 0) + 1
                continue
            gpu = _gpu_index(row[i_gpu])
            xid = metric in (XID, XID_LAST)
            scope = "host" if xid else catalogue()[metric].scope
            if (gpu is None) != (scope == "host") and not xid:
                raise ValueError(f"{metric} is a {scope} metric: the gpu column must be "
                                 f"{'empty' if scope == 'host' else 'a GPU index'}")
            if xid and gpu is None:
                raise ValueError("an xid row needs a GPU index in column gpu")
            if xid:
                try:
                    code = xid_code(row[i_value], zero=metric == XID_LAST)
                except ValueError as exc:
                    raise ValueError(f"column value: {exc}") from None
            else:
                value = _value(row[i_value], metric, factor, out.overshoot)
        except ValueError as exc:
            out.bad(f"{p} line {n}", str(exc), skip)
            continue
        # A cluster column names each row's cluster: a node is named within it.
        node = out.place(node, ("cluster" in col and row[col["cluster"]].strip()) or cluster,
                         ("rack" in col and row[col["rack"]].strip()) or rack)
        out.went_back(ts, (node, row[i_gpu], row[i_metric]), f"{p} line {n}")
        if out.too_late(ts, f"{p} line {n}"):
            continue
        if gpu is not None:
            job = row[i_job].strip() if i_job is not None else ""
            if job:
                out.jobs[(ts, node, gpu)] = job
            model = row[i_model].strip() if i_model is not None else ""
            if model:
                out.models[(node, gpu)] = model
        if metric == XID:
            out.xid_channel = True
            out.xids[(ts, node, gpu)].append(code)  # type: ignore[index]
        elif metric == XID_LAST:
            out.xid_channel = True
            out.xid_last[(node, gpu)][ts] = code  # type: ignore[index]
        else:
            out.put(ts, node, gpu, metric, value)
    _note_empty(out, p, empty)
    if any(ours == XID_LAST for ours, _ in names.values()):
        out.notes.append(f"{p.name}: DCGM_FI_DEV_XID_ERRORS read as XID events (the last XID "
                         "seen: a change to a non-zero code is one)")
    dcgm = sorted(f"{text.strip()} as {ours}" for text, (ours, _) in names.items()
                  if text.strip() not in (ours, *XID_FIELDS) and ours != UNUSED)
    if dcgm:
        out.notes.append(f"{p.name}: DCGM field names read in DCGM's units: {', '.join(dcgm)}")


def _long_metric(text: str, names: dict[str, tuple[str, float]]) -> tuple[str, float]:
    """The long layout's metric cell: ``xid``, a catalogue name (our unit) or a DCGM field
    name (DCGM's unit, and the factor to ours), as the other layouts take it."""
    name = text.strip()
    found = ((XID, 1.0) if name == XID else (XID_LAST, 1.0) if name in XID_FIELDS
             else _series_metric(name))
    if found is None and name in dcgm_field_names():
        found = (UNUSED, 1.0)
    if found is None:
        raise ValueError(f"unknown metric {name!r} (use the catalogue's names, e.g. "
                         "gpu_temp_c, a DCGM field name, e.g. DCGM_FI_DEV_GPU_TEMP, or xid)")
    names[text] = found
    return found


def _gpu_index(text: str) -> int | None:
    """The ``gpu`` cell: a GPU index 0..1023, or None (empty) for a host metric."""
    text = text.strip()
    if not text:
        return None
    try:
        gpu = int(text)
    except ValueError:
        raise ValueError(f"column gpu: {text!r} is not a GPU index (a whole number 0..1023, "
                         "or empty for a host metric)") from None
    if not 0 <= gpu < 1024:
        raise ValueError(f"column gpu: {text!r} is not a GPU index 0..1023")
    return gpu
