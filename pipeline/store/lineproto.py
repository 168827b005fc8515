"""Store records as InfluxDB line protocol, laid out so VictoriaMetrics names them back exactly.

A metric splits at its first underscore into measurement and field:
``gpu_temp_c`` is measurement ``gpu``, field ``temp_c``. VictoriaMetrics
names an InfluxDB field ``{measurement}_{field}``, so the series it keeps is
``gpu_temp_c{cluster,rack,node,device}``, our catalogue name, and an
InfluxDB 2.x/3.x user sees the natural ``gpu`` measurement with one field per
metric. All metrics of one device at one instant share a line: ~3x
fewer bytes (and server-side parse work) than a line per point.

Alerts, annotations and events are lines too: see ``lprecords``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from math import isfinite
from operator import itemgetter
from typing import NamedTuple

import orjson

from fleetwatch.config import StoreConfig
from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import Store, gpu_device

# VictoriaMetrics' default -influxMeasurementFieldSeparator.
SEPARATOR = "_"
# Bound on each of FrameEncoder's caches (nodes' templates, metric sets, device tags,
# field keys). A node of 8 GPUs costs ~12 KB (measured), so 20,000 nodes (160,000
# GPUs, several processors' worth) stay under 250 MB.
_MAX_TEMPLATES = 20_000

# Line protocol's escapes (InfluxDB's line-protocol reference, "special characters"):
# comma, equals sign and space in tag keys, tag values and field keys; comma and space in
# measurements; and the backslash itself, which VictoriaMetrics' parser
# (lib/protoparser/influx, unescapeTagValue) reads back as one backslash. Without that,
# a node named ``x\,evil\=1`` became a label ``evil`` and a name ending in a backslash
# swallowed the next tag. Newlines cannot be escaped; the codec admits printable names
# only, so none reach here (one that did would become a space).
_TAG_ESCAPES = str.maketrans({"\\": "\\\\", ",": r"\,", "=": r"\=", " ": r"\ ",
                              "\n": r"\ ", "\r": r"\ "})
_MEASUREMENT_ESCAPES = str.maketrans({"\\": "\\\\", ",": r"\,", " ": r"\ ",
                                      "\n": r"\ ", "\r": r"\ "})
# InfluxDB 1.x (models/points.go through 1.8) keeps a backslash as it is, unescaping only
# ``\,``, ``\=`` and ``\ ``: there a backslash must not be doubled, and a name ending in
# one cannot be written at all (``v1_unwritable`` finds those before they are sent).
_V1_TAG_ESCAPES = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ ", "\n": r"\ ",
                                 "\r": r"\ "})
_V1_MEASUREMENT_ESCAPES = str.maketrans({",": r"\,", " ": r"\ ", "\n": r"\ ", "\r": r"\ "})


def split_metric(metric: str) -> tuple[str, str]:
    """``gpu_temp_c`` → (``gpu``, ``temp_c``). Every catalogue name has a scope prefix."""
    measurement, sep, field = metric.partition(SEPARATOR)
    if not sep or not measurement or not field:
        raise ValueError(f"metric {metric!r} has no '<scope>_' prefix: it cannot be split "
                         "into measurement and field so that VictoriaMetrics names it back")
    return measurement, field


def escape_tag(text: str, v1: bool = False) -> str:
    """Escape a tag key, tag value or field key (newlines cannot be escaped: they become spaces).

    ``v1``: for InfluxDB 1.x, which keeps backslashes as they are (see ``_V1_TAG_ESCAPES``).
    """
    return text.translate(_V1_TAG_ESCAPES if v1 else _TAG_ESCAPES)


def escape_measurement(text: str, v1: bool = False) -> str:
    return text.translate(_V1_MEASUREMENT_ESCAPES if v1 else _MEASUREMENT_ESCAPES)


def v1_unwritable(text: str) -> bool:
    """Whether InfluxDB 1.x cannot carry this name exactly in line protocol: it ends in a
    backslash (refused as "invalid tag format") or has one before a character that must be
    escaped (read back with one backslash less)."""
    return text.endswith("\\") or any(f"\\{c}" in text for c in ", =")


def tags(pairs: Iterable[tuple[str, str]], v1: bool = False) -> str:
    """``,k=v,...``; empty values are left out, as line protocol has no empty tag value."""
    return "".join(f",{escape_tag(k, v1)}={escape_tag(v, v1)}" for k, v in pairs if v)


class EncodedLines(NamedTuple):
    """Complete lines of line protocol, ``\\n`` between them (none after the last)."""

    body: bytes
    lines: int
    points: int


class FrameEncoder:
    """Frames to line protocol: one line per device and measurement of each frame.

    This is the processor's per-point hot path. A node sends frames of one
    shape over and over (the same devices with the same metrics), so each node
    gets a template: its frame's lines as constant text with a slot before
    each number and each timestamp. A frame is then its numbers, gathered
    device by device in the template's order (which checks that the frame
    still has the template's shape), written by one ``orjson.dumps``, split
    at the commas, dropped into the slots and joined. A frame of a new shape
    gets a new template; a frame with a value the template cannot take (NaN,
    inf, one orjson does not write) goes line by line, with the same result.

    Tags are in key order, which InfluxDB recommends. Caches are bounded; one
    encoder serves one thread at a time.
    """

    def __init__(self, max_templates: int = _MAX_TEMPLATES, v1: bool = False) -> None:
        # v1: InfluxDB 1.x's escaping (a backslash stays single); else the spec's.
        self._v1 = v1
        self._plans: dict[tuple[str, ...], list[tuple[str, list[str], list[int]]]] = {}
        self._tags: dict[tuple[str, str, str, str], str] = {}
        self._templates: dict[tuple[str, str, str], _Template] = {}
        self._fields: dict[str, bytes] = {}
        self._max_templates = max_templates

    def encode(self, frames: Iterable[Frame]) -> EncodedLines:
        """The frames' lines, in frame order and, within a frame, GPUs, host, ports."""
        texts: list[bytes] = []
        n_lines = n_points = 0
        templates, dumps = self._templates, orjson.dumps
        for f in frames:
            ts = round(f.ts * 1000)
            t = templates.get((f.cluster, f.rack, f.node))
            values = None if t is None else t.values(f, ts)
            if values is None:  # a new node, or a new shape
                t = self._template(f)
                values = t.values(f, ts)
            # One check a frame: a NaN or inf anywhere makes the sum non-finite
            # (as, rarely, huge finite values do: the careful path sorts it out).
            if values is not None and isfinite(sum(values)):
                try:
                    t.parts[1::2] = dumps(values)[1:-1].split(b",")
                except (TypeError, ValueError):  # a value orjson does not write
                    pass
                else:
                    if t.lines:
                        texts.append(b"".join(t.parts))
                        n_lines += t.lines
                        n_points += t.points
                    continue
            lines: list[str] = []
            n_points += self._frame_lines(f, lines)
            if lines:
                texts.append("\n".join(lines).encode())
                n_lines += len(lines)
        return EncodedLines(b"\n".join(texts), n_lines, n_points)

    def _template(self, f: Frame) -> _Template:
        """A template of this frame's shape, now its node's."""
        if len(self._templates) >= self._max_templates:
            self._templates.clear()
        parts: list[bytes | None] = []
        n_lines = n_points = 0
        newline = ""  # before every line but the first

        def device(name: str, metrics: Mapping[str, float]) -> _Getter | None:
            nonlocal n_lines, n_points, newline
            if not metrics:
                return None
            names = tuple(metrics)
            order: list[str] = []
            for measurement, keys, index in self._plan(names):
                for i, key in enumerate(keys):
                    if i == 0:
                        text = f"{newline}{measurement}{self._device_tags(f, name)} {key}"
                        parts.extend((text.encode(), None))
                    else:  # ",field=", one bytes object shared by every template
                        parts.extend((self._fields.get(key) or self._field(key), None))
                parts.extend((b" ", None))  # then the timestamp
                newline = "\n"
                n_lines += 1
                order += [names[i] for i in index]
            n_points += len(names)
            return itemgetter(*order) if len(order) > 1 else _one(order[0])

        gpus = [(g.index, len(g.metrics), device(gpu_device(g.index), g.metrics))
                for g in f.gpus]
        host = (len(f.host.metrics), device("host", f.host.metrics))
        ports = [(p.name, len(p.metrics), device(p.name, p.metrics)) for p in f.host.ports]
        t = self._templates[f.cluster, f.rack, f.node] = _Template(
            parts, n_lines, n_points, gpus, host, ports)
        return t

    def _field(self, key: str) -> bytes:
        if len(self._fields) >= self._max_templates:
            self._fields.clear()
        # ``key`` is already escaped (it comes from ``_plan``).
        text = self._fields[key] = f",{key}".encode()
        return text

    def _plan(self, names: tuple[str, ...]) -> list[tuple[str, list[str], list[int]]]:
        plan = self._plans.get(names)
        if plan is not None:
            return plan
        if len(self._plans) >= self._max_templates:
            self._plans.clear()
        groups: dict[str, tuple[list[str], list[int]]] = {}
        for i, name in enumerate(names):
            measurement, field = split_metric(name)
            keys, index = groups.setdefault(escape_measurement(measurement, self._v1), ([], []))
            keys.append(escape_tag(field, self._v1) + "=")
            index.append(i)
        plan = self._plans[names] = [(m, keys, index) for m, (keys, index) in groups.items()]
        return plan

    def _device_tags(self, f: Frame, device: str) -> str:
        key = (f.cluster, f.rack, f.node, device)
        text = self._tags.get(key)
        if text is None:
            if len(self._tags) >= self._max_templates:
                self._tags.clear()
            text = self._tags[key] = tags((("cluster", f.cluster), ("device", device),
                                           ("node", f.node), ("rack", f.rack)), self._v1)
        return text

    def _frame_lines(self, f: Frame, out: list[str]) -> int:
        """The careful path: one frame, line by line; returns its points."""
        ts = f" {round(f.ts * 1000)}"
        n = 0
        for g in f.gpus:
            n += self._device(out, self._device_tags(f, gpu_device(g.index)), g.metrics, ts)
        if f.host.metrics:
            n += self._device(out, self._device_tags(f, "host"), f.host.metrics, ts)
        for p in f.host.ports:
            n += self._device(out, self._device_tags(f, p.name), p.metrics, ts)
        return n

    def _device(self, out: list[str], tag_text: str, metrics: Mapping[str, float],
                ts: str) -> int:
        # Line protocol cannot carry a NaN or inf; the codec rejects them anyway.
        finite = {k: v for k, v in metrics.items() if isfinite(v)}
        if not finite:
            return 0
        values = list(finite.values())
        texts = _numbers(values)
        for measurement, keys, index in self._plan(tuple(finite)):
            text = ",".join(map(str.__add__, keys, (texts[i] for i in index)))
            out.append(f"{measurement}{tag_text} {text}{ts}")
        return len(values)


