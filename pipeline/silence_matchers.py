"""Silences' matchers: an alert's labels, a matcher parsed (and refused where Alertmanager's
RE2 could not take it), and which silence in force matches an alert.

A silence mutes the alerts that match all its matchers while the stream's time (the
newest frame's, or the alert's own ``updated_ts``, whichever is later) is within the
silence's range: an alert that stopped changing (a latched XID, a silent node) is muted by
a silence added after its last change, and heard again once the silence ends. What a mute
means for notifications is ``pipeline.silences``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fleetwatch.pipeline.alert_keys import scope_of
from fleetwatch.pipeline.store.base import Alert, Silence

LABELS = ("rule", "severity", "cluster", "rack", "node", "device")
OPS = ("=~", "!~", "!=", "=")
_MATCHER = re.compile(r"^\s*([a-z_]+)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


def labels(alert: Alert) -> dict[str, str]:
    out = {name: str(getattr(alert, name)) for name in LABELS}
    out["scope"] = scope_of(alert)
    return out


def parse_matcher(text: str) -> tuple[str, str, str]:
    """``node=node-001``, ``rule=~gpu_.*``, ``severity!=info`` → (label, op, value)."""
    m = _MATCHER.match(text)
    if not m or m[1] not in (*LABELS, "scope"):
        raise ValueError(f"silence matcher {text!r}: expected LABEL=VALUE, LABEL!=VALUE, "
                         f"LABEL=~REGEX or LABEL!~REGEX with LABEL one of "
                         f"{', '.join((*LABELS, 'scope'))}")
    value = m[3].strip('"')
    if m[2] in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"silence matcher {text!r}: bad regular expression: {exc}") from None
        problem = not_re2(value)
        if problem:
            raise ValueError(f"silence matcher {text!r}: {problem}, which Alertmanager's "
                             "regular expressions (Go's RE2) do not have, so the silence could "
                             "not mute it there; write it without (a regex matches the whole "
                             "value, e.g. rule!~gpu_temp.* instead of rule=~(?!gpu_temp).*)")
    return m[1], m[2], value


# Python syntax that Go's RE2 (Alertmanager's matchers) lacks, after "(?".
_NOT_RE2_GROUPS = (("<=", "a lookbehind (?<=...)"), ("<!", "a negative lookbehind (?<!...)"),
                   ("=", "a lookahead (?=...)"), ("!", "a negative lookahead (?!...)"),
                   (">", "an atomic group (?>...)"), ("(", "a conditional (?(...)...)"),
                   ("P=", "a named backreference (?P=...)"), ("#", "a comment (?#...)"))
_QUANTIFIER_END = re.compile(r"(?:[*+?]|\{\d+(?:,\d*)?\})$")


def not_re2(regex: str) -> str:
    """The first construct of ``regex`` (valid Python) that RE2 refuses, named; "" if none:
    lookaround, backreferences, atomic groups, possessive quantifiers, conditionals,
    comments and ``\\Z``."""
    i, in_class = 0, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            nxt = regex[i + 1:i + 2]
            if not in_class and nxt.isdigit() and nxt != "0":
                return f"a backreference (\\{nxt})"
            if nxt == "Z":
                return "\\Z (write $ or \\z)"
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            if regex[i:i + 1] == "^":
                i += 1
            if regex[i:i + 1] == "]":   # a "]" first in a class is a literal
                i += 1
            continue
        elif c == "(" and regex[i + 1:i + 2] == "?":
            rest = regex[i + 2:]
            for start, name in _NOT_RE2_GROUPS:
                if rest.startswith(start):
                    return name
            flags = _FLAGS.match(rest)
            if flags and set(flags[1]) - set("imsU-"):
                return f"the inline flag(s) {''.join(sorted(set(flags[1]) - set('imsU-')))} " \
                       f"(RE2 has i, m, s and U)"
        elif c == "+" and _QUANTIFIER_END.search(regex[:i]) and not _escaped(regex, i - 1):
            return f"a possessive quantifier ({regex[i - 1]}+)"
        i += 1
    return ""


_FLAGS = re.compile(r"([a-zA-Z-]+)[:)]")


def not_in_alertmanager(silence: Silence) -> str:
    """Why Alertmanager cannot take this silence, or "": a regex that Go's RE2 lacks, in a
    silence stored before fleetwatch refused them. It mutes fleetwatch's own sinks, not
    Alertmanager's notifications."""
    for name, op, value in silence.matchers:
        problem = not_re2(value) if op in ("=~", "!~") else ""
        if problem:
            return (f"{name}{op}{value} has {problem}, which Alertmanager's regular "
                    "expressions (Go's RE2) do not have")
    return ""


def _escaped(regex: str, i: int) -> bool:
    """Is the character at ``i`` escaped (an odd run of backslashes before it)?"""
    n = 0
    while i - n - 1 >= 0 and regex[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def matches(silence: Silence, alert: Alert) -> bool:
    have = labels(alert)
    for name, op, value in silence.matchers:
        got = have.get(name, "")
        if op == "=" and got != value or op == "!=" and got == value:
            return False
        if op in ("=~", "!~") and (re.fullmatch(value, got) is not None) != (op == "=~"):
            return False
    return True


def silenced_by(alert: Alert, silences: Iterable[Silence], at: float | None = None) -> str:
    """The id of a silence in force at ``at`` (never before the alert's own time) that
    matches it, else ""."""
    t = alert.updated_ts if at is None else max(at, alert.updated_ts)
    for s in silences:
        if s.start_ts <= t < s.end_ts and matches(s, alert):
            return s.id
    return ""
