"""Rolling back, or a consumer group mixing releases (upgrader round 20, #2), against a real
Alertmanager notifying a webhook: a release before ``remedy`` posts an XID alert without
that label, so taking over one this release posted with it notifies it again, and the
``remedy`` set is later heard "resolved" while the alert is still open. With
``alerts.xid_remedy_label = false`` this release posts the older release's label set: a
rollback or a mixed group pages nobody, and turning it on later pages nobody either."""

from __future__ import annotations

import time

from fleetwatch.config import load
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.wiring import alert_sinks
from tests.servers import Server
from tests.sinks.conftest import Receiver
from tests.sinks.test_am_xid_escalation import legacy, xid_alert
from tests.sinks.test_am_xid_escalation_live import (  # noqa: F401 (hooked: a fixture)
    _post_raw,
    active,
    hooked,
    notified,
    until,
)


def _rollback(am: Server, receiver: Receiver, remedy_label: bool) -> tuple[str, int]:
    """This release posts an XID 48 alert; then an older release takes it over (re-sends
    it as it posts it). The node, and how many notifications its receivers got."""
    node = f"node-rollback-{remedy_label}-{time.time_ns()}"
    t0 = time.time() - 60
    sink = AlertmanagerSink(f"http://{am.address}", resend_s=60.0, remedy_label=remedy_label)
    sink.send([Notice(xid_alert(48, node=node, t0=t0))])
    assert until(lambda: notified(receiver, node))
    _post_raw(am, legacy(xid_alert(48, node=node, t0=t0)), t0)   # the older processor
    time.sleep(4.5)                                               # two group intervals
    return node, len(notified(receiver, node))


def test_a_rollback_re_notifies_an_xid_alert_posted_with_remedy(
        hooked: tuple[Server, Receiver]) -> None:  # noqa: F811 - the fixture
    am, receiver = hooked
    node, pages = _rollback(am, receiver, remedy_label=True)
    assert pages == 2                           # what the README's upgrade notes warn of
    assert sorted(a["labels"].get("remedy", "") for a in active(am, node)) == ["", "drain"]


def test_without_the_remedy_label_a_rollback_and_a_later_upgrade_page_nobody(
        hooked: tuple[Server, Receiver]) -> None:  # noqa: F811 - the fixture
    am, receiver = hooked
    node, pages = _rollback(am, receiver, remedy_label=False)
    assert pages == 1
    (live,) = active(am, node)
    assert "remedy" not in live["labels"]
    upgraded = AlertmanagerSink(f"http://{am.address}", resend_s=60.0)   # turned on again
    upgraded.adopt([Notice(xid_alert(48, node=node, t0=time.time() - 60))])
    upgraded.tick()
    time.sleep(4.5)
    assert len(notified(receiver, node)) == 1
    assert [a["labels"].get("remedy", "") for a in active(am, node)] == [""]


def test_the_setting_reaches_the_sink() -> None:
    config = load(None, env={"FLEETWATCH_ALERTS_ALERTMANAGER_URL": "http://127.0.0.1:9",
                             "FLEETWATCH_ALERTS_XID_REMEDY_LABEL": "false"})
    (sink,) = alert_sinks(config)
    assert isinstance(sink, AlertmanagerSink) and sink.remedy_label is False
    assert "remedy" not in sink._labels(xid_alert(48))
    assert load(None, env={}).alerts.xid_remedy_label is True
