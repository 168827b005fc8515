"""The lifecycle and the XID detector across a board swap: a finding about another board
than the one its open alert names ends that alert and opens a new one."""

from __future__ import annotations

import dataclasses

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.store.base import Alert

OLD, NEW = "GPU-11111111-0000-0000-0000-000000000000", "GPU-22222222-0000-0000-0000-000000000000"


def at(ts: float, board: str, codes: tuple[int, ...] = ()) -> Frame:
    return Frame("c", "r", "n", ts, (GpuReading(0, board, "m", {"t": 1.0}, xids=codes),))


def named(a: Alert, f: Frame | None) -> Alert:
    return a if a.uuid or f is None else dataclasses.replace(a, uuid=f.gpus[0].uuid)


def test_the_new_boards_xid_finding_names_it_and_opens_a_new_alert() -> None:
    xids, book = XidEvents(), AlertBook(name=named)
    seen = []
    for f in (at(100, OLD, (48,)), at(110, NEW), at(120, NEW, (48,))):
        findings = xids.update([f])
        assert [x.board for x in findings] == [f.gpus[0].uuid] * len(findings)
        changes = book.observe([f], findings)
        book.apply(changes)
        seen += [(a.state, a.uuid, a.started_ts) for a in changes]
    assert seen == [("firing", OLD, 100), ("resolved", OLD, 100), ("firing", NEW, 120)]
    [open_alert] = book.open
    assert open_alert.evidence["revision"] == 1 and open_alert.evidence["xid_48_first_ts"] == 120


def test_a_finding_of_the_same_board_updates_its_alert() -> None:
    xids, book = XidEvents(), AlertBook(name=named)
    for f in (at(100, OLD, (48,)), at(120, OLD, (64,))):
        book.apply(book.observe([f], xids.update([f])))
    [a] = book.open
    assert (a.uuid, a.started_ts, a.evidence["revision"]) == (OLD, 100, 2)
