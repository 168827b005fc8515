"""Silences and acknowledgements as line protocol, and back from what a server returns.

Both are few (an operator makes them by hand) and live long, so each is one
series for its whole life, written at the time it is written (a silence
may start days ahead, past what VictoriaMetrics accepts, so its own times
are fields). Writing one again with the same identity (expiring a silence,
acknowledging again) adds a sample to the same series; a reader keeps, per
id, the row with the newest ``written_ts``.

Where the server keeps text (InfluxDB, ``text=True``) the identity is the
one tag (``id``; ``alert_id``) and everything else is a field: the matchers
as one JSON string field, ``created_by``/``by`` and ``comment`` as string
fields. Kept exactly.

Where it keeps numbers only (VictoriaMetrics):

* a silence's matchers ARE its identity, so they are labels, one per
  matcher, ``m00``, ``m01``, ... each the JSON of ``[label, op, value]``
  (exact for any text: quotes, backslashes, an empty value), plus ``h``, a
  hash of them all, which the reader checks: a silence whose matchers do not
  read back exactly is not applied (and logged). They never change through a
  silence's life, so they make one series per silence, not per write.
  VictoriaMetrics truncates a label value longer than ``-maxLabelValueLen``
  (16384) and drops labels past ``-maxLabelsPerTimeseries`` (30) without an
  error, so longer ones are refused before they are sent (``StoreRejected``):
  at most ``MAX_MATCHERS`` matchers of at most ``MAX_LABEL_CHARS`` each;
* who made a silence (``by``) or an acknowledgement (``by``) is a name, a
  bounded label fixed for the record's life; the ``comment`` (free text) is
  not kept: the reader gets it empty.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping

from fleetwatch.pipeline.store.base import Acknowledgement, Silence, StoreRejected
from fleetwatch.pipeline.store.lineproto import escape_tag, tags, v1_unwritable
from fleetwatch.pipeline.store.lprecords import quote

log = logging.getLogger(__name__)

SILENCE_MEASUREMENT = "fleetwatch_silence"
ACK_MEASUREMENT = "fleetwatch_ack"
# Well inside VictoriaMetrics' defaults (30 labels a series, 16384 characters a value),
# so that nothing is truncated or dropped: __name__, id, h, by and the matchers.
MAX_MATCHERS = 16
MAX_LABEL_CHARS = 1024
_MATCHER_PREFIX = "m"


def matcher_labels(matchers: Iterable[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """``m00``, ``m01``, ...: the JSON of each matcher, in order (ASCII, no newline)."""
    return [(f"{_MATCHER_PREFIX}{i:02d}", json.dumps(list(m)))
            for i, m in enumerate(matchers)]


def matchers_hash(matchers: Iterable[tuple[str, str, str]]) -> str:
    """A stable hash of the matchers, in order: what the reader checks them against."""
    text = json.dumps([list(m) for m in matchers])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_label(what: str, value: str) -> None:
    if len(value) > MAX_LABEL_CHARS:
        raise StoreRejected(f"{what} is {len(value)} characters; VictoriaMetrics keeps it as a "
                            f"label, and at most {MAX_LABEL_CHARS} are written (it would "
                            "truncate longer ones): shorten it")


def _check_v1(what: str, value: str) -> None:
    if v1_unwritable(value):
        raise StoreRejected(f"{what} {value!r} cannot be written to InfluxDB 1.x (a backslash "
                            "at its end or before ',', '=' or ' '): choose another")


def silence_line(s: Silence, written_ms: int, text: bool = False, v1: bool = False) -> str:
    """One silence as a line at ``written_ms``. Raises ``StoreRejected`` for what this
    server cannot keep exactly (see the module's docstring)."""
    if not s.id:
        raise StoreRejected("a silence needs an id")
    fields = [("start_ts", repr(float(s.start_ts))), ("end_ts", repr(float(s.end_ts))),
              ("written_ts", repr(written_ms / 1000)),
              ("created_ts", repr(float(s.created_ts))),
              ("expired_ts", repr(float(s.expired_ts))),
              ("planned_end_ts", repr(float(s.planned_end_ts)))]
    if text:
        if v1:
            _check_v1("silence id", s.id)
        fields += [("matchers", quote(json.dumps([list(m) for m in s.matchers]))),
                   ("created_by", quote(s.created_by)), ("comment", quote(s.comment))]
        tag_pairs = [("id", s.id)]
    else:
        if len(s.matchers) > MAX_MATCHERS:
            raise StoreRejected(f"a silence of {len(s.matchers)} matchers; VictoriaMetrics "
                                f"keeps at most {MAX_MATCHERS} (one label each): split it "
                                "into several silences or use a regular expression")
        tag_pairs = [("id", s.id), ("h", matchers_hash(s.matchers)), ("by", s.created_by),
                     *matcher_labels(s.matchers)]
        for name, value in tag_pairs:
            _check_label(f"silence {s.id}'s {'matcher' if name[1:].isdigit() else name}",
                         value)
    body = ",".join(f"{escape_tag(k, v1)}={v}" for k, v in fields)
    return f"{SILENCE_MEASUREMENT}{tags(tag_pairs, v1)} {body} {written_ms}"


def silence_from(labels: Mapping[str, str], numbers: Mapping[str, float],
                 texts: Mapping[str, str] | None = None) -> Silence | None:
    """A silence back from its tags, number fields and (where kept) string fields; None
    when its matchers do not read back exactly (logged)."""
    texts = texts or {}
    sid = labels.get("id", "")
    try:
        if "matchers" in texts:
            raw = json.loads(texts["matchers"])
        else:
            keys = sorted((k for k in labels if k.startswith(_MATCHER_PREFIX)
                           and k[1:].isdigit()), key=lambda k: int(k[1:]))
            raw = [json.loads(labels[k]) for k in keys]
            if matchers_hash(tuple(tuple(m) for m in raw)) != labels.get("h"):
                raise ValueError("the matchers do not match their hash")
        matchers = tuple((str(n), str(op), str(v)) for n, op, v in raw)
    except (ValueError, TypeError) as exc:
        log.error("silence %s read back damaged (%s); not applied: expire it and add it "
                  "again", sid, exc)
        return None
    return Silence(sid, matchers, numbers["start_ts"], numbers["end_ts"],
                   texts.get("created_by", labels.get("by", "")), texts.get("comment", ""),
                   numbers.get("created_ts", 0.0), numbers.get("expired_ts", 0.0),
                   numbers.get("planned_end_ts", 0.0))


def ack_line(a: Acknowledgement, written_ms: int, text: bool = False, v1: bool = False) -> str:
    """One acknowledgement as a line at ``written_ms``: tags alert id (and, without text,
    who), fields its time (and, with text, who and the comment)."""
    if not a.alert_id:
        raise StoreRejected("an acknowledgement needs an alert id")
    fields = [("ts", repr(float(a.ts))), ("written_ts", repr(written_ms / 1000))]
    tag_pairs = [("alert_id", a.alert_id)]
    if text:
        if v1:
            _check_v1("alert id", a.alert_id)
        fields += [("by", quote(a.by)), ("comment", quote(a.comment))]
    else:
        tag_pairs.append(("by", a.by))
        for name, value in tag_pairs:
            _check_label(f"the acknowledgement's {name}", value)
    body = ",".join(f"{escape_tag(k, v1)}={v}" for k, v in fields)
    return f"{ACK_MEASUREMENT}{tags(tag_pairs, v1)} {body} {written_ms}"


def ack_from(labels: Mapping[str, str], numbers: Mapping[str, float],
             texts: Mapping[str, str] | None = None) -> Acknowledgement:
    texts = texts or {}
    return Acknowledgement(labels.get("alert_id", ""), numbers["ts"],
                           texts.get("by", labels.get("by", "")), texts.get("comment", ""))


def newest(rows: Iterable[tuple[str, float, object]]) -> list[object]:
    """Per id, the record of the row with the newest ``written_ts``: (id, written, record)."""
    best: dict[str, tuple[float, object]] = {}
    for key, written, record in rows:
        if key not in best or written >= best[key][0]:
            best[key] = (written, record)
    return [record for _, record in best.values()]
