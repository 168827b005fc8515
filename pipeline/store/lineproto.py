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

from collections.abc import Iterable, Mapping
from math import isfinite
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
# Bound on each of FrameEncoder's caches (frame shapes, metric sets, device tags).
_MAX_TEMPLATES = 50_000

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
    """Complete lines of line protocol, ``\n`` between them (none after the last)."""

    body: bytes
    lines: int
    points: int


class FrameEncoder:
    """Frames to line protocol: one line per device and measurement of each frame.

    This is the processor's per-point hot path. A node sends frames of one
    shape over and over (the same devices, each with the same metric names in
    the same order), so each shape gets a template: the frame's lines as
    constant text with a slot before each number and each timestamp. A frame
    is then its numbers (one ``orjson.dumps`` of all of them, split at the
    commas) dropped into the slots and joined: one C-level call each, not a
    few per device. What a template cannot take (a non-finite value, a value
    orjson does not write, a device whose metrics span two measurements) goes
    line by line, with the same result.

    Tags are in key order, which InfluxDB recommends. Caches are bounded; one
    encoder serves one thread at a time.
    """

    def __init__(self, max_templates: int = _MAX_TEMPLATES) -> None:
        self._plans: dict[tuple[str, ...], list[tuple[str, list[str], list[int]]]] = {}
        self._tags: dict[tuple[str, str, str, str], str] = {}
        self._templates: dict[tuple[object, ...], _Template | None] = {}
        self._max_templates = max_templates

    def encode(self, frames: Iterable[Frame]) -> EncodedLines:
        """The frames' lines, in frame order and, within a frame, GPUs, host, ports."""
        texts: list[bytes] = []
        n_lines = n_points = 0
        templates, dumps = self._templates, orjson.dumps
        for f in frames:
            host = f.host
            shape = (f.cluster, f.rack, f.node, *[(g.index, *g.metrics) for g in f.gpus],
                     tuple(host.metrics), *[(p.name, *p.metrics) for p in host.ports])
            t = templates.get(shape, _MISSING)
            if t is _MISSING:
                t = self._template(f, shape)
            if t is not None:
                ts = round(f.ts * 1000)
                values: list[float] = []
                extend, append = values.extend, values.append
                for g in f.gpus:
                    if g.metrics:
                        extend(g.metrics.values())
                        append(ts)
                if host.metrics:
                    extend(host.metrics.values())
                    append(ts)
                for p in host.ports:
                    if p.metrics:
                        extend(p.metrics.values())
                        append(ts)
                # One check a frame: a NaN or inf anywhere makes the sum non-finite
                # (as, rarely, huge finite values do: the careful path sorts it out).
                if isfinite(sum(values)):
                    try:
                        t.parts[1::2] = dumps(values)[1:-1].split(b",")
                    except (TypeError, ValueError):  # a value orjson does not write
                        pass
                    else:
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

    def _template(self, f: Frame, shape: tuple[object, ...]) -> _Template | None:
        """The template of this frame's shape, or None if one line per device cannot do."""
        if len(self._templates) >= self._max_templates:
            self._templates.clear()
        devices = [(gpu_device(g.index), g.metrics) for g in f.gpus]
        devices.append(("host", f.host.metrics))
        devices += [(p.name, p.metrics) for p in f.host.ports]
        parts: list[bytes | None] = []
        n_lines = n_points = 0
        newline = ""  # before every line but the first
        for device, metrics in devices:
            if not metrics:
                continue
            plan = self._plan(tuple(metrics))
            if len(plan) != 1:
                self._templates[shape] = None
                return None
            measurement, keys, _ = plan[0]
            for i, key in enumerate(keys):
                head = (f"{newline}{measurement}{self._device_tags(f, device)} " if i == 0
                        else ",")
                parts += [f"{head}{key}".encode(), None]
            parts += [b" ", None]  # then the timestamp
            newline = "\n"
            n_lines += 1
            n_points += len(keys)
        t = self._templates[shape] = _Template(parts, n_lines, n_points)
        return t

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


class _Template:
    """A frame shape's lines: constant text at even positions, slots for numbers at odd ones."""

    __slots__ = ("parts", "lines", "points")

    def __init__(self, parts: list[bytes | None], lines: int, points: int) -> None:
        self.parts, self.lines, self.points = parts, lines, points


_MISSING = object()


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
