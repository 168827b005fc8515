"""``fleetwatch silence`` and ``fleetwatch ack``: silences and acknowledgements in the store.

Every backend keeps them (SQLite, VictoriaMetrics, InfluxDB); VictoriaMetrics
keeps no comment (text) and at most 16 matchers a silence (they are labels
there): one it cannot keep is refused here with what to change.

The processor's notifier reads them back from the store (every
``alerts.silence_reload_s``, 5 s by default): a silence
mutes the notifications of matching alerts from its start to its end (the
alerts' own time), an acknowledgement stops repeat notifications of one alert
until it resolves.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from fleetwatch.alert_view import age
from fleetwatch.pipeline.silence_matchers import matches, not_in_alertmanager, parse_matcher
from fleetwatch.pipeline.silences import visible
from fleetwatch.pipeline.store.base import (
    Acknowledgement,
    Alert,
    Silence,
    Store,
    StoreRejected,
)


class SilenceError(ValueError):
    """A silence or acknowledgement cannot be made; the message says why and what to do."""


class SilenceNotFound(SilenceError):
    """The silence or open alert named is not in the store: the command was well formed,
    the store says no (the alert may have resolved since it was listed)."""


def _need(store: Store, method: str) -> None:
    if not callable(getattr(store, method, None)):
        raise SilenceError(f"this store ({type(store).__name__}) keeps no silences or "
                           "acknowledgements; set store.kind to sqlite, victoriametrics or "
                           "influx")


def _typed(text: str, what: str) -> str:
    """``text`` as it may be stored: a TAB (pasted from a ticket) as a space; text with other
    characters a terminal acts on (ESC, BEL, CR, a bidi override) refused: it is printed in
    other operators' terminals (`fleetwatch alerts`, `silence list`)."""
    text = text.replace("\t", " ")
    if not text.isprintable():
        bad = next(c for c in text if not c.isprintable())
        # visible() writes each as its escape once (a repr of it would double the \).
        raise SilenceError(f"{what} '{visible(text)}' holds the control character "
                           f"'{visible(bad)}': other operators' terminals would act on it; "
                           "write it without")
    return text


def add_silence(store: Store, matchers: Sequence[str], duration_s: float,
                start_ts: float | None = None, by: str = "", comment: str = "") -> Silence:
    """Store a silence of ``duration_s`` from ``start_ts`` (default now)."""
    _need(store, "write_silences")
    if not matchers:
        raise SilenceError("a silence needs at least one matcher, e.g. node=node-007")
    matchers = [_typed(m, "matcher") for m in matchers]
    by, comment = _typed(by, "--by"), _typed(comment, "--comment")
    try:
        parsed = tuple(parse_matcher(m) for m in matchers)
    except ValueError as exc:
        raise SilenceError(str(exc)) from None
    for text, (name, op, value) in zip(matchers, parsed):
        # `node=$NODE` with $NODE unset: a silence of nothing (=), or of nearly every alert
        # (!=, !~), and no error to tell anyone.
        if not value:
            raise SilenceError(f"silence matcher {text!r} has an empty value (an unset shell "
                               f"variable?): name the {name}, e.g. {name}{op}VALUE; "
                               f"{name}=~^$ matches alerts whose {name} is empty")
    _check_length(duration_s)
    made = _ms(time.time())
    start = made if start_ts is None else _ms(start_ts)
    silence = Silence(uuid.uuid4().hex[:12], parsed, start, round(start + duration_s, 3), by,
                      comment, made)
    _write(store.write_silences, silence)
    return silence


# A --start this far in the past is read as now (the seconds it took to type it, a clock
# a little ahead); further back is refused: a silence mutes nothing before it is made.
PAST_TOLERANCE_S = 60.0
# The longest silence, and how far ahead one may start: beyond, a typo (2062 for 2026).
MAX_LENGTH_S = 366 * 86400.0
DEFAULT_LENGTH_S = 3600.0


