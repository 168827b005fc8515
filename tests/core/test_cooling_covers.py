"""A cooling failure explains thermal symptoms, not hardware errors: a critical rack alert
muted every GPU alert of its rack, so an XID 79 (drain now) and an ECC DBE paged 20 min
late, when the rack resolved, and an XID 79 paged before the rack alert fired was paged a
second time then (postmortem D3). And a rack alert no processor judges any more (left
open in the store) muted its rack's GPU alerts for ever (postmortem D1)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.pipeline.inhibition import COOLING_EXPLAINS_RULES, STALE_COVER_S
from fleetwatch.pipeline.silences import mute
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.base import Alert
from tests.recording_sink import Recording

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"
HARDWARE = ("gpu_xid_critical", "gpu_lost", "gpu_ecc_dbe", "gpu_row_remap_pending",
            "gpu_nvlink_down", "gpu_xid_warning")


def alert(rule: str, node: str = "n1", device: str = "gpu0", rack: str = "r1",
          state: str = "firing", ts: float = 1000.0, severity: str = "critical") -> Alert:
    return Alert(f"{rule}/c/{node}/{device}/1", rule, severity, "c", rack, node, device,
                 state, 900.0, ts, 90.0, "msg", fired_ts=950.0)  # type: ignore[arg-type]


RACK = alert("rack_cooling", node="", device="rack:r1")
NODE_COOLING = alert("node_cooling", device="host")


@pytest.mark.parametrize("cover", [RACK, NODE_COOLING], ids=["rack", "node_cooling"])
def test_a_cooling_failure_mutes_thermal_symptoms_not_hardware_errors(cover: Alert) -> None:
    for rule in sorted(COOLING_EXPLAINS_RULES):
        assert mute(alert(rule), [cover], [], {}) == f"inhibited:{cover.id}", rule
    for rule in HARDWARE:
        assert mute(alert(rule), [cover], [], {}) == "", rule
    brake = dataclasses.replace(alert("gpu_hw_slowdown"), evidence={
        "throttle_reasons": float(THROTTLE_FLAGS["hw_power_brake_slowdown"])})
    assert mute(brake, [cover], [], {}) == ""
    # A GPU hotter than its own node's peers is its own cooling: it pages.
    peer = alert("gpu_hot_vs_peers", severity="warning")
    assert mute(alert("gpu_temp_critical"), [cover, peer], [], {}) == ""


def test_a_silent_node_still_mutes_every_gpu_alert_of_its_node() -> None:
    silent = alert("node_silent", device="host")
    for rule in (*HARDWARE, "gpu_temp_high"):
        assert mute(alert(rule), [silent], [], {}) == f"inhibited:{silent.id}"


def test_a_cover_nobody_judges_any_more_mutes_nothing() -> None:
    """A rack alert last written 80 min before a GPU alert of its rack (its processor gone,
    left open in the store) does not mute it; one written within the last minutes does."""
    ghost = dataclasses.replace(RACK, updated_ts=1000.0)
    late = alert("gpu_temp_high", ts=1000.0 + 80 * 60)
    assert mute(late, [ghost], [], {}) == ""
    assert mute(alert("gpu_temp_high", ts=1000.0 + STALE_COVER_S - 60), [ghost], [], {}) \
        == f"inhibited:{ghost.id}"
    silent = alert("node_silent", device="host", ts=1000.0)
    assert mute(alert("gpu_xid_critical", ts=1000.0 + 80 * 60), [silent], [], {}) == ""
    assert mute(alert("node_cooling", device="host", ts=1000.0 + 80 * 60), [ghost], [], {}) == ""


def test_an_alert_paged_before_its_cover_is_not_paged_again_when_the_cover_ends() -> None:
    """An XID alert paged, then muted by its node going silent: when the node is back, the
    unchanged XID alert is not a new page (the record sinks still hear it unmuted); one that
    fired while muted is paged then, once."""
    sink = Recording()
    notifier = Notifier([sink], background=False, reload_s=0.0)  # re-judged every send
    xid = alert("gpu_xid_critical", ts=1000.0)
    notifier.send([xid])
    assert [(n.alert.rule, n.notify) for n in sink.sent] == [("gpu_xid_critical", True)]
    silent = alert("node_silent", device="host", ts=1010.0)
    notifier.send([silent])
    later = alert("gpu_ecc_dbe", ts=1020.0)
    notifier.send([later], now=1020.0)
    del sink.sent[:]
    back = dataclasses.replace(silent, state="resolved", updated_ts=1300.0, resolved_ts=1300.0)
    notifier.send([back], now=1300.0)
    got = {n.alert.rule: (n.muted_by, n.notify) for n in sink.sent}
    assert got == {"node_silent": ("", True), "gpu_xid_critical": ("", False),
                   "gpu_ecc_dbe": ("", True)}
    # Changed since (a new revision, resolved): news again.
    del sink.sent[:]
    notifier.send([dataclasses.replace(xid, state="resolved", updated_ts=1400.0,
                                       resolved_ts=1400.0)], now=1400.0)
    assert [(n.alert.rule, n.alert.state, n.notify) for n in sink.sent] == [
        ("gpu_xid_critical", "resolved", True)]


def _targets(source: dict[str, object]) -> set[str]:
    rules = yaml.safe_load(CONFIG.read_text())["inhibit_rules"]
    out: set[str] = set()
    for rule in rules:
        if rule["source_matchers"] != source:
            continue
        for m in rule["target_matchers"]:
            found = re.fullmatch(r'alertname=~?"(.*)"', m)
            if found:
                out |= set(found[1].split("|"))
            elif m == 'scope="gpu"' and len(rule["target_matchers"]) == 1:
                out.add("*")
    return out


def test_the_shipped_alertmanager_rules_mute_what_fleetwatch_mutes_under_cooling() -> None:
    """The rack and node-cooling rules of deploy/alertmanager/alertmanager.yml target the
    thermal rules fleetwatch's cooling covers mute (less gpu_hw_slowdown, which labels
    cannot tell from a power brake: fleetwatch does not post the thermal ones it mutes),
    and no hardware rule; a silent node mutes every GPU alert of its node."""
    thermal = set(COOLING_EXPLAINS_RULES) - {"gpu_hw_slowdown"}
    assert _targets(['alertname="rack_cooling"', 'scope="rack"', 'severity="critical"']) \
        == thermal | {"node_cooling"}
    assert _targets(['alertname="rack_silent"', 'scope="rack"']) == {"node_silent"}
    assert _targets(['alertname="node_cooling"', 'scope="node"']) == thermal
    assert _targets(['alertname=~"node_silent|node_down"', 'scope="node"']) == {"*"}


RACK_DOWN = alert("rack_silent", node="", device="rack:r1")


def test_a_rack_gone_silent_mutes_its_silent_nodes_and_nothing_of_its_live_ones() -> None:
    """A PDU trip is one page: the rack's node_silent alerts are muted under its
    rack_silent (another rack's are not); the GPU alerts and node_cooling of a live node of
    the rack still page (the rack's power explains no heat), while a silent node's GPU
    alerts stay muted by its own node_silent."""
    silent = alert("node_silent", device="host")
    assert mute(silent, [RACK_DOWN], [], {}) == f"inhibited:{RACK_DOWN.id}"
    assert mute(alert("node_silent", device="host", rack="r2"), [RACK_DOWN], [], {}) == ""
    live = alert("gpu_temp_critical", node="n2")
    assert mute(live, [RACK_DOWN], [], {}) == ""
    assert mute(alert("node_cooling", node="n2", device="host"), [RACK_DOWN], [], {}) == ""
    assert mute(alert("gpu_xid_critical"), [RACK_DOWN, silent], [], {}) \
        == f"inhibited:{silent.id}"
    # A rack alert no processor re-judges any more mutes nothing.
    ghost = dataclasses.replace(RACK_DOWN, updated_ts=1000.0)
    late = dataclasses.replace(silent, updated_ts=1000.0 + STALE_COVER_S + 60)
    assert mute(late, [ghost], [], {}) == ""
