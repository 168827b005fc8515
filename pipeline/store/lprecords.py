"""Alerts, annotations and events as line protocol, and back from what a server returns.

Text is never a series label. Identity that is bounded and enumerable
(a rule, a cluster, a node, a device, an event's kind, code) goes into tags;
numbers go into fields; an event's value (a state name or a job id: one more
every job, unbounded) is a string field where the server keeps strings
(InfluxDB: a tag would add series for every job, and InfluxDB 1.x refuses
writes past ``max-series-per-database``), else a tag; free text (an alert's
message and action, an event's kernel-log line) goes into string fields
when the server keeps them (``text=True``: InfluxDB) and is left out
otherwise (VictoriaMetrics keeps numbers only: its parser reads a string
field as a number). What the reader gets instead is said where it reads.

Alerts are laid out from the fields of the ``Alert`` dataclass, so that a
field added to it travels without an edit here: text fields in
``ALERT_TAGS`` are tags, other text fields are string fields, numbers are
fields, and a ``Mapping[str, float]`` (``evidence``) is one field per key,
named ``<field>:<key>``, the key encoded where it holds a character some server
would misread (``field_key``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import urllib.parse
import zlib
from collections.abc import Collection, Mapping, Sequence
from math import isfinite
from typing import Any

from fleetwatch.pipeline.store.base import Alert, Annotation, Event, evidence_value, gpu_index
from fleetwatch.pipeline.store.lineproto import escape_tag, tags
from fleetwatch.xids import xid_text

ALERT_MEASUREMENT = "fleetwatch_alert"
ANNOTATION_MEASUREMENT = "fleetwatch_annotation"
EVENT_MEASUREMENT = "fleetwatch_event"
# Alert states as numbers: a field must be a number to live in VictoriaMetrics.
STATE_CODES = {"pending": 0, "firing": 1, "resolved": 2}
STATE_NAMES = {v: k for k, v in STATE_CODES.items()}
# The alert's identity and its bounded attributes: one series per alert life. The GPU board
# (uuid, serial, pci_bus_id) is named once per life, so as tags it adds no series, and
# VictoriaMetrics, which keeps no text fields, keeps it too.
ALERT_TAGS = ("id", "rule", "severity", "cluster", "rack", "node", "device", "uuid", "serial",
              "pci_bus_id", "teams")
EVENT_TAGS = ("kind", "cluster", "rack", "node", "device", "code", "value")
# A mapping field's keys become fields named "<field>:<key>" (":" is valid in metric names).
MAP_SEP = ":"


# A mapping's keys name places (``last_frame_ts.<node>``: any printable name an agent
# sends) and become field keys, which no server reads back exactly for every character:
# VictoriaMetrics takes a ``"`` among a line's fields as the start of a quoted value (the
# fields after it, or the whole line, are lost, answered with 204) and keeps a backslash
# before any other character; InfluxDB 1.x keeps every backslash. So these characters, and
# ``%``, are stored as ``%XX`` per UTF-8 byte and decoded on read (``field_key_text``); a key
# without them is stored as it is. Rows of releases before this encoding hold keys as they
# were, ``%`` included (``gpu%FF``, ``gpu%41``): a stored key is decoded only where it is
# what ``field_key`` writes, else read as stored (a key of those rows that happens to be
# what ``field_key`` writes, such as ``%25``, cannot be told apart and reads decoded).
_KEY_ENCODED = frozenset('%"\\,= ')


def field_key(key: str) -> str:
    """A mapping key as a field key that every line-protocol server reads back exactly."""
    if key.isprintable() and _KEY_ENCODED.isdisjoint(key):
        return key
    return "".join(c if c.isprintable() and c not in _KEY_ENCODED else
                   "".join(f"%{b:02X}" for b in c.encode()) for c in key)


def field_key_text(stored: str) -> str:
    """``field_key`` undone: the key that ``field_key`` stores as ``stored``, else (a key
    written before keys were encoded, such as ``gpu%FF`` or ``gpu%41``) ``stored`` as it
    is. Never raises."""
    if "%" not in stored:
        return stored
    try:
        key = urllib.parse.unquote(stored, errors="strict")
    except UnicodeDecodeError:  # %XX bytes that are no UTF-8: never written encoded
        return stored
    return key if field_key(key) == stored else stored


def _kind(annotation: object) -> str:
    """How a field of this (string) annotation is kept: ``mapping`` (of numbers), ``json``
    (a sequence), ``bool``, ``int``, ``float`` or ``text``."""
    text = str(annotation)
    if "Mapping" in text or "dict" in text:
        return "mapping"
    if any(t in text for t in ("tuple", "list", "Sequence", "set")):
        return "json"
    for kind in ("bool", "float", "int"):
        if kind in text:
            return kind
    return "text"


NUMBERS = ("bool", "int", "float")
# (name, kind) of each Alert field, in declaration order; state is a number (STATE_CODES).
ALERT_FIELDS: tuple[tuple[str, str], ...] = tuple(
    (f.name, "state" if f.name == "state" else _kind(f.type)) for f in dataclasses.fields(Alert))


def from_number(kind: str, value: float) -> bool | int | float:
    return bool(value) if kind == "bool" else int(value) if kind == "int" else float(value)


def _number(v: float) -> str:
    return repr(float(v))


def quote(text: str) -> str:
    """A string field value: ``"`` and ``\\`` escaped (both servers unescape them);
    a newline, which line protocol cannot carry, becomes a space."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace(
        "\n", " ").replace("\r", " ") + '"'


