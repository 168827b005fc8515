"""An XID alert open about a GPU's old board, the board replaced, and the new board's own
XID: through a real Processor, an SQLite store and a real webhook receiver, the old
board's alert ends (still naming the old board and its XID) and a new alert about the
new board fires and is notified, whatever the batch size and across a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from tests.servers import Server
from tests.sinks.conftest import Receiver, tmp_store
from tests.sinks.test_alertmanager import am_alerts, wait_for

OLD = ("GPU-00000000-fake-4000-8000-000000000001", "1650124014201")
NEW = ("GPU-99999999-fake-4000-8000-000000000001", "9990000000001")
T0 = 1_000_000.0


def at(ts: float, board: tuple[str, str], codes: tuple[int, ...] = (), t0: float = T0,
       node: str = "node-c") -> Frame:
    gpus = tuple(GpuReading(i, board[0] if i == 1 else f"GPU-0000000{i}-aaaa-bbbb-cccc-dddd",
                            "m", {"gpu_temp_c": 60.0}, None, "ok", codes if i == 1 else (),
                            {"serial": board[1] if i == 1 else f"100{i}"})
                 for i in range(4))
    return Frame("c", "r1", node, t0 + ts, gpus)


# XID 48 on the old board; the board replaced at +10 s; the new board's XID 48 at +18 s.
FRAMES = [at(0, OLD, (48,)), at(5, OLD), at(10, NEW), at(18, NEW, (48,)), at(25, NEW)]


def check(store_alerts: list, hooks: list[dict], whole: bool = False) -> None:
    """``whole``: one batch held it all, and the old alert, opened and ended in it, is
    written (and notified) once, ended."""
    by_serial = {a.serial: a for a in store_alerts}
    assert set(by_serial) == {OLD[1], NEW[1]}
    old, new = by_serial[OLD[1]], by_serial[NEW[1]]
    assert (old.state, old.uuid, old.resolved_ts) == ("resolved", OLD[0], T0 + 18)
    assert old.evidence["xid_48_first_ts"] == T0 and old.evidence["xid_48_count"] == 1
    assert (new.state, new.uuid, new.started_ts) == ("firing", NEW[0], T0 + 18)
    assert new.evidence["xid_48_first_ts"] == T0 + 18 and new.evidence["xid_48_count"] == 1
    assert [(h["state"], h["board"]["serial"]) for h in hooks] == [
        ("firing", OLD[1])] * (not whole) + [("resolved", OLD[1]), ("firing", NEW[1])]


def hooks_of(receiver: Receiver) -> list[dict]:
    return [a for body in receiver.bodies for g in body["groups"]  # type: ignore[index]
            for a in g["alerts"]]


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_a_new_boards_xid_is_a_new_alert_notified(receiver: Receiver, tmp_path: Path,
                                                   batch: int) -> None:
    notifier = Notifier([WebhookSink(receiver.url)], background=False)
    store = tmp_store(tmp_path)
    processor = Processor(store, [XidEvents()], notifier=notifier)
    for k in range(0, len(FRAMES), batch):
        processor.process(FRAMES[k:k + batch])
    notifier.close()
    check(store.alerts(("pending", "firing", "resolved")), hooks_of(receiver),
          whole=batch == len(FRAMES))


def test_a_new_boards_xid_after_a_restart_is_a_new_alert(receiver: Receiver,
                                                         tmp_path: Path) -> None:
    notifier = Notifier([WebhookSink(receiver.url)], background=False)
    Processor(tmp_store(tmp_path), [XidEvents()], notifier=notifier).process(FRAMES[:3])
    again = Processor(tmp_store(tmp_path), [XidEvents()], notifier=notifier)  # a restart
    again.process(FRAMES[3:])
    notifier.close()
    check(again.store.alerts(("pending", "firing", "resolved")), hooks_of(receiver))


def test_alertmanager_has_the_new_boards_alert_firing(am: Server, tmp_path: Path) -> None:
    """One label set for both alerts there: the old one's end is posted before the new
    one, so the new one is what Alertmanager has firing (not ended with the old)."""
    node = f"node-swap-{time.time_ns()}"
    notifier = Notifier([AlertmanagerSink(f"http://{am.address}", resend_s=60)],
                        background=False)
    processor = Processor(tmp_store(tmp_path), [XidEvents()], notify=notifier.send)
    t0 = time.time() - 60
    processor.process([at(0, OLD, (48,), t0, node)])
    assert wait_for(lambda: am_alerts(am, node))
    processor.process([at(10, NEW, (), t0, node), at(18, NEW, (48,), t0, node)])
    new = time.strftime("%H:%M:%SZ", time.gmtime(t0 + 18))
    got = wait_for(lambda: [a for a in am_alerts(am, node)
                            if new in a["annotations"].get("summary", "")])
    notifier.close()
    assert [a["status"]["state"] for a in got] == ["active"]
    assert NEW[1] in got[0]["annotations"]["description"]
