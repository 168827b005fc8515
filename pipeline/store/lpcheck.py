"""What VictoriaMetrics reads a line of line protocol as, to refuse a record it would misread
before it is sent.

VictoriaMetrics answers 204 to every write and drops a line it cannot parse
(counted only in its ``vm_rows_invalid_total``, logged nowhere a client sees); a
line it parses otherwise than meant is stored as other series (a field key with
a ``"`` took the fields after it into a quoted value: a rack's evidence lost all
but one node). ``misread`` splits a line as its parser does
(``lib/protoparser/influx/parser.go``: separators not escaped by an odd run of
backslashes, ``"`` opening a quoted field value, a backslash kept before any
character but space, comma, equals sign and backslash) and writes what it read
back with this package's escaping: a line that does not come out the same would
not be stored as written. Records only (alerts, annotations, notifications, silences,
acknowledgements), where names become field keys or many tags: frames and events are
many a batch, their names only tag values, and that escaping is fuzzed against the
real server (tests/store/test_escaping.py).
"""

from __future__ import annotations

from fleetwatch.pipeline.store.lineproto import escape_measurement, escape_tag, tags

_UNESCAPED = " ,=\\"


def _next(s: str, ch: str, start: int = 0) -> int:
    """The first ``ch`` at or after ``start`` not escaped (after an even run of backslashes)."""
    i = s.find(ch, start)
    while i > 0:
        j = i
        while j > 0 and s[j - 1] == "\\":
            j -= 1
        if (i - j) % 2 == 0:
            return i
        i = s.find(ch, i + 1)
    return i


def _in_quote(s: str) -> bool:
    odd, i = False, _next(s, '"')
    while i >= 0:
        odd, i = not odd, _next(s, '"', i + 1)
    return odd


def _next_unquoted(s: str, ch: str, quoted: bool, start: int = 0) -> int:
    if not quoted:
        return _next(s, ch, start)
    while True:
        n = _next(s, ch, start)
        if n < 0 or not _in_quote(s[start:n]):
            return n
        close = _next(s, '"', n + 1)
        if close < 0:
            return -1
        start = close + 1


def _unescape(s: str) -> str:
    out, i = [], 0
    while (n := s.find("\\", i)) >= 0:
        out.append(s[i:n])
        if n + 1 == len(s):
            out.append("\\")
            return "".join(out)
        ch = s[n + 1]
        out.append(ch if ch in _UNESCAPED else "\\" + ch)
        i = n + 2
    out.append(s[i:])
    return "".join(out)


def _split(s: str, sep: str, quoted: bool = False) -> list[str]:
    parts, start = [], 0
    while (n := _next_unquoted(s, sep, quoted, start)) >= 0:
        parts.append(s[start:n])
        start = n + 1
    parts.append(s[start:])
    return parts


def read_as(line: str) -> str:
    """``line`` as VictoriaMetrics reads it, written again by ``lineproto``; raises
    ``ValueError`` (its reason) for a line it would skip or a value it would store as 0."""
    n = _next(line, " ")
    if n < 0:
        raise ValueError("no space after the measurement and tags")
    head, rest = line[:n], line[n + 1:].lstrip(" ")
    pairs = []
    comma = _next(head, ",")
    if comma >= 0:
        for tag in _split(head[comma + 1:], ","):
            eq = _next(tag, "=")
            if eq < 0:
                raise ValueError(f"missing tag value for {tag!r}")
            key, value = _unescape(tag[:eq]), _unescape(tag[eq + 1:])
            if key and value:  # an empty one is left out
                pairs.append((key, value))
        head = head[:comma]
    quoted = _next(rest, '"') >= 0
    space = _next_unquoted(rest, " ", quoted)
    field_text, stamp = (rest, "") if space < 0 else (rest[:space], rest[space + 1:].lstrip(" "))
    fields = []
    for field in _split(field_text, ",", quoted):
        eq = _next(field, "=")
        key, value = _unescape(field[:eq]), field[eq + 1:]
        if eq < 0 or not key or not value:
            raise ValueError(f"no key or no value in field {field!r}")
        if quoted and value[0] == '"':
            if len(value) < 2 or value[-1] != '"':
                raise ValueError(f"no closing quote in field {field!r}")
        elif not _number(value):
            raise ValueError(f"field {key!r} has no number: {value!r} (it would store 0)")
        fields.append(f"{escape_tag(key)}={value}")
    if stamp and not stamp.lstrip("-").isdigit():
        raise ValueError(f"cannot parse timestamp {stamp!r}")
    return (f"{escape_measurement(_unescape(head))}{tags(pairs)} {','.join(fields)}"
            + (f" {stamp}" if stamp else ""))


def _number(text: str) -> bool:
    """Whether ``text`` is a number as the writers write them (``repr`` of a float, an
    ``i`` integer); VictoriaMetrics stores 0 for a value it cannot parse."""
    try:
        float(text[:-1] if text.endswith("i") else text)
    except ValueError:
        return False
    return True


def misread(line: str) -> str | None:
    """Why VictoriaMetrics would not store ``line`` as written (None: it would)."""
    try:
        back = read_as(line)
    except ValueError as exc:  # skipped, or a value stored as 0
        return str(exc)
    return None if back == line else f"it would read {back[:300]!r}"
