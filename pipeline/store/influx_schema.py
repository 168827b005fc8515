"""Field types another writer fixed in InfluxDB before fleetwatch: what ``SHOW FIELD KEYS``
says against what fleetwatch writes.

InfluxDB 1.x fixes a field's type, per shard, with the first point that carries it;
a point that gives the field another type is refused ("field type conflict") until the
shard group rolls over (7 days by default). fleetwatch writes every reading as a
float (``temp_c=65``), so one point from another tool (Telegraf's ``temp_c=65i``, a
hand-made script) in the same measurement makes the server refuse that field of every
frame. The processor checks at start (``conflicts``) and says what to do; frames the
server refuses for it are dead-lettered with the same advice (``advice``) and still
judged by the detectors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

from fleetwatch.catalogue import catalogue

# The measurements of fleetwatch's own records: fleetwatch writes numbers there as
# floats and text as strings, never integers or booleans.
RECORD_PREFIX = "fleetwatch_"
_NOT_WRITTEN = frozenset({"integer", "boolean", "unsigned"})
_CONFLICT = re.compile(r'field type conflict: input field \\?"([^"\\]+)\\?" on measurement '
                       r'\\?"([^"\\]+)\\?" is type (\w+), already exists as type (\w+)')


@lru_cache(maxsize=1)
def float_fields() -> Mapping[str, frozenset[str]]:
    """Measurement -> the fields fleetwatch writes there as floats (the catalogue's
    metrics: ``gpu_temp_c`` is field ``temp_c`` of ``gpu``)."""
    out: dict[str, set[str]] = {}
    for m in catalogue().metrics:
        measurement, _, field = m.name.partition("_")
        out.setdefault(measurement, set()).add(field)
    return {k: frozenset(v) for k, v in out.items()}


def conflicts(rows: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """(measurement, field, type) of the fields, among ``SHOW FIELD KEYS``' rows
    (measurement, field, type), that hold a type fleetwatch does not write there."""
    ours = float_fields()
    out = []
    for measurement, field, kind in rows:
        theirs = field in ours.get(measurement, ()) and kind != "float"
        if theirs or measurement.startswith(RECORD_PREFIX) and kind in _NOT_WRITTEN:
            out.append((measurement, field, kind))
    return out


def advice(database: str, measurement: str) -> str:
    """What to do about a field type conflict in ``measurement``."""
    return (f"another writer stored this field with another type in measurement "
            f"{measurement!r} of database {database!r}; InfluxDB refuses fleetwatch's points "
            "for it until that shard group ends. Drop the shard holding it (SHOW SHARDS, "
            f"then DROP SHARD <id>), or DROP MEASUREMENT \"{measurement}\" if the other "
            "writer's data is not needed, or point store.bucket at a database of "
            "fleetwatch's own; alerts are still judged from the refused frames meanwhile")


def conflict_said(database: str, found: list[tuple[str, str, str]]) -> str:
    """The start-up warning for ``conflicts``' findings."""
    fields = ", ".join(f"{m}.{f} is {k}" for m, f, k in found[:8])
    more = f" (and {len(found) - 8} more)" if len(found) > 8 else ""
    return (f"field type conflict in InfluxDB database {database!r}: {fields}{more}, where "
            f"fleetwatch writes floats; {advice(database, found[0][0])}")


def refused_conflict(reason: str) -> tuple[str, str] | None:
    """(measurement, field) when a server's refusal is a field type conflict."""
    m = _CONFLICT.search(reason)
    return None if m is None else (m.group(2), m.group(1))