def _join_fields(fields: list[tuple[str, str]], v1: bool) -> str:
    return ",".join(f"{escape_tag(k, v1)}={v}" for k, v in fields)


def alert_line(a: Alert, text: bool = False, v1: bool = False) -> str:
    """One alert state as a line at ``updated_ts``.

    Tags: ``ALERT_TAGS``. Fields: state (``STATE_CODES``), every number
    (a NaN or an unset one left out), ``evidence:<key>`` per evidence
    value, and with ``text`` the message and action as string fields. The
    state is a field, so an alert stays one series through its life; a
    reader takes, per (cluster, id), the row with the newest updated_ts.
    """
    fields: list[tuple[str, str]] = []
    tag_pairs: list[tuple[str, str]] = []
    for name, kind in ALERT_FIELDS:
        value = getattr(a, name)
        if name in ALERT_TAGS:  # teams: fixed for the alert's life, Alertmanager's label,
            # kept where text is not (VictoriaMetrics), comma-joined (a name holds no comma)
            tag_pairs.append((name, ",".join(value) if kind == "json" else str(value)))
        elif kind == "state":
            fields.append((name, _number(STATE_CODES[value])))
        elif kind in NUMBERS:
            if value is not None and isfinite(value):
                fields.append((name, _number(value)))
        elif kind == "mapping":
            fields += [(f"{name}{MAP_SEP}{field_key(k)}", _number(v)) for k, v in value.items()
                       if v is not None and isfinite(v)]
        elif text and value:  # text, or a sequence as JSON text
            fields.append((name, quote(json.dumps(list(value)) if kind == "json" else value)))
    return (f"{ALERT_MEASUREMENT}{tags(sorted(tag_pairs), v1)} {_join_fields(fields, v1)} "
            f"{round(a.updated_ts * 1000)}")


def alert_from(labels: Mapping[str, str], numbers: Mapping[str, float],
               texts: Mapping[str, str] | None = None) -> Alert:
    """An ``Alert`` back from its tags, number fields and (where kept) string fields.

    Without the text (VictoriaMetrics) the message is rendered from the
    structured fields (``render_message``) and other text is empty.
    """
    texts = texts or {}
    kw: dict[str, Any] = {}
    defaults = {f.name: f for f in dataclasses.fields(Alert)}
    for name, kind in ALERT_FIELDS:
        if name in ALERT_TAGS:
            tag = labels.get(name, "")
            kw[name] = tuple(x for x in tag.split(",") if x) if kind == "json" else tag
        elif kind == "state":
            kw[name] = STATE_NAMES.get(int(numbers.get("state", 0)), "pending")
        elif kind in NUMBERS:
            value = numbers.get(name)
            if value is not None and not math.isnan(value):
                kw[name] = from_number(kind, value)
            elif defaults[name].default is dataclasses.MISSING:
                kw[name] = math.nan
        elif kind == "mapping":
            prefix = f"{name}{MAP_SEP}"
            kw[name] = {field_key_text(k[len(prefix):]): v for k, v in sorted(numbers.items())
                        if k.startswith(prefix)}
        elif kind == "json":
            if texts.get(name):
                kw[name] = sequence_of(defaults[name].type, json.loads(texts[name]))
        else:
            kw[name] = texts.get(name, "")
    if "started_ts" in kw and math.isnan(kw["started_ts"]):
        kw["started_ts"] = kw.get("updated_ts", math.nan)
    alert = Alert(**kw)
    if not texts.get("message"):
        alert = dataclasses.replace(alert, message=render_message(alert))
    if not texts.get("action") and _xid_gpu(alert) is not None and "xid" in alert.evidence:
        # The XID table's action for the worst code, as the detector chose it.
        alert = dataclasses.replace(alert, action=xid_text("", 0, alert.evidence)[1])
    return alert


def sequence_of(annotation: object, items: list[Any]) -> Any:
    """A JSON list back as the field's own sequence type."""
    text = str(annotation)
    return tuple(items) if "tuple" in text or "Sequence" in text else (
        set(items) if "set" in text else items)