_Getter = Callable[[Mapping[str, float]], tuple[float, ...]]


class _Template:
    """A node's lines: constant text at even positions of ``parts``, slots at odd ones;
    and, per device, how many metrics it has and how to get them in slot order."""

    __slots__ = ("parts", "lines", "points", "gpus", "host", "ports")

    def __init__(self, parts: list[bytes | None], lines: int, points: int,
                 gpus: list[tuple[int, int, _Getter | None]],
                 host: tuple[int, _Getter | None],
                 ports: list[tuple[str, int, _Getter | None]]) -> None:
        self.parts, self.lines, self.points = parts, lines, points
        self.gpus, self.host, self.ports = gpus, host, ports

    def values(self, f: Frame, ts: int) -> list[float] | None:
        """The frame's numbers in slot order, or None if the frame has another shape.

        Same devices, each with as many metrics as the template's, each one of
        them found: the same metrics (in any order).
        """
        gpus, ports = f.gpus, f.host.ports
        if len(gpus) != len(self.gpus) or len(ports) != len(self.ports):
            return None
        values: list[float] = []
        extend, append = values.extend, values.append
        try:
            for g, (index, n, get) in zip(gpus, self.gpus):
                if g.index != index or len(g.metrics) != n:
                    return None
                if get is not None:
                    extend(get(g.metrics))
                    append(ts)
            n, get = self.host
            if len(f.host.metrics) != n:
                return None
            if get is not None:
                extend(get(f.host.metrics))
                append(ts)
            for p, (name, n, get) in zip(ports, self.ports):
                if p.name != name or len(p.metrics) != n:
                    return None
                if get is not None:
                    extend(get(p.metrics))
                    append(ts)
        except KeyError:  # a metric the template does not have
            return None
        return values


