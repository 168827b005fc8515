"""An open XID alert takes in every later XID of its GPU and severity: listed with counts
and times, the most drastic action, and a new revision (so sinks hear of it) when a new
code joins; the lifecycle writes that at once and the notifier forwards it again."""

from __future__ import annotations

from fleetwatch.models import REVISION
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.xids import RANK_RMA, describe, xid_table
from tests.models.helpers import busy, node

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def xid_frame(ts: float, codes: tuple[int, ...], gpu: int = 3):  # noqa: ANN201
    return node(ts, [busy(60)] * 8, xids={gpu: codes})


def test_the_table_ranks_rma_above_drain_and_reset_above_nothing() -> None:
    assert describe(64).rank == RANK_RMA
    assert describe(48).rank < describe(64).rank and describe(79).rank < RANK_RMA
    assert {describe(c).rank for c in (13, 31, 43, 45)} == {0}
    assert all(0 <= x.rank <= RANK_RMA for x in xid_table().values())


def test_a_later_worse_xid_joins_the_open_alert_with_the_rma_action() -> None:
    d = XidEvents()
    (first,) = d.update([xid_frame(T0, (48,))])
    (later,) = d.update([xid_frame(T0 + 12, (64,))])
    assert first.evidence[REVISION] == 1 and later.evidence[REVISION] == 2
    assert later.action == describe(64).action and "RMA" in later.action
    assert later.evidence["xid"] == 64 and later.evidence["count"] == 2
    assert later.message == ("GPU 3 on n1 (job job1): XID 64 (ECC page retirement or row remapping "
                             "failure) 08:00:12Z; 48 (Double-bit ECC error) 08:00:00Z")
    assert later.evidence["xid_48_first_ts"] == T0 and later.evidence["xid_64_last_ts"] == T0 + 12


def test_two_critical_xids_in_one_frame_take_the_worst_action_whatever_the_order() -> None:
    for codes in ((64, 48), (48, 64)):
        (f,) = XidEvents().update([xid_frame(T0, codes)])
        assert f.evidence["xid"] == 64 and "RMA" in f.action, codes


def test_application_xids_accumulate_instead_of_overwriting() -> None:
    d = XidEvents()
    found = [d.update([xid_frame(T0 + 10 * k, (code,))])[0]
             for k, code in enumerate((13, 43, 31, 45))]
    last = found[-1]
    for code in (13, 43, 31, 45):
        assert f"{code} (" in last.message and last.evidence[f"xid_{code}_count"] == 1
    assert [f.evidence[REVISION] for f in found] == [1, 2, 3, 4]


def test_count_is_per_alert_and_a_repeat_is_no_new_revision() -> None:
    d = XidEvents()
    d.update([xid_frame(T0, (13,) * 16 + (43,))])
    (f,) = d.update([xid_frame(T0 + 30, (13,))])
    assert f.evidence["xid_13_count"] == 17 and f.evidence["count"] == 18
    assert f.evidence[REVISION] == 2
    assert "13 (Graphics engine exception) 17x, 08:00:00Z to 08:00:30Z" in f.message


def test_after_the_hold_a_new_xid_starts_afresh() -> None:
    d = XidEvents()
    d.update([xid_frame(T0, (48,))])
    (f,) = d.update([xid_frame(T0 + 3600, (63,))])  # warning: its own alert anyway
    (g,) = d.update([xid_frame(T0 + 3601, (48,))])
    assert g.evidence["count"] == 1 and g.evidence[REVISION] == 1 and "63" not in g.message


def test_adopt_carries_on_an_open_alert_after_a_restart() -> None:
    before = XidEvents()
    (f,) = before.update([xid_frame(T0, (48,))])
    book = AlertBook()
    book.apply(book.observe([xid_frame(T0, (48,))], [f]))
    after = XidEvents()
    after.adopt(book.open)
    (g,) = after.update([xid_frame(T0 + 60, (64,))])
    assert g.evidence["xid_48_count"] == 1 and g.evidence[REVISION] == 2 and "RMA" in g.action


def test_the_book_writes_a_new_revision_at_once_and_the_notifier_forwards_it() -> None:
    d = XidEvents()
    book = AlertBook(refresh_s=60)
    notifier = Notifier([], background=False)
    sent = []
    for ts, codes in ((T0, (48,)), (T0 + 5, (48,)), (T0 + 12, (64,)), (T0 + 20, (64,))):
        frames = [xid_frame(ts, codes)]
        changes = book.observe(frames, d.update(frames))
        book.apply(changes)
        sent.append([(n.alert.state, n.alert.evidence["xid"]) for n in notifier.send(changes)])
    # firing at once; a repeat of 48 neither written nor notified; 64 both; 64 again not.
    assert sent == [[("firing", 48)], [], [("firing", 64)], []]
    (open_alert,) = book.open
    assert "48 (" in open_alert.message and "64 (" in open_alert.message
    assert Notice(open_alert).notify


def test_a_repeat_not_yet_written_is_written_once_repeat_refresh_s_passed_without_a_finding(
        ) -> None:
    d = XidEvents()
    book = AlertBook(refresh_s=60)
    written = []
    # The first repeat is written at once; a third within REPEAT_REFRESH_S (10 s) waits, and
    # is written by the next frame 10 s after, though it has no XID.
    for ts, codes in ((T0, (48,)), (T0 + 20, (48,)), (T0 + 25, (48,)), (T0 + 28, ()),
                      (T0 + 30, ()), (T0 + 140, ())):
        frames = [xid_frame(ts, codes)]
        changes = book.observe(frames, d.update(frames))
        book.apply(changes)
        written.append([a.evidence["xid_48_count"] for a in changes])
    assert written == [[1], [2], [], [], [3], []]