def render_message(a: Alert) -> str:
    """What a backend without text gives for an alert's message: its rule, place, value
    and evidence, e.g. ``gpu_temp on node-0 gpu3: 92.5 (gpu_temp_c=92.5, limit_c=85)``;
    a time in the evidence in UTC. An XID alert's is the detector's own, rebuilt from
    the XID table: ``GPU 3 on node-0: XID 48 (Double-bit ECC error) 3x, ...``."""
    gpu = _xid_gpu(a)
    if gpu is not None and "xid" in a.evidence:
        return xid_text(a.node, gpu, a.evidence)[0]
    where = " ".join(x for x in (a.node, a.device) if x)
    evidence = ", ".join(f"{k}={evidence_value(k, v)}" for k, v in a.evidence.items())
    value = "" if math.isnan(a.value) else f": {a.value:g}"
    return f"{a.rule} on {where}{value}" + (f" ({evidence})" if evidence else "")


def _xid_gpu(a: Alert) -> int | None:
    """The GPU of an XID alert (rule ``gpu_xid_*``), None for any other alert."""
    return gpu_index(a.device) if a.rule.startswith("gpu_xid_") else None


def annotation_line(a: Annotation, v1: bool = False) -> str:
    """One annotation as a line at ``start_ts``; tags kind, cluster (none where ""),
    node, device, text.

    Annotations are few (a fault the simulator injected, a maintenance
    window) and their text is their label on a dashboard, so it stays a
    tag. Their identity (kind, start, cluster, node, device) maps to one series and
    one timestamp, so writing one again lands on the same sample.
    """
    fields = [(k, _number(v)) for k, v in (("start_ts", a.start_ts), ("end_ts", a.end_ts))
              if v is not None and isfinite(v)]
    tag_text = tags((("cluster", a.cluster), ("kind", a.kind), ("node", a.node),
                     ("device", a.device), ("text", a.text)), v1)
    return f"{ANNOTATION_MEASUREMENT}{tag_text} {_join_fields(fields, v1)} " \
           f"{round(a.start_ts * 1000)}"


def event_line(e: Event, text: bool = False, v1: bool = False) -> str:
    """One event as a line at its time: in ms, or with ``text`` in ns (``EVENT_PRECISION``).

    Tags: kind, cluster, rack, node, device, code (left out when 0). Field
    ``ts``: the time in seconds, as given. The value (a state name or a job
    id; left out when empty): with ``text`` (InfluxDB), a string field, and
    the point stamped within its millisecond at a nanosecond offset drawn
    from the value, so that two values at one ms (two jobs starting on a
    GPU) stay two points; without (VictoriaMetrics), a tag. With ``text``
    the free text as a string field too. The identity (tags and timestamp)
    is one sample, so a rewrite is idempotent wherever writes of the same
    sample are.
    """
    fields = [("ts", _number(e.ts))]
    if text and e.text:
        fields.append(("text", quote(e.text)))
    if text and e.value:
        fields.append(("value", quote(e.value)))
    tag_pairs = (("cluster", e.cluster), ("code", str(e.code) if e.code else ""),
                 ("device", e.device), ("kind", e.kind), ("node", e.node), ("rack", e.rack),
                 ("value", "" if text else e.value))
    ms = round(e.ts * 1000)
    stamp = ms * 1_000_000 + value_offset_ns(e.value) if text else ms
    return f"{EVENT_MEASUREMENT}{tags(tag_pairs, v1)} {_join_fields(fields, v1)} {stamp}"


def event_precision(text: bool) -> str:
    """The precision of ``event_line``'s timestamps."""
    return "ns" if text else "ms"


def value_offset_ns(value: str) -> int:
    """Where within its millisecond an event of this value is stamped (0 for none): the
    same on every processor and release, so a rewrite lands on the same point."""
    return zlib.crc32(value.encode()) % 1_000_000 if value else 0


def event_from(labels: Mapping[str, str], ts: float, text: str = "",
               value: str | None = None) -> Event:
    """An event back from its tags; ``value``: its value field (InfluxDB), else the tag
    (VictoriaMetrics, and InfluxDB rows written before the value became a field)."""
    return Event(ts=ts, kind=labels.get("kind", ""), cluster=labels.get("cluster", ""),
                 rack=labels.get("rack", ""), node=labels.get("node", ""),
                 device=labels.get("device", ""), code=int(labels.get("code") or 0),
                 value=value or labels.get("value", ""), text=text)


def event_key(e: Event) -> tuple[object, ...]:
    """What makes an event itself: the same key written twice is one event."""
    return (round(e.ts * 1000), e.kind, e.cluster, e.rack, e.node, e.device, e.code, e.value)


def select_events(events: list[Event], start_ts: float, end_ts: float, node: str | None,
                  kinds: Sequence[str] | None, device: str | None,
                  except_xids: Collection[int] = ()) -> list[Event]:
    """Events in [start, end) matching the filters, one per ``event_key``, oldest first."""
    found: dict[tuple[object, ...], Event] = {}
    for e in events:
        if (start_ts <= e.ts < end_ts and (node is None or e.node == node)
                and (device is None or e.device == device)
                and (kinds is None or e.kind in kinds)
                and not (e.kind == "xid" and e.code in except_xids)):
            key = event_key(e)
            if key not in found or (e.text and not found[key].text):
                found[key] = e
    return sorted(found.values(),
                  key=lambda e: (e.ts, e.node, e.device, e.kind, e.code, e.value))
