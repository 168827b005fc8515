"""Store records as InfluxDB line protocol, laid out so VictoriaMetrics names them back exactly.

A metric splits at its first underscore into measurement and field:
``gpu_temp_c`` is measurement ``gpu``, field ``temp_c``. VictoriaMetrics
names an InfluxDB field ``{measurement}_{field}``, so the series it keeps is
``gpu_temp_c{cluster,rack,node,device}``, our catalogue name, and an
InfluxDB 2.x/3.x user sees the natural ``gpu`` measurement with one field per
metric. All metrics of one device at one instant share a line: ~3x
fewer bytes (and server-side parse work) than a line per point.

Alerts and annotations carry text, which a time-series server can only keep
in tags (labels), so each is a line whose identity and text are tags and
whose numbers are fields; see ``alert_line`` and ``annotation_line``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from math import isfinite
from operator import itemgetter
from typing import NamedTuple

import orjson

from fleetwatch.config import StoreConfig
from fleetwatch.frame import Frame
from fleetwatch.pipeline.store.base import Alert, Annotation, Store, gpu_device

ALERT_MEASUREMENT = "fleetwatch_alert"
ANNOTATION_MEASUREMENT = "fleetwatch_annotation"
# VictoriaMetrics' default -influxMeasurementFieldSeparator.
SEPARATOR = "_"
# Alert states as numbers: a field must be a number to live in VictoriaMetrics.
STATE_CODES = {"pending": 0, "firing": 1, "resolved": 2}
STATE_NAMES = {v: k for k, v in STATE_CODES.items()}
# Bound on each of FrameEncoder's caches (nodes' templates, metric sets, device tags,
# field keys). A node of 8 GPUs costs ~12 KB (measured), so 20,000 nodes (160,000
# GPUs, several processors' worth) stay under 250 MB.
_MAX_TEMPLATES = 20_000

_TAG_ESCAPES = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ ", "\n": r"\ ", "\r": r"\ "})
_MEASUREMENT_ESCAPES = str.maketrans({",": r"\,", " ": r"\ ", "\n": r"\ ", "\r": r"\ "})


def split_metric(metric: str) -> tuple[str, str]:
    """``gpu_temp_c`` → (``gpu``, ``temp_c``). Every catalogue name has a scope prefix."""
    measurement, sep, field = metric.partition(SEPARATOR)
    if not sep or not measurement or not field:
        raise ValueError(f"metric {metric!r} has no '<scope>_' prefix: it cannot be split "
                         "into measurement and field so that VictoriaMetrics names it back")
    return measurement, field


def escape_tag(text: str) -> str:
    """Escape a tag key, tag value or field key (newlines cannot be escaped: they become spaces)."""
    return text.translate(_TAG_ESCAPES)


def tags(pairs: Iterable[tuple[str, str]]) -> str:
    """``,k=v,...``; empty values are left out, as line protocol has no empty tag value."""
    return "".join(f",{escape_tag(k)}={escape_tag(v)}" for k, v in pairs if v)


def _fields(**values: float | None) -> str:
    """``k=v,...`` of the values that are set and finite (a NaN would get the line refused)."""
    # repr is the shortest text that reads back to the same double.
    return ",".join(f"{k}={float(v)!r}" for k, v in values.items()
                    if v is not None and isfinite(v))


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

    def __init__(self, max_templates: int = _MAX_TEMPLATES) -> None:
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
            keys, index = groups.setdefault(measurement.translate(_MEASUREMENT_ESCAPES), ([], []))
            keys.append(escape_tag(field) + "=")
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
                                           ("node", f.node), ("rack", f.rack)))
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


def alert_line(a: Alert) -> str:
    """One alert state as a line at ``updated_ts``.

    Tags: id, rule, severity, cluster, rack, node, device, message. Fields:
    state (``STATE_CODES``), started_ts, updated_ts, value, and fired_ts /
    resolved_ts when set. The state is a field, not a tag, so an alert stays
    one series through its life (a new series only when its message or
    severity changes); a reader takes, per id, the row with the newest
    updated_ts.
    """
    fields = _fields(state=STATE_CODES[a.state], started_ts=a.started_ts,
                     updated_ts=a.updated_ts, value=a.value, fired_ts=a.fired_ts,
                     resolved_ts=a.resolved_ts)
    tag_text = tags((("id", a.id), ("rule", a.rule), ("severity", a.severity),
                     ("cluster", a.cluster), ("rack", a.rack), ("node", a.node),
                     ("device", a.device), ("message", a.message)))
    return f"{ALERT_MEASUREMENT}{tag_text} {fields} {round(a.updated_ts * 1000)}"


def annotation_line(a: Annotation) -> str:
    """One annotation as a line at ``start_ts``; tags kind, node, device, text.

    Its identity (kind, start, node, device) maps to one series and one
    timestamp, so writing it again (e.g. once more with its end) lands on the
    same sample, which the server's dedup keeps once.
    """
    fields = _fields(start_ts=a.start_ts, end_ts=a.end_ts)
    tag_text = tags((("kind", a.kind), ("node", a.node), ("device", a.device),
                     ("text", a.text)))
    return f"{ANNOTATION_MEASUREMENT}{tag_text} {fields} {round(a.start_ts * 1000)}"


def open_lineproto_store(config: StoreConfig) -> Store:
    """The store for ``store.kind`` ``victoriametrics`` or ``influx`` (InfluxDB 2.x/3.x)."""
    from fleetwatch.pipeline.store.influxql import InfluxQLStore
    from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore

    cls = VictoriaMetricsStore if config.kind == "victoriametrics" else InfluxQLStore
    return cls(config.url, org=config.org, bucket=config.bucket, token=config.token.reveal())
