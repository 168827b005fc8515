"""The room's air (``room_inlet_hot``): one finding for the cluster from its nodes' inlet
sensors, warning above ASHRAE's recommended 27 °C, critical above class A1's 32 °C."""

from __future__ import annotations

from dataclasses import replace

from fleetwatch.frame import Frame, HostReading
from fleetwatch.models.room import RoomInlet
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

THERMAL = 32.0 + 64.0  # sw_thermal_slowdown | hw_thermal_slowdown


def fleet(ts: float, inlets: list[float | None], throttle: int = 0) -> list[Frame]:
    """Nodes n0.. of racks r0, r0, r1, r1, ..., each with an inlet reading (None: no sensor);
    ``throttle`` GPUs of the first node throttling for heat."""
    out = []
    for i, v in enumerate(inlets):
        gpus = [busy(80.0, gpu_throttle_reasons=THERMAL if i == 0 and g < throttle else 0.0)
                for g in range(4)]
        f = node(ts, gpus, name=f"n{i}", rack=f"r{i // 2}")
        out.append(replace(f, host=HostReading({} if v is None else {"host_inlet_temp_c": v})))
    return out


def test_a_warm_room_is_one_warning_for_the_cluster_naming_the_inlet_and_the_throttling(
        ) -> None:
    d = RoomInlet()
    [f] = d.update(fleet(100.0, [28.5, 29.0, 28.0, 40.0], throttle=3))
    assert (f.rule, f.cluster, f.rack, f.node, f.scope, f.severity) == \
        ("room_inlet_hot", "c", "*", "", "rack", "warning")
    assert f.value == 28.75 and f.evidence["gpus_thermal_throttling"] == 3
    assert "28.8 °C" in f.message and "3 of 16 GPUs throttle" in f.message
    assert "Facility cooling" in f.action
    [f] = d.update(fleet(115.0, [33.0, 33.5, 32.5, 34.0]))
    assert f.severity == "critical" and "32 °C allowable" in f.message


def test_a_room_within_the_envelope_or_one_hot_node_or_no_sensor_says_nothing() -> None:
    d = RoomInlet()
    assert d.update(fleet(100.0, [24.0, 25.0, 26.5, 45.0])) == []  # one node: its rack's
    assert d.update(fleet(115.0, [None, None, None, None])) == []
    assert RoomInlet().update(fleet(100.0, [30.0, 30.0])) == []   # too few sensors to say


def test_the_room_finding_holds_until_the_air_is_clearly_under_its_line() -> None:
    d = RoomInlet()
    assert d.update(fleet(100.0, [27.5] * 4))
    assert d.update(fleet(115.0, [26.5] * 4))  # hovering at the line: still one finding
    assert d.update(fleet(130.0, [25.5] * 4)) == []


def test_the_room_alert_opens_fires_and_resolves_over_the_cluster() -> None:
    """The room's alert (``rack:*``) is judged on every rack's frames: it resolves."""
    d = RoomInlet(replace_for(0.0))
    book = AlertBook(requirements=d.rules)
    changes = []
    for k, v in enumerate([30.0, 30.0, 30.0, 22.0, 22.0]):
        frames = fleet(100.0 + 15 * k, [v] * 4)
        step = book.observe(frames, d.update(frames))
        book.apply(step)
        changes += step
    states = [(a.rule, a.device, a.state) for a in changes]
    assert ("room_inlet_hot", "rack:*", "firing") in states
    assert states[-1] == ("room_inlet_hot", "rack:*", "resolved")


def replace_for(for_s: float):  # noqa: ANN201 - a config with the room's hold changed
    from fleetwatch.config import DetectorsConfig

    return replace(DetectorsConfig(), room_inlet_for_s=for_s)


def test_a_room_alert_once_critical_stays_critical_until_it_clears() -> None:
    """Severity is a label: a room swinging about 32 °C must not flip its alert between
    warning and critical (each flip a new label set, a new page, in Alertmanager)."""
    d = RoomInlet()
    severities = [f.severity for k, v in enumerate([30.0, 33.0, 31.0, 32.5, 28.0])
                  for f in d.update(fleet(100.0 + 15 * k, [v] * 4))]
    assert severities == ["warning", "critical", "critical", "critical", "critical"]
    [f] = d.update(fleet(200.0, [28.0] * 4))
    # The message names the line its severity refers to.
    assert f.severity == "critical" and "28.0 °C" in f.message
    assert ("back under the 32 °C allowable limit, critical until it stays 1 °C under it "
            "for 300 s") in f.message
    assert d.update(fleet(215.0, [25.0] * 4)) == []
    [f] = d.update(fleet(230.0, [28.0] * 4))
    assert f.severity == "warning"  # a new alert


def test_a_room_back_in_the_warning_band_drops_to_a_warning_after_its_hold() -> None:
    """A critical room alert stayed critical for 18 h after the air fell back to 29 to
    31 °C, muting GPU thermal alerts as a critical room does: it drops to a warning once
    the air has stayed 1 °C under the critical line for room_inlet_for_s (300 s)."""
    d = RoomInlet()
    [f] = d.update(fleet(0.0, [38.0] * 4))
    assert f.severity == "critical"
    seen = [(t, f.severity) for t in range(15, 1200, 15)
            for f in d.update(fleet(float(t), [31.5 if t < 300 else 30.0] * 4))]
    # 31.5 °C is within 1 °C of the line: critical; 30 °C from 300 s: warning at 600 s.
    assert {s for t, s in seen if t < 600} == {"critical"}
    assert {s for t, s in seen if t >= 600} == {"warning"}
    [f] = d.update(fleet(1215.0, [30.0] * 4))
    assert "above the 27 °C recommended limit" in f.message and f.severity == "warning"
    # A swing back over 32 °C is critical again at once.
    [f] = d.update(fleet(1230.0, [32.5] * 4))
    assert f.severity == "critical"
    # A dip under the line shorter than the hold keeps it critical.
    assert [f.severity for t in (1245.0, 1260.0) for f in d.update(fleet(t, [30.0] * 4))] \
        == ["critical", "critical"]
    [f] = d.update(fleet(1275.0, [31.2] * 4))
    assert f.severity == "critical"
    assert [f.severity for f in d.update(fleet(1290.0 + 300, [30.0] * 4))] == ["critical"]
    assert [f.severity for f in d.update(fleet(1290.0 + 600, [30.0] * 4))] == ["warning"]


def test_the_room_alert_itself_turns_warning_and_stays_one_alert() -> None:
    d = RoomInlet(replace_for(60.0))
    book = AlertBook(requirements=d.rules)
    for k, v in enumerate([38.0] * 8 + [30.0] * 12):
        frames = fleet(15.0 * k, [v] * 4)
        book.apply(book.observe(frames, d.update(frames)))
    [alert] = [a for a in book.open if a.rule == "room_inlet_hot"]
    assert (alert.state, alert.severity) == ("firing", "warning")
    assert "above the 27 °C recommended limit" in alert.message