def window(start_ts: float | None, end_ts: float | None, duration_s: float | None,
           now: float, shown: Callable[[float], str] | None = None) -> tuple[float, float]:
    """A silence's (start, length) from ``silence add``'s ``--start``, ``--until`` and
    ``--for`` (each None where not given): from now by default, for an hour by default.
    A start less than ``PAST_TOLERANCE_S`` ago is now; refused with the value named: a
    start further back or more than a year ahead, an end not after the start, a length
    above a year, and --for with --until. ``shown``: a time as the messages write it
    (default UTC; the CLI's, in the --tz it was typed in too)."""
    shown = shown or (lambda ts: f"{_utc(ts)} UTC")
    if end_ts is not None and duration_s is not None:
        raise SilenceError("give either --for or --until, not both")
    start = now if start_ts is None else start_ts
    if start < now - PAST_TOLERANCE_S:
        raise SilenceError(f"--start {shown(start)} is {age(now - start)} in the past: a "
                           "silence mutes nothing before it is made; leave --start out to "
                           "silence from now")
    start = max(start, now)
    if start - now > MAX_LENGTH_S:
        raise SilenceError(f"--start {shown(start)} is more than a year ahead; check the "
                           "year")
    if end_ts is not None:
        if end_ts <= start:
            raise SilenceError(f"--until {shown(end_ts)} is not after --start "
                               f"{shown(start)}{'' if start_ts is not None else ' (now)'}"
                               ": the silence would mute nothing")
        duration_s = end_ts - start
    length = DEFAULT_LENGTH_S if duration_s is None else duration_s
    _check_length(length)
    return start, length


def _check_length(length_s: float) -> None:
    """Refuse a length outside (0, MAX_LENGTH_S], both said in days as the limit is kept
    (a leap year's 366 d, so that any calendar year fits)."""
    if not 0 < length_s <= MAX_LENGTH_S:
        said = f"{length_s / 86400:g} d" if length_s >= 86400 else f"{length_s:g} s"
        raise SilenceError(f"silence duration {said}: must be above 0 and at most "
                           f"{MAX_LENGTH_S / 86400:g} d (a year)")


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def cluster_scope_warning(matchers: Sequence[tuple[str, str, str]],
                          clusters: Sequence[str]) -> str:
    """A warning when a silence names a node (``node=X``) but no cluster, and X is a node
    of several clusters (``clusters``, the clusters X reports in): node names like node001
    exist in every cluster, and the silence mutes X in each. "" otherwise."""
    names = {name for name, _, _ in matchers}
    node = next((v for name, op, v in matchers if name == "node" and op == "="), None)
    if node is None or "cluster" in names or len(set(clusters)) < 2:
        return ""
    shown = sorted(set(clusters))
    return (f"warning: {node} is a node of {len(shown)} clusters ({', '.join(shown)}): "
            f"this silence mutes {node} in every one of them. To mute one cluster's only, "
            f"expire it and add cluster=NAME, e.g. fleetwatch silence add cluster={shown[0]} "
            f"node={node} ...")


def unknown_node(node: str, nodes: Sequence[str]) -> str:
    """A hint when ``node`` is not among ``nodes`` (those that sent data lately): the
    names it may have meant (a typo, or a short name for a node the agents call by its full
    one), else some of those seen; "" when it is one of them."""
    import difflib

    if node in nodes:
        return ""
    ordered = sorted(nodes)
    near = difflib.get_close_matches(node, ordered, n=3, cutoff=0.6)
    near += [n for n in ordered if n.startswith(node) and n not in near][:3 - len(near)]
    hint = f"; did you mean {', '.join(near)}?" if near else (
        f"; nodes seen: {', '.join(ordered[:5])}{', ...' if len(ordered) > 5 else ''}"
        if ordered else "")
    return f"no node {node!r} has sent data to it in the last 7 days{hint}"


def named_node(matchers: Sequence[str]) -> str | None:
    """The node a silence's ``node=X`` names exactly, if one does (a matcher that does not
    parse is left to ``add_silence`` to refuse)."""
    for text in matchers:
        try:
            name, op, value = parse_matcher(text)
        except ValueError:
            continue
        if name == "node" and op == "=" and value:
            return value
    return None


def mutes_now(silence: Silence, open_alerts: Sequence[Alert], now: float | None = None
              ) -> str:
    """How many of the open alerts this silence mutes now, as a sentence; of one not started
    at ``now`` (default: the clock), that it mutes nothing until then, and how many it
    matches."""
    n = sum(matches(silence, a) for a in open_alerts)
    now = time.time() if now is None else now
    if silence.start_ts > now:
        return (f"pending: it mutes nothing until it starts in {age(silence.start_ts - now)};"
                f" it matches {n or 'no'} open alert{'s' * (n > 1)} now")
    if not n:
        return "it matches no open alert now (it mutes those that match it until it ends)"
    return f"it mutes {n} open alert{'s' * (n != 1)} now"


def node_clusters(store: Store, node: str, since_ts: float) -> list[str]:
    """The clusters in which ``node`` sent data after ``since_ts`` or has an open alert."""
    from fleetwatch.pipeline.stored_nodes import SEEN_METRICS

    found = {a.cluster for a in store.alerts() if a.node == node}
    for metric in SEEN_METRICS:
        found |= {key.cluster for key, _, _ in store.latest(metric, int(since_ts * 1000))
                  if key.node == node}
    return sorted(found)


