"""An acknowledgement means "I have this": the acknowledged cause keeps muting the symptoms
it explains on its GPU (XID 79 the lost GPU), so an ack never pages a second alert of the
same GPU. A silence of the cause does not: it mutes what it matches, and a symptom it does
not match is still heard (see ``test_silences_heard_cover``)."""

from __future__ import annotations

from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.silences import mute
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from tests.recording_sink import Recording

XID79 = {"xid_79_count": 1.0, "xid_79_first_ts": 1000.0, "xid_79_last_ts": 1000.0}


def gpu(rule: str, fired: float, evidence: dict[str, float] | None = None) -> Alert:
    return Alert(f"{rule}/c/n1/gpu5/{fired:g}", rule, "critical", "c", "r1", "n1", "gpu5",
                 "firing", fired, fired, 1.0, f"{rule} on n1 gpu5", fired_ts=fired,
                 evidence=evidence or {})


def test_an_acknowledged_xid_79_still_mutes_the_lost_gpu() -> None:
    xid, lost = gpu("gpu_xid_critical", 1000.0, XID79), gpu("gpu_lost", 1005.0)
    acks = {xid.id: Acknowledgement(xid.id, 1010.0, "oncall")}
    assert mute(lost, [xid, lost], [], acks, 1020.0) == f"inhibited:{xid.id}"
    assert mute(xid, [xid, lost], [], acks, 1020.0) == "ack:oncall"


def test_a_silenced_xid_79_does_not_mute_the_lost_gpu() -> None:
    xid, lost = gpu("gpu_xid_critical", 1000.0, XID79), gpu("gpu_lost", 1005.0)
    quiet = [Silence("s1", (parse_matcher("rule=gpu_xid_critical"),), 0.0, 1e10, "ops", "")]
    assert mute(lost, [xid, lost], quiet, {}, 1020.0) == ""


def test_acknowledging_the_xid_pages_nothing_more_for_its_gpu() -> None:
    """The incident: XID 79 paged, the lost GPU muted under it; the on-call acks the XID:
    nothing is paged (the ack is recorded muted), not the lost GPU."""
    sink, acks = Recording(), []
    notifier = Notifier([sink], acks=lambda: list(acks), background=False, reload_s=0.0)
    xid, lost = gpu("gpu_xid_critical", 1000.0, XID79), gpu("gpu_lost", 1005.0)
    notifier.send([xid], now=1000.0)
    notifier.send([lost], now=1005.0)
    acks.append(Acknowledgement(xid.id, 1010.0, "oncall"))
    notifier.send([], now=1010.0)
    notifier.send([], now=1050.0)
    paged = [n.alert.rule for n in sink.sent if n.notify]
    assert paged == ["gpu_xid_critical"]
    assert [(n.alert.rule, n.muted_by) for n in sink.sent][-1] == (
        "gpu_xid_critical", "ack:oncall")
    # The cause resolves: what it covered is heard on its own.
    notifier.send([gpu_resolved(xid, 1200.0)], now=1200.0)
    assert [n.alert.rule for n in sink.sent if n.notify][-1:] == ["gpu_lost"]


def gpu_resolved(a: Alert, at: float) -> Alert:
    from dataclasses import replace
    return replace(a, state="resolved", updated_ts=at, resolved_ts=at)
