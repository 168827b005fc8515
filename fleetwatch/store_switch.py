"""What stays behind in the SQLite file when ``store.kind`` moves to VictoriaMetrics or
InfluxDB, and carrying what must not be lost: the silences in force (an "RMA pending"
silence that vanished made its node page again) and the acknowledgements of open alerts.

History (samples, roll-ups, the energy ledger, events, resolved alerts) is not copied: the
old file keeps it, and ``report --month M --store OLD.db`` still reads its months.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from fleetwatch.config import Config
from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Acknowledgement,
    Silence,
    StoreError,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Carried:
    silences: list[Silence]       # in force now or later
    acks: list[Acknowledgement]   # of the alerts still open in the old store


def to_carry(old: object, now: float) -> Carried:
    """The silences of ``old`` that have not ended by ``now`` and the acknowledgements of
    its open alerts (pure over the store's reads)."""
    silences = [s for s in old.silences() if s.end_ts > now]  # type: ignore[attr-defined]
    open_ids = {a.id for a in old.alerts(ACTIVE_STATES)}  # type: ignore[attr-defined]
    acks = [a for a in old.acks() if a.alert_id in open_ids]  # type: ignore[attr-defined]
    return Carried(silences, acks)


def missing_from(new: object, carried: Carried) -> Carried:
    """What of ``carried`` the store ``new`` does not hold yet (by id; a silence edited
    since, with another end, counts as held)."""
    have_s = {s.id for s in new.silences()}  # type: ignore[attr-defined]
    have_a = {a.alert_id for a in new.acks()}  # type: ignore[attr-defined]
    return Carried([s for s in carried.silences if s.id not in have_s],
                   [a for a in carried.acks if a.alert_id not in have_a])


def carry(old: object, new: object, now: float) -> Carried:
    """Write into ``new`` the silences and acknowledgements of ``old`` it lacks; returns
    them. Idempotent: a silence keeps its id, so importing twice adds nothing."""
    todo = missing_from(new, to_carry(old, now))
    if todo.silences:
        new.write_silences(todo.silences)  # type: ignore[attr-defined]
    if todo.acks:
        new.write_acks(todo.acks)  # type: ignore[attr-defined]
    return todo


def left_behind(config: Config, new: object, now: float) -> str | None:
    """A warning for a processor starting on a server store while the SQLite file at
    ``store.path`` (the store before the switch) holds silences in force or
    acknowledgements that ``new`` lacks; None when there is nothing to say."""
    path = config.store.path
    if config.store.kind == "sqlite" or not Path(path).is_file():
        return None
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    old = SqliteStore(path, read_only=True)
    try:
        todo = missing_from(new, to_carry(old, now))
    except (StoreError, sqlite3.Error) as exc:  # not a store, damaged, the server away
        log.debug("silences of %s not compared with the store's: %s", path, exc)
        return None
    finally:
        old.close()
    if not todo.silences and not todo.acks:
        return None
    return (f"store.kind is {config.store.kind!r}, but the SQLite store at {path} (store.path, "
            f"the store before the switch) holds {len(todo.silences)} silence(s) in force and "
            f"{len(todo.acks)} acknowledgement(s) of open alerts that this store lacks: their "
            "alerts are notified again. Carry them over with `fleetwatch silence import --from "
            f"{path}`; past months' reports stay readable with `fleetwatch report --month "
            f"YYYY-MM --store {path}`")
