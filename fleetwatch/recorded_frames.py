"""The agent's own frames as JSON: one object per line, as a recording holds them
(``tests/data/recorded/*.jsonl.gz``), or one after another as ``fleetwatch agent --once
--json`` prints each (spread over lines).

Each line is a JSON object as the agent prints it: ``ts`` (epoch seconds), ``node``,
``cluster`` and ``rack`` (else ``--cluster``/``--rack``), ``gpus`` (each with ``index``,
``metrics`` by catalogue name in the catalogue's unit, ``job``, ``model``, ``xids``, and the
board: ``uuid`` and ``info``'s ``serial`` and ``pci_bus_id``), and ``host`` (``metrics``).
Other keys (``seq``, ``v``, a GPU's other ``info`` and its
``state``, the host's NIC and InfiniBand ``ports``) are not replayed: a GPU that fell off
the bus is read as the other layouts read it, from its samples stopping while the frames
still list it (the summary says how many port readings were passed over). Each frame is
replayed with the GPUs it lists, as live: a GPU the node stopped listing is absent. A line
that is not such an object, a metric the catalogue does not name or a value outside its
range is a bad row, as in the CSV layouts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fleetwatch.catalogue import catalogue
from fleetwatch.recorded_reading import Reading
from fleetwatch.recorded_values import _value, xid_code

BOARD_INFO = ("serial", "pci_bus_id")  # what of a GPU's ``info`` names its board
MAX_LINES = 100_000  # lines one object may span (a pretty-printed frame of 8 GPUs: ~450)


def is_frames(first_line: str) -> bool:
    """A file whose first line is a JSON object: the agent's frames."""
    return first_line.lstrip().startswith("{")


def _objects(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each JSON value: one a line, or spread over lines as
    ``agent --once --json`` prints one (an object that does not parse at a line's end is
    read on into the next lines, up to ``MAX_LINES``)."""
    buf, start = "", 0
    for n, line in enumerate(lines, 1):
        if not buf:
            if not line.strip():
                continue
            start = n
        buf += line
        try:
            json.loads(buf)
        except json.JSONDecodeError as exc:
            if exc.pos >= len(buf.rstrip()) and n - start < MAX_LINES:
                continue  # cut off at the line's end: the object goes on
        yield start, buf
        buf = ""
    if buf:
        yield start, buf


def read_frames(p: Path, lines: Iterable[str], out: Reading, skip: bool, cluster: str,
                rack: str) -> None:
    ports = 0
    for n, text in _objects(lines):
        try:
            frame = json.loads(text)
            if not isinstance(frame, dict):
                raise ValueError(f"a JSON {type(frame).__name__}, not a frame (an object)")
            ts, node = _ts(frame.get("ts")), frame.get("node")
            if not isinstance(node, str) or not node.strip():
                raise ValueError("node: missing or empty")
            gpus = [_gpu(g) for g in _list(frame.get("gpus", []), "gpus")]
            host = frame.get("host") or {}
            if not isinstance(host, dict):
                raise ValueError("host: not an object")
            host_metrics = _metrics(host.get("metrics") or {}, "host", None)
        except json.JSONDecodeError as exc:
            out.bad(f"{p} line {n + exc.lineno - 1}", f"not JSON: {exc.msg} (column "
                    f"{exc.colno})", skip)
            continue
        except ValueError as exc:
            out.bad(f"{p} line {n}", str(exc), skip)
            continue
        if out.too_late(ts, f"{p} line {n}"):
            continue
        node = out.place(node.strip(), str(frame.get("cluster") or cluster),
                         str(frame.get("rack") or rack))
        out.listed[(ts, node)] = frozenset(g[0] for g in gpus)
        for index, metrics, job, model, xids, board in gpus:
            if board is not None:
                out.board(ts, node, index, *board)
            if job:
                out.jobs[(ts, node, index)] = job
            if model:
                out.models[(node, index)] = model
            if xids:
                out.xids[(ts, node, index)].extend(xids)
            for metric, value in metrics.items():
                out.put(ts, node, index, metric, value)
        for metric, value in host_metrics.items():
            out.put(ts, node, None, metric, value)
        out.xid_channel = True  # an agent's frame lists its XIDs, none included
        ports += len(host.get("ports") or ())
    if ports:
        out.notes.append(f"{p.name}: {ports:,} NIC and InfiniBand port readings passed over "
                         "(replay reads GPU and host metrics)")


def _ts(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise ValueError(f"ts: {value!r} is not epoch seconds")
    return float(value)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: not a list")
    return value


def _gpu(g: Any) -> tuple[int, dict[str, float], str, str, list[int],
                         tuple[str, dict[str, str]] | None]:
    if not isinstance(g, dict):
        raise ValueError("gpus: an entry is not an object")
    index = g.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 1024:
        raise ValueError(f"gpus: index {index!r} is not a GPU index 0..1023")
    job, model = g.get("job") or "", g.get("model") or ""
    if not isinstance(job, str) or not isinstance(model, str):
        raise ValueError(f"GPU {index}: job and model must be text")
    xids = [xid_code(str(x)) for x in _list(g.get("xids") or [], f"GPU {index} xids")]
    return index, _metrics(g.get("metrics") or {}, "gpu", index), job, model, xids, _board(g)


def _board(g: dict[str, Any]) -> tuple[str, dict[str, str]] | None:
    """The board's UUID, serial and PCI bus id as the agent wrote them (None: no UUID)."""
    uuid, info = g.get("uuid"), g.get("info")
    if not isinstance(uuid, str) or not uuid.strip():
        return None
    info = info if isinstance(info, dict) else {}
    return uuid.strip(), {k: info[k] for k in BOARD_INFO if isinstance(info.get(k), str)}


def _metrics(raw: Any, scope: str, index: int | None) -> dict[str, float]:
    where = "host" if index is None else f"GPU {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} metrics: not an object")
    cat = catalogue()
    out = {}
    for name, value in raw.items():
        try:
            m = cat[name]
        except KeyError:
            raise ValueError(f"{where}: unknown metric {name!r}") from None
        if m.scope != scope:
            raise ValueError(f"{where}: {name} is a {m.scope} metric")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: value {value!r} of {name} is not a number")
        out[name] = _value(repr(float(value)), name)
    return out
