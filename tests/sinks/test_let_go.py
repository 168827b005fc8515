"""A rack alert whose rack another member judges now (a rebalance) is let go: its sinks are
told (Alertmanager's and the webhook's re-sends stop there), and the notifier holds it no
longer, so a later change of it is news again should the rack come back to this member."""

from __future__ import annotations

from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Alert


# Not ``tests.recording_sink.Recording``: these tests need the order of sends, adoptions and
# let-gos, not the changes alone.
class Recording:
    name, notify_only = "recording", True

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def send(self, changes) -> None:  # noqa: ANN001
        self.calls.append(("send", [n.alert.id for n in changes]))

    def adopt(self, alerts) -> None:  # noqa: ANN001
        self.calls.append(("adopt", [n.alert.id for n in alerts]))

    def let_go(self, ids) -> None:  # noqa: ANN001
        self.calls.append(("let_go", sorted(ids)))

    def close(self) -> None:
        pass


RACK = Alert("rack_silent/c//rack:r1/1000", "rack_silent", "critical", "c", "r1", "",
             "rack:r1", "firing", 1000.0, 1000.0, 3.0, "Rack r1: 3 of its 4 nodes",
             fired_ts=1000.0)


def test_a_rack_alert_let_go_reaches_the_sinks_and_leaves_the_notifier() -> None:
    sink = Recording()
    notifier = Notifier([sink], background=False)
    notifier.adopt([RACK])
    notifier.let_go([RACK])
    assert sink.calls == [("adopt", [RACK.id]), ("let_go", [RACK.id])]
    # Taken back later and changed: forwarded, not deduplicated as already sent.
    notifier.send([RACK])
    assert sink.calls[-1] == ("send", [RACK.id])

