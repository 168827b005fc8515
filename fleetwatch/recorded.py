"""Read recorded telemetry into frames: the long CSV layout, AcmeTrace's layout (its
reader is ``recorded_acme``) and one series.

Long CSV (one sample per row; a header line is required)::

    timestamp,node,gpu,metric,value[,cluster][,rack][,job][,model]
    2023-07-01T08:00:00+08:00,10.140.1.10,3,gpu_temp_c,71
    1688169600,10.140.1.10,,host_cpu_util_pct,12.5
    1688169615,10.140.1.10,3,xid,79

* ``timestamp``: epoch seconds, or ISO 8601 (a time without a zone is UTC, said in the
  summary, as is a series whose times go back about an hour at night in a month where
  clocks fall back: a DST change in local times, ``recorded_values.fall_back``);
* ``gpu``: the GPU index, empty for a host metric;
* ``metric``: a catalogue name (``fleetwatch config`` lists none; see the README's
  metric table) in the catalogue's unit, a DCGM field name (``DCGM_FI_DEV_GPU_TEMP``)
  in DCGM's unit, as the other layouts take it, or ``xid`` (``value`` is the XID code,
  a whole number 1..65535 as in ``xids.csv``: an event on that GPU at that time), or
  ``DCGM_FI_DEV_XID_ERRORS`` (the last XID seen, 0: none yet, as dcgm-exporter gives
  it: read as in AcmeTrace's layout, below);
* ``value``: empty is no sample (the metric is absent, never 0), as in the other
  layouts: the row has nothing to say and is passed over, counted in the summary;
* ``job``: the job that holds the GPU at that time (empty: none), which the job
  rules (stuck, straggler) compare GPUs within; ``model``: the GPU's product name
  as NVML gives it (``NVIDIA H100 80GB HBM3``), whose thermal limits
  (``fleetwatch.parts``) stand in where the data has no NVML thresholds;
* the header's names in any case (``Timestamp,Node,GPU,Metric,Value``);
* rows may come in any order within ten minutes of recorded time (a file sorted per
  node, per metric, or shuffled within a tick); a sample given twice (same time,
  node, GPU and metric) keeps the last one; the summary counts such repeats, and those
  with another value (two sources of one series, or a clock or time-zone fault).
  ``fleetwatch replay`` of one file replays it as it is read, in memory bounded by
  that window (``recorded_stream``): a row further behind the newest time read comes
  after its time was replayed, and is counted and passed over (the summary says so:
  sort such a file by time). A file spanning under twenty minutes is read whole.

Every layout: a gzip-compressed file (its first bytes 1f 8b, whatever its name) is
read as it is; ``-`` is standard input. A DCGM field name that DCGM defines
(``dcgm_fields.csv``) but the catalogue has no meaning for (``DCGM_FI_DEV_FB_FREE``,
``DCGM_FI_PROF_NVLINK_TX_BYTES``) is passed over and counted in the summary, not a bad
row; DCGM's other names of a catalogue field (``catalogue.DCGM_ALIASES``: DCGM 3.2's
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``) are read as it.

Every layout: a memory temperature of 0 is no sample (GDDR boards, L4 or L40S, have
no memory sensor and answer 0, which dcgm-exporter passes on), as the agent reads it
(``collectors.nvml.metrics.ZERO_IS_ABSENT``); the summary counts them.

Every layout, once read: where the series of one node carry their own times a
fraction of its interval apart (DCGM field timestamps, a scrape per series), its
samples are gathered into ticks of that interval, as the agent's frame gathers a
node's GPUs (see ``_to_ticks``); and a GPU whose samples stop for several of its
intervals while other GPUs of its node go on is read as lost, as the agent reports
a GPU that fell off the bus (see ``_mark_lost``). Both are said in the summary.

AcmeTrace (InternLM/AcmeTrace, the Acme clusters of the NSDI '24 study): one CSV
per metric, named after it (``GPU_TEMP.csv``, ``DCGM_FI_DEV_GPU_TEMP.csv``,
split files ``GPU_TEMP-2023-07.csv``; cluster metrics ``NODE_CPU_UTILIZATION.csv``),
a ``Time`` column (epoch seconds as collected, or the date-time text its
notebook writes, e.g. ``2023-07-01 08:00:00+08:00``) and one column per node
(the server's IP, e.g. ``10.140.1.10``, or its name) or per GPU (``IP-N`` or ``IP_N``
after an IP address; ``NAME:N``, ``NAME/gpuN`` or ``NAME-gpuN`` after any name: a
hostname's own number, as in ``gpu-node-01``, is no GPU index). Values are in DCGM's
units (FB_USED in MiB; ratios 0..1 as collected, with epoch times, or in percent as
the AcmeTrace notebook writes them, with date-time times, or wherever a value is
above 1; the summary says which scale was read) and converted with the catalogue's
DCGM scale. ``XID_ERRORS`` holds the last XID seen (0: none yet; a
whole number 0..65535, else a bad cell): a change to a non-zero code, in time order
across all the files, is read as that XID event. Per-node columns of a GPU metric
are read as GPU 0 of that node (said in the summary).

One series (the layout of NAB's series and of most single-sensor exports): two
columns, a time (``timestamp``, ``time``, ``ts``, ``date`` or ``datetime``) and the
value, headed ``value`` or by the metric's name (a catalogue name, or a DCGM
field name such as ``DCGM_FI_DEV_GPU_TEMP``, in DCGM's unit)::

    timestamp,value
    2013-12-02 21:15:00,73.97

A ``value`` column measures what ``Series.metric`` (``--metric``) says; nothing
is guessed, not even the unit. The series belongs to ``Series.node`` (default:
the file's name without its extension) and, for a GPU metric, GPU
``Series.gpu`` (default 0).
"""