def _ms(ts: float) -> float:
    """A time to the ms below: what every backend keeps exactly (VictoriaMetrics rounds a
    float's 17th digit). Down, so that a silence made now is in force now."""
    return math.floor(ts * 1000) / 1000


def _write(write: Callable[[list[Any]], None], record: Any) -> None:
    try:
        write([record])
    except StoreRejected as exc:  # e.g. more matchers than VictoriaMetrics keeps as labels
        raise SilenceError(f"the store cannot keep this: {exc.reason}") from None


def expire_silence(store: Store, silence_id: str, now: float | None = None
                   ) -> tuple[Silence, bool]:
    """End a silence now (it is kept, with its end moved, for the record).

    Returns the silence and whether this ended it: False for one already over, which
    is left as it was (expiring it twice is no error, but the caller says so)."""
    _need(store, "silences")
    now = time.time() if now is None else now
    for s in store.silences():
        if s.id == silence_id:
            if s.end_ts <= now:
                return s, False
            ended = Silence(s.id, s.matchers, s.start_ts,
                            min(s.end_ts, max(_ms(now), s.start_ts)), s.created_by,
                            s.comment, s.created_ts, _ms(now), s.end_ts)
            _write(store.write_silences, ended)
            return ended, True
    raise SilenceNotFound(f"no silence {silence_id!r}; `fleetwatch silence list --all` shows "
                          "them")


def acknowledge(store: Store, alert_id: str, by: str, comment: str = "",
                now: float | None = None) -> tuple[Acknowledgement, Acknowledgement | None]:
    """Acknowledge an open alert. Returns the acknowledgement and the one it replaces (an
    alert has one owner: the newest acknowledgement is the one shown), or None."""
    _need(store, "write_acks")
    if not by:
        raise SilenceError("say who acknowledges it: --by NAME")
    by, comment = _typed(by, "--by"), _typed(comment, "--comment")
    if alert_id not in {a.id for a in store.alerts()}:
        raise SilenceNotFound(f"no open alert {alert_id!r}: `fleetwatch alerts` lists the "
                              "open ones with their ids, as the dashboard's alert tables do "
                              "(column Id)")
    before = [a for a in store.acks() if a.alert_id == alert_id]
    previous = max(before, key=lambda a: a.ts) if before else None
    ack = Acknowledgement(alert_id, _ms(time.time() if now is None else now), by, comment)
    _write(store.write_acks, ack)
    return ack, previous


def describe(s: Silence, now: float | None = None) -> str:
    """A line per silence; one not started yet at ``now`` (default: the clock) says it is
    pending (it mutes nothing until its start)."""
    now = time.time() if now is None else now
    matchers = visible(",".join(f"{n}{op}{v}" for n, op, v in s.matchers))
    line = (f"{s.id}  {matchers}  {_utc(s.start_ts)} .. {_utc(s.end_ts)} UTC  "
            f"{visible(s.created_by)}  {visible(s.comment)}")
    if s.start_ts > now and s.end_ts > s.start_ts:
        line += f"  pending (starts in {age(s.start_ts - now)})"
    elif s.end_ts <= s.start_ts:  # expired before its start: it never muted anything
        line += "  cancelled before its start" + (
            f" at {_utc(s.expired_ts)} UTC" if s.expired_ts else "") + (
            f" (planned until {_utc(s.planned_end_ts)} UTC)"
            if s.planned_end_ts > s.start_ts else "")
    problem = not_in_alertmanager(s)
    if problem:
        line += (f"\n    not in Alertmanager: {problem}; it mutes fleetwatch's own webhook and "
                 f"Kafka alerts only. `fleetwatch silence expire {s.id}`, then add it again "
                 "without that")
    return line


def comment_dropped(store: object, comments: Sequence[str], what: str) -> str:
    """A warning for comments the store does not keep (VictoriaMetrics: numbers and names
    only), said when they are written, not found missing in a postmortem; "" if kept."""
    lost = [c for c in comments if c]
    if not lost or getattr(store, "keeps_text", True):
        return ""
    said = f"'{visible(lost[0])}'" if len(lost) == 1 else f"{len(lost)} comments"
    return (f"WARNING: {type(store).__name__} keeps no comments: {said} of the {what} was "
            "not stored (who and when were); keep the reason in your ticket or chat, or use "
            "a store that keeps text (sqlite, influx)")