def _one(name: str) -> _Getter:
    return lambda metrics: (metrics[name],)




def _numbers(values: list[float]) -> list[str]:
    """Each value as the shortest text that reads back to the same double.

    orjson writes a device's values in one call, ~3x faster than ``repr`` of
    each (the processor's single largest cost per point): ``71.0``, ``0.25``,
    ``1e+16``, ``1e-7``, all valid line-protocol floats. A value orjson does
    not take (a numpy scalar, an int beyond 64 bits) falls back to ``repr``.
    """
    try:
        return orjson.dumps(values)[1:-1].decode().split(",")
    except TypeError:  # orjson.JSONEncodeError is one
        return [repr(float(v)) for v in values]


def open_lineproto_store(config: StoreConfig) -> Store:
    """The store for ``store.kind`` ``victoriametrics`` or ``influx`` (InfluxDB 1.x, 2.x,
    3.x: ``store.influx_api`` picks the write API, by default from the server's /ping)."""
    from fleetwatch.pipeline.store.influxql import InfluxQLStore
    from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore

    token = config.token.reveal()
    if config.kind == "victoriametrics":
        return VictoriaMetricsStore(config.url, org=config.org, bucket=config.bucket,
                                    token=token)
    return InfluxQLStore(config.url, org=config.org, bucket=config.bucket, token=token,
                         api=config.influx_api)