from __future__ import annotations

import bisect
import csv
import gzip
import io
import itertools
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.recorded_reading import Reading, ReplayError
from fleetwatch.recorded_values import RATIO_OVERSHOOT

LONG_COLUMNS = ("timestamp", "node", "gpu", "metric", "value")
SERIES_TIME = ("timestamp", "time", "ts", "date", "datetime")
# A DCGM field the catalogue has no meaning for (NVLink bytes, FB_FREE...): counted, not bad.
UNUSED = "unused"


@dataclass(frozen=True, slots=True)
class Series:
    """What a one-series file (``timestamp,value``) measures, and whose it is."""

    metric: str | None = None   # a catalogue or DCGM name; None: the file's header must name it
    node: str | None = None     # None: the file's name without its extension
    gpu: int = 0


def read_files(paths: Iterable[str | Path], skip_bad: bool = False, cluster: str = "replay",
               rack: str = "unknown", series: Series | None = None,
               emit: Callable[[list[list[Frame]]], None] | None = None,
               model: str = "", lost_silent_s: float = 300.0) -> Reading:
    """Read every file (the layout told by its header) into one ``Reading``.

    ``series`` says what one-series files measure; given, at least one file must be
    one (an option that nothing reads is an error, not silence).
    ``emit``: given, the frames (``frames``, with ``model``) are handed to it as they
    are read, and the ``Reading`` returned keeps only the counts and notes: one file is
    read as a stream, in memory bounded by a window of time (``recorded_stream``).
    """
    paths = list(paths)
    out = Reading(lost_silent_s=lost_silent_s)
    stream = None
    if emit is not None and len(paths) == 1:
        from fleetwatch.recorded_stream import Stream

        stream = Stream(out, emit, model)
    _read_all(paths, out, skip_bad, cluster, rack, series)
    if stream is not None:
        stream.finish()
        return out
    from fleetwatch.recorded_ticks import mark_lost, note_repeats, to_ticks

    _xid_events(out)
    _note_zero_absent(out)
    note_repeats(out)
    to_ticks(out)
    mark_lost(out)
    if emit is not None:
        emit(frames(out, model))
    return out


