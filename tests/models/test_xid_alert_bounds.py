"""XID alerts bounded and readable: a GPU reporting a new code every second lists a few
codes and re-notifies at most once per refresh_s (a worse action at once); the text a
store without text gives back (VictoriaMetrics) is the detector's, with UTC times and the
action; an alert of an older release is adopted with its code and count, and its first
revision is no news."""

from __future__ import annotations

from fleetwatch.dashboards.alert_tables import evidence_text
from fleetwatch.models import REVISION
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.lprecords import alert_from, render_message
from fleetwatch.xids import MORE_CODES, MORE_COUNT, XID_LISTED, describe
from tests.models.helpers import busy, node

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def xid_frame(ts: float, codes: tuple[int, ...], gpu: int = 3):  # noqa: ANN201
    return node(ts, [busy(60)] * 8, xids={gpu: codes})


def storm(seconds: int, book: AlertBook, notifier: Notifier,
          codes_at: dict[int, tuple[int, ...]] | None = None) -> tuple[int, Alert]:
    """A new unknown code every second; returns notices forwarded and the last alert."""
    d = XidEvents()
    sent, last = 0, None
    for k in range(seconds):
        frames = [xid_frame(T0 + k, (codes_at or {}).get(k, (1000 + k,)))]
        changes = book.observe(frames, d.update(frames))
        book.apply(changes)
        sent += len(notifier.send(changes))
        last = next((a for a in changes if a.rule == "gpu_xid_warning"), last)
    assert last is not None
    return sent, last


def test_a_new_code_every_second_lists_a_few_codes_and_counts_the_rest() -> None:
    d = XidEvents()
    found = [d.update([xid_frame(T0 + k, (1000 + k,))])[0] for k in range(600)]
    last = found[-1]
    assert last.evidence["count"] == 600 and last.evidence[REVISION] == 600
    assert last.evidence[MORE_CODES] == 600 - XID_LISTED
    assert last.evidence[MORE_COUNT] == 600 - XID_LISTED
    assert len([k for k in last.evidence if k.startswith("xid_")]) == 3 * XID_LISTED
    assert last.message.endswith(f"; and {600 - XID_LISTED} more codes "
                                 f"({600 - XID_LISTED} XIDs)")
    assert "1599 (XID 1599) 08:09:59Z" in last.message  # the latest first, of equal rank
    assert len(last.message) < 400


def test_new_codes_renotify_at_most_once_per_refresh_s_and_a_worse_action_at_once() -> None:
    sent, last = storm(600, AlertBook(refresh_s=60), Notifier([], background=False))
    assert sent <= 600 // 60 + 1
    assert last.evidence[REVISION] >= 540  # the last write carries the codes seen by then
    # An RMA code (64, critical) is another alert; a drain-and-reset one among warnings:
    worse = min((x for x in (describe(c) for c in range(1, 200))
                 if x.severity == "warning" and x.rank > describe(1000).rank),
                key=lambda x: x.code)
    book, notifier = AlertBook(refresh_s=60), Notifier([], background=False)
    d = XidEvents()
    notices = []
    for k, codes in enumerate(((1000,), (1001,), (1002,), (worse.code,))):
        frames = [xid_frame(T0 + k, codes)]
        changes = book.observe(frames, d.update(frames))
        book.apply(changes)
        notices.append([n.alert.evidence["xid"] for n in notifier.send(changes)])
    assert notices == [[1000], [], [], [worse.code]]


def stored(evidence: dict[str, float], rule: str = "gpu_xid_critical") -> Alert:
    return Alert(f"{rule}/c/n1/gpu3/1", rule, "critical", "c", "r1", "n1", "gpu3", "firing",
                 T0, T0 + 30, 48.0, "", evidence=evidence)


def test_a_store_without_text_gives_the_detectors_message_and_action() -> None:
    d = XidEvents()
    d.update([xid_frame(T0, (48,))])
    (f,) = d.update([xid_frame(T0 + 30, (48, 64))])
    numbers = {"state": 1.0, "started_ts": T0, "updated_ts": T0 + 30, "value": 64.0}
    numbers |= {f"evidence:{k}": v for k, v in f.evidence.items()}
    back = alert_from({"rule": "gpu_xid_critical", "node": "n1", "device": "gpu3"}, numbers)
    # All but the job that held the GPU, which a store of numbers cannot keep.
    assert f.message.startswith("GPU 3 on n1 (job job1): XID ")
    assert back.message == f.message.replace(" (job job1)", "")
    assert back.action == f.action and "RMA" in back.action
    assert "48 (Double-bit ECC error) 2x, 08:00:00Z to 08:00:30Z" in back.message


def test_evidence_times_are_utc_on_the_dashboard_and_in_rendered_messages() -> None:
    a = stored({"xid_48_first_ts": T0, "gpu_temp_c": 91.0}, rule="gpu_temp")
    assert "xid_48_first_ts=2027-01-15T08:00:00Z" in evidence_text(a)
    assert "1.8e+09" not in evidence_text(a)
    assert "xid_48_first_ts=2027-01-15T08:00:00Z" in render_message(a)


def test_an_older_releases_alert_is_adopted_with_its_code_and_count_and_is_no_news() -> None:
    old = stored({"xid": 48.0, "count": 12.0, "hold_s": 3600.0})
    assert render_message(old).startswith("GPU 3 on n1: XID 48 (Double-bit ECC error) 12x")
    d = XidEvents()
    d.adopt([old])
    book, notifier = AlertBook([old], refresh_s=60), Notifier([], background=False)
    notifier.adopt([old])
    sent = []
    for ts in (T0 + 40, T0 + 50, T0 + 100):
        frames = [xid_frame(ts, (48,))]
        changes = book.observe(frames, d.update(frames))
        book.apply(changes)
        sent += notifier.send(changes)
    assert sent == []
    (now,) = book.open
    assert now.evidence["xid_48_count"] == 15 and now.evidence["xid_48_first_ts"] == T0
    assert now.started_ts == T0


def test_updates_not_yet_written_are_handed_out_when_the_data_end() -> None:
    d, book = XidEvents(), AlertBook(refresh_s=60)
    for k in range(100):
        frames = [xid_frame(T0 + k, (48,))]
        book.apply(book.observe(frames, d.update(frames)))
    (last,) = book.unwritten()
    assert last.evidence["xid_48_count"] == 100
    book.apply([last])
    assert book.unwritten() == []
