"""The one encoder and the one decoder of ``Frame``.

Wire form: MessagePack of a positional array, metrics keyed by their
catalogue id (stable, append-only), so a frame of 8 GPUs is ~1.5 KB before
the bus compresses it. ``decode`` is the only place that judges input: it
raises ``FrameError`` naming the field for anything malformed, of an unknown
version or too large. A reading that is well formed but non-finite or outside
its metric's possible range (a glitching sensor or counter) is no reason to
lose the node's other readings: it is left out of the frame and named in
``Decoder.dropped``, and the rest of the frame is decoded as usual. So is a number
keyed by a metric id this catalogue does not have (an agent of a later release that
measures more, ``Decoder.unknown``): forward compatibility, so that agents upgraded
before the processors keep their frames; a value of such an id that is no number, or
a key that is no id, is still malformed.

    [v, cluster, rack, node, ts, seq, [gpu...], [host_metrics, [port...]]]
    gpu  = [index, uuid, model, job|nil, state(0 ok, 1 lost), {id: value}, [xid...], {info}]
    port = [name, kind(0 nic, 1 ib), {id: value}]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgpack

from fleetwatch.catalogue import Catalogue, catalogue
from fleetwatch.frame import (
    FRAME_VERSION,
    Frame,
    GpuReading,
    HostReading,
    PortReading,
    gpu_reading,
)
from fleetwatch.frame_checks import (
    MAX_QUOTE,
    FrameError,
    check_array,
    check_number,
    check_owners,
    check_text,
    check_xids,
    cut,
    not_messagepack,
    place,
    quote,
    shortened,
    tname,
)

MAX_FRAME_BYTES = 1 << 20
MAX_GPUS = 64
MAX_PORTS = 256
MAX_INFO = 16
# 2000-01-01 .. 2100-01-01: a timestamp outside this is a clock or unit bug.
MIN_TS, MAX_TS = 946_684_800.0, 4_102_444_800.0

# A bound on the decoder's known-good strings, should names churn without end.
_MAX_GOOD = 100_000
# Metric ids a later release may have added: wire ids are small non-negative integers;
# a key outside this is no id at all, and the frame malformed.
_MAX_ID = 1 << 31

# Names that are a path's "this" or "parent" segment: a node or job page's address cannot
# hold them (a browser resolves /node/.. to /, even written %2E%2E), so no page opens.
_DOTS = frozenset((".", ".."))
_DOTS_SAID = ("must not be '.' or '..' (no dashboard page can be addressed by it); "
              "name it otherwise on the agent")



def check_node(node: str) -> None:
    """A node name (a text already) no dashboard page can be addressed by: refused."""
    if node in _DOTS:
        raise FrameError("node", _DOTS_SAID)


def check_names(cluster: Any, rack: Any, node: Any) -> None:
    """A frame's cluster, rack and node as the decoder judges them (``FrameError`` for the
    first it refuses): what an agent checks its names by at start, so that it does not
    send frames every processor dead-letters."""
    for value, where in ((cluster, "cluster"), (rack, "rack"), (node, "node")):
        check_text(value, where)
    check_node(node)


_STATES = ("ok", "lost")
_PORT_KINDS = ("nic", "ib")


class Encoder:
    def __init__(self, cat: Catalogue | None = None) -> None:
        self._cat = cat or catalogue()
        self._ids = {m.name: m.id for m in self._cat.metrics}
        self._packer = msgpack.Packer(use_bin_type=True)

    def _metrics(self, metrics: Mapping[str, float]) -> dict[int, float]:
        ids = self._ids
        return {ids[name]: value for name, value in metrics.items()}

    def encode(self, frame: Frame) -> bytes:
        gpus = [
            [g.index, g.uuid, g.model, g.job, _STATES.index(g.state),
             self._metrics(g.metrics), list(g.xids), dict(g.info)]
            for g in frame.gpus
        ]
        ports = [[p.name, _PORT_KINDS.index(p.kind), self._metrics(p.metrics)]
                 for p in frame.host.ports]
        body = [frame.v, frame.cluster, frame.rack, frame.node, frame.ts, frame.seq,
                gpus, [self._metrics(frame.host.metrics), ports]]
        return self._packer.pack(body)


class Decoder:
    """Decodes and validates frames.

    Every check runs on every frame, but strings that repeat frame after
    frame (names, uuids, models, jobs, info) are checked once: one that has
    passed ``_text`` is known good, a set lookup. What fails a quick check
    takes the careful path, which names what is wrong.
    """

    def __init__(self, cat: Catalogue | None = None, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self._cat = cat or catalogue()
        self._max_bytes = max_bytes
        self._by_scope: dict[str, dict[int, tuple[str, float, float]]] = {
            scope: {m.id: (m.name, m.min, m.max) for m in self._cat.metrics if m.scope == scope}
            for scope in ("gpu", "host", "port")}
        self._good: set[str] = set()  # strings that passed _text
        # (field, why) of each reading left out of the last frame decoded: non-finite or
        # outside its metric's possible range. Empty for nearly every frame.
        self.dropped: list[tuple[str, str]] = []
        # (scope, id) of each metric of the last frame decoded whose id this catalogue
        # lacks (a later agent's), left out. Empty unless agents are newer.
        self.unknown: list[tuple[str, int]] = []

    def decode(self, data: bytes | None) -> Frame:
        """The frame in ``data``; ``FrameError`` (and only that) for anything malformed.
        Impossible readings are left out of it and listed in ``self.dropped``."""
        if self.dropped:
            self.dropped = []
        if self.unknown:
            self.unknown = []
        try:
            return self._decode(data)
        except FrameError:
            raise
        except Exception as exc:  # noqa: BLE001 - a check that missed a shape: still bad input
            # Every shape the checks below do not foresee (an unhashable map
            # value, a nested type where a scalar belongs) is the sender's
            # fault, not the processor's: judged as a bad frame like the rest.
            raise FrameError("", f"malformed frame ({type(exc).__name__}: "
                             f"{cut(str(exc), MAX_QUOTE)})") from None

    def _decode(self, data: bytes | None) -> Frame:
        if data is None:
            raise FrameError("", "null value (a Kafka tombstone): a frame is never empty")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise FrameError("", f"expected bytes, got {type(data).__name__}")
        if len(data) > self._max_bytes:
            raise FrameError("", f"frame is {len(data)} bytes, over the limit of {self._max_bytes}")
        if not data:
            raise FrameError("", "empty message")
        try:
            body = msgpack.unpackb(data, raw=False, strict_map_key=False,
                                   max_array_len=4096, max_map_len=4096)
        except Exception as exc:  # msgpack raises several unrelated types
            raise FrameError("", not_messagepack(data) or "not a MessagePack frame (truncated "
                             f"or corrupt): {cut(str(exc), MAX_QUOTE)}") from None
        if not isinstance(body, list):
            raise FrameError("", not_messagepack(data)
                             or f"top level must be an array, got {tname(body)}")
        if len(body) < 1 or body[0] != FRAME_VERSION:
            version = body[0] if body else None
            raise FrameError("v", f"unknown frame version {quote(version)} (this reader "
                             f"knows {FRAME_VERSION}); upgrade the processors before the "
                             "agents")
        if len(body) != 8:
            raise FrameError("", f"a v{FRAME_VERSION} frame has 8 fields, this one has {len(body)}")
        _, cluster, rack, node, ts, seq, gpus, host = body
        if type(ts) is not float or not MIN_TS <= ts < MAX_TS:
            ts = check_number(ts, "ts")
            if not MIN_TS <= ts < MAX_TS:
                raise FrameError("ts", f"{ts!r} is not a time between 2000 and 2100 in "
                                 "epoch seconds")
        if type(seq) is not int or seq < 0:
            raise FrameError("seq", f"must be a non-negative integer, got {quote(seq)}")
        text = self._text
        node = text(node, "node")
        check_node(node)
        return Frame(
            cluster=text(cluster, "cluster"),
            rack=text(rack, "rack"),
            node=node,
            ts=ts,
            gpus=self._gpus(gpus),
            host=self._host(host),
            seq=seq,
        )

    def _text(self, value: Any, where: str) -> str:
        if type(value) is str and value in self._good:
            return value
        value = check_text(value, where)
        if len(self._good) >= _MAX_GOOD:
            self._good.clear()
        self._good.add(value)
        return value

    def _gpus(self, raw: Any) -> tuple[GpuReading, ...]:
        check_array(raw, "gpus", MAX_GPUS)
        seen = 0  # bit i: GPU index i was seen
        out = []
        text, metrics_of, good = self._text, self._metrics, self._good
        for i, g in enumerate(raw):
            if type(g) is not list or len(g) != 8:
                raise FrameError(f"gpus[{i}]", "must be an array of 8 fields")
            index, uuid, model, job, state, metrics, xids, info = g
            if type(index) is not int or not 0 <= index < MAX_GPUS:
                raise FrameError(f"gpus[{i}].index", f"must be an integer in 0..{MAX_GPUS - 1}, "
                                 f"got {quote(index)}")
            if seen >> index & 1:
                raise FrameError(f"gpus[{i}].index", f"GPU {index} appears twice")
            seen |= 1 << index
            if type(state) is not int or not 0 <= state <= 1:
                raise FrameError(f"gpus[{i}].state",
                                 f"must be 0 (ok) or 1 (lost), got {quote(state)}")
            # Known-good strings are a set lookup; only a new one pays for _text
            # (and for the f-string naming where it is).
            if type(uuid) is not str or uuid not in good:
                uuid = text(uuid, f"gpus[{i}].uuid")
            if type(model) is not str or model not in good:
                model = text(model, f"gpus[{i}].model")
            if job is not None and (type(job) is not str or job not in good):
                job = text(shortened(job), f"gpus[{i}].job")
            if job and "." in job and not _DOTS.isdisjoint(job.split(",")):
                raise FrameError(f"gpus[{i}].job", _DOTS_SAID)
            try:  # a list or map among the values is unhashable: the careful path names it
                known = type(info) is dict and (not info or len(info) <= MAX_INFO and (
                    good.issuperset(info) and good.issuperset(info.values())))
            except TypeError:
                known = False
            if not known:
                info = self._info(info, f"gpus[{i}].info")
            if info and ("," in info.get("user", "") or "," in info.get("team", "")):
                check_owners(info, job, f"gpus[{i}].info")
            out.append(gpu_reading(
                index, uuid, model, metrics_of(metrics, i, "gpu"), job,
                _STATES[state],  # type: ignore[arg-type]
                () if type(xids) is list and not xids else check_xids(xids, f"gpus[{i}].xids"),
                info))
        return tuple(out)

    def _info(self, value: Any, where: str) -> dict[str, str]:
        if not isinstance(value, dict) or len(value) > MAX_INFO:
            raise FrameError(where, f"must be a map of at most {MAX_INFO} strings")
        return {self._text(k, f"{where} key"): self._text(v, f"{where}.{k}")
                for k, v in value.items()}

    def _host(self, raw: Any) -> HostReading:
        if not isinstance(raw, list) or len(raw) != 2:
            raise FrameError("host", "must be an array [metrics, ports]")
        metrics, ports = raw
        check_array(ports, "host.ports", MAX_PORTS)
        out = []
        for i, p in enumerate(ports):
            where = f"host.ports[{i}]"
            if not isinstance(p, list) or len(p) != 3:
                raise FrameError(where, "must be an array [name, kind, metrics]")
            name, kind, pm = p
            if type(kind) is not int or not 0 <= kind <= 1:
                raise FrameError(f"{where}.kind", f"must be 0 (nic) or 1 (ib), got {quote(kind)}")
            out.append(PortReading(self._text(name, f"{where}.name"), _PORT_KINDS[kind],  # type: ignore[arg-type]
                                   self._metrics(pm, f"{where}.metrics", "port")))
        return HostReading(self._metrics(metrics, "host.metrics", "host"), tuple(out))

    def _metrics(self, raw: Any, where: str | int, scope: str) -> dict[str, float]:
        # The hot loop of every processor: one dict lookup, two type checks and
        # one range check a metric; anything unusual (an int value to convert,
        # or an error to name) goes to the careful loop. ``where`` is a GPU's
        # position (its text is made only for an error) or the place's name.
        if type(raw) is not dict:
            raise FrameError(place(where),
                             f"must be a map of metric id to number, got {tname(raw)}")
        get = self._by_scope[scope].get
        out: dict[str, float] = {}
        for key, value in raw.items():
            spec = get(key)
            if spec is None or type(value) is not float or type(key) is not int:
                return self._metrics_checked(raw, place(where), scope)
            name, lo, hi = spec
            if not lo <= value <= hi:
                return self._metrics_checked(raw, place(where), scope)
            out[name] = value
        return out

    def _metrics_checked(self, raw: dict[Any, Any], where: str, scope: str) -> dict[str, float]:
        known = self._by_scope[scope]
        out: dict[str, float] = {}
        for key, value in raw.items():
            spec = known.get(key) if type(key) is int else None
            t = type(value)
            v = value if t is float else float(value) if t is int else None
            if spec is None and v is not None and self._later_id(key):
                self.unknown.append((scope, key))  # a later release's metric: left out
            elif spec is None or v is None:
                self._metric_error(where, scope, key, value)
            elif not spec[1] <= v <= spec[2]:  # a reading, not a malformed frame: left out
                self.dropped.append(self._impossible(where, key, v))
            else:
                out[spec[0]] = v
        return out

    def _later_id(self, key: Any) -> bool:
        """An id a later catalogue may have (of no scope this one knows)."""
        return type(key) is int and 0 <= key < _MAX_ID and self._cat.by_id(key) is None

    def _impossible(self, where: str, key: int, v: float) -> tuple[str, str]:
        m = self._cat.by_id(key)
        what = "is not finite" if not math.isfinite(v) else (
            f"is outside the possible range [{m.min:g}, {m.max:g}]")
        return f"{where}.{m.name}", f"{v!r} {m.unit} {what}"

    def _metric_error(self, where: str, scope: str, key: Any, value: Any) -> None:
        metric = self._cat.by_id(key) if type(key) is int else None
        if metric is None:
            raise FrameError(f"{where}[{quote(key)}]", "unknown metric id" + (
                f" with a value that is no number ({tname(value)})" if self._later_id(key)
                else " (an id is a non-negative integer)"))
        name = f"{where}.{metric.name}"
        if metric.scope != scope:
            raise FrameError(name, f"is a {metric.scope} metric, not a {scope} one")
        raise FrameError(name, f"must be a number, got {tname(value)}")


_encoder: Encoder | None = None
_decoder: Decoder | None = None


def encode(frame: Frame) -> bytes:
    global _encoder
    if _encoder is None:
        _encoder = Encoder()
    return _encoder.encode(frame)


def decode(data: bytes | None) -> Frame:
    global _decoder
    if _decoder is None:
        _decoder = Decoder()
    return _decoder.decode(data)