def _read_all(paths: list[str | Path], out: Reading, skip_bad: bool, cluster: str, rack: str,
              series: Series | None) -> None:
    from fleetwatch.recorded_frames import is_frames, read_frames
    from fleetwatch.recorded_layouts import is_series, read_long, read_series

    series_files = 0
    for path in paths:
        p = Path(path)
        try:
            with open_text(p) as fh:
                first = fh.readline()
                if is_frames(first):
                    read_frames(p, itertools.chain([first], fh), out, skip_bad, cluster, rack)
                    continue
                rows = csv.reader(itertools.chain([first], fh))
                header = next(rows, None)
                if header is None:
                    raise ReplayError(f"{p}: empty file; expected a header line")
                header = [h.strip() for h in header]
                if is_series(header):
                    read_series(p, header, rows, out, skip_bad, cluster, rack,
                                series or Series())
                    series_files += 1
                elif header and header[0] == "Time":
                    from fleetwatch.recorded_acme import read_acme

                    read_acme(p, header, rows, out, skip_bad, cluster, rack)
                elif all(c in [h.lower() for h in header] for c in LONG_COLUMNS):
                    read_long(p, header, rows, out, skip_bad, cluster, rack)
                else:
                    raise ReplayError(
                        f"{p} line 1: unknown layout {','.join(header[:6])}...; expected the "
                        f"long CSV header {','.join(LONG_COLUMNS)}, AcmeTrace's Time,NODE,..., "
                        "one series timestamp,value, or the agent's frames as JSON lines")
        except OSError as exc:
            raise ReplayError(f"{p}: cannot read: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ReplayError(f"{p}: not UTF-8 text ({exc}); is it a CSV file? (gzip is read "
                              "as it is; other formats: decompress or export to CSV)") from None
    if series is not None and series != Series() and not series_files:
        raise ReplayError("--metric, --node and --gpu are for one-series files (timestamp,value), "
                          "and none of the files is one: the long CSV and AcmeTrace layouts "
                          "name their own metrics and nodes")
    if out.unused:
        out.notes.append("DCGM fields fleetwatch does not use, passed over: " + ", ".join(
            f"{name} ({n:,})" for name, n in sorted(out.unused.items())))


# The first bytes of compressed or binary files that people pass for a CSV file.
_BINARY = ((b"BZh", "bzip2", "bzcat"), (b"\xfd7zXZ\x00", "xz", "xzcat"),
           (b"\x28\xb5\x2f\xfd", "zstd", "zstdcat"), (b"PK\x03\x04", "zip", "unzip -p"),
           (b"PAR1", "Parquet", ""), (b"SQLite format 3", "SQLite", ""))


def open_text(p: Path) -> TextIO:
    """The file's text (``-``: standard input), gunzipped where its first bytes say gzip
    (1f 8b), whatever its name; another compressed or binary format is refused by name."""
    raw: IO[bytes] = sys.stdin.buffer if str(p) == "-" else p.open("rb")
    if not hasattr(raw, "peek"):
        raw = io.BufferedReader(raw)  # type: ignore[arg-type]
    head = raw.peek(16)[:16]  # type: ignore[attr-defined]
    if head[:2] == b"\x1f\x8b":
        raw = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
    else:
        for magic, kind, cat in _BINARY:
            if head.startswith(magic):
                raw.close()
                how = (f": decompress it, e.g. `{cat} {p} | fleetwatch replay -`" if cat
                       else ": export it as CSV (the long layout, AcmeTrace's, or one series)")
                raise ReplayError(f"{p}: binary, not CSV text ({kind} data){how}")
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


def _xid_events(out: Reading) -> None:
    """The last-XID samples (XID_ERRORS) as events: a change to a non-zero code, in time
    order (a first sample that is not 0 is an event: nothing says it was seen before)."""
    for (node, gpu), codes in out.xid_last.items():
        last = 0
        for ts in sorted(codes):
            code = codes[ts]
            if code and code != last:
                out.xids[(ts, node, gpu)].append(code)
            last = code
    out.xid_last.clear()


def _note_zero_absent(out: Reading) -> None:
    for metric, n in sorted(out.overshoot.items()):
        out.notes.append(f"{n:,} sample{'s' if n != 1 else ''} of {metric} a little above 1 "
                         f"(up to {1 + RATIO_OVERSHOOT:g}) read as 1: DCGM's ratios overshoot "
                         "now and then (NVIDIA/DCGM#152); further above is a bad row")
    for metric, n in sorted(out.zero_absent.items()):
        out.notes.append(f"{n:,} sample{'s' if n != 1 else ''} of {metric} equal to 0 read as "
                         "absent, as the agent reads them: GDDR boards (L4, L40S) have no "
                         "memory temperature sensor and answer 0; the rules on it did not "
                         "judge them")


def frames(reading: Reading, model: str = "",
           known: dict[str, set[int]] | None = None) -> list[list[Frame]]:
    """Frames in time order, one batch per timestamp (as a live processor sees a tick).

    ``model``: the GPUs' product name where the data gives none (its ``model`` column).
    ``known``: each node's GPUs seen so far, where the reading is a part of a stream (it
    is updated with those of this part).
    """
    xids: dict[tuple[float, str], dict[int, tuple[int, ...]]] = defaultdict(dict)
    for (ts, node, gpu), codes in reading.xids.items():
        xids[(ts, node)][gpu] = tuple(codes)
    # Every frame of a node lists every GPU the node has shown, as the agent's frame does (a
    # GPU that missed a scrape has no metrics, one that fell off the bus is "lost"): a frame
    # listing another set of GPUs reads as a second agent under the node's name.
    node_gpus: dict[str, set[int]] = defaultdict(set) if known is None else known
    for (_, node), per_gpu in reading.samples.items():
        node_gpus[node].update(g for g in per_gpu if g is not None)
    for (_, node), events in xids.items():
        node_gpus[node].update(events)
    by_ts: dict[float, list[Frame]] = defaultdict(list)
    for ts, node in sorted(set(reading.samples) | set(xids)):
        per_gpu = reading.samples.get((ts, node), {})
        events = xids.get((ts, node), {})
        lost = reading.lost.get((ts, node), set())
        indices = sorted(reading.listed.get((ts, node), node_gpus[node]) | lost)
        gpus = tuple([GpuReading(i, uuid, reading.models.get((node, i), model),
                                 dict(per_gpu.get(i, {})),
                                 job=None if i in lost else reading.jobs.get((ts, node, i)),
                                 state="lost" if i in lost else "ok", xids=events.get(i, ()),
                                 info=info)
                      for i in indices for uuid, info in [_board(reading, ts, node, i)]])
        cluster, rack = reading.places.get(node, ("replay", "unknown"))
        by_ts[ts].append(Frame(cluster, rack, reading.names.get(node, node), ts, gpus,
                               HostReading(dict(per_gpu.get(None, {})))))
    return [by_ts[ts] for ts in sorted(by_ts)]


def _board(reading: Reading, ts: float, node: str, gpu: int) -> tuple[str, dict[str, str]]:
    """The GPU's UUID and info as the files name them at ``ts`` (the board named last
    before, else the first named: a frame where the GPU is read as lost names none), else
    a stand-in UUID and none."""
    seen = reading.boards.get((node, gpu))
    if not seen:
        return f"{node}/gpu{gpu}", {}
    at = max(bisect.bisect_right(seen, ts, key=lambda s: s[0]) - 1, 0)
    return seen[at][1], seen[at][2]
