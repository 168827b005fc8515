from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetwatch.models.gpu_errors import GpuErrors
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.models.xid_events import XidEvents
from fleetwatch.xids import XidTableError, describe, parse, xid_table
from tests.models.helpers import busy, node, rules

HEADER = "code,name,severity,rank,action,meaning\n"


@pytest.mark.parametrize("code, severity", [
    (79, "critical"), (48, "critical"), (94, "warning"), (95, "critical"), (63, "warning"),
    (64, "critical"), (74, "critical"), (92, "warning"), (119, "critical"), (120, "critical"),
    (13, "info"), (43, "info")])
def test_the_shipped_xid_table_classifies_the_codes_operators_meet(code: int,
                                                                   severity: str) -> None:
    x = xid_table()[code]
    assert x.severity == severity and x.action and x.meaning


def test_xid_79_says_drain_the_node() -> None:
    assert "Drain the node" in xid_table()[79].action


# The codes NVIDIA's Xid catalog for Ampere and newer GPUs lists as reported by an A100 or an
# H100 (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html; 108 is listed there
# as unused). A code the table lacks is only "warning, look it up".
A100_H100_CODES = (
    8, 11, 13, 14, 25, 31, 32, 37, 38, 39, 40, 41, 43, 44, 45, 46, 48, 54, 60, 62, 63, 64, 66,
    67, 68, 69, 70, 71, 72, 74, 75, 76, 77, 78, 79, 80, 82, 83, 84, 85, 86, 88, 89, 92, 93, 94,
    95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 109, 110, 119, 120, 136, 137,
    140, 141, 143, 151, 154, 156, 157, 158, 167, 168, 169, 171, 172)


def test_every_xid_an_a100_or_h100_reports_is_in_the_table() -> None:
    assert [c for c in A100_H100_CODES if c not in xid_table()] == []


@pytest.mark.parametrize("code, severity, says", [
    (158, "critical", "reset the GPU"),      # GPU fatal timeout: RESET_GPU
    (171, "critical", "reset the GPU"),      # the DRAM detail of an XID 48
    (172, "critical", "RMA"),                # SRAM: RMA flow past the SRAM threshold
    (136, "critical", "reset the GPU"),      # NVLink training failed: RESET_GPU
    (109, "critical", "reset the GPU"),      # context switch timeout: RESET_GPU
    (64, "critical", "reset the GPU"),       # reset first; RMA if the failure stays
    (121, "warning", "service window"),      # corrected C2C errors: no operational impact
    (44, "warning", "Nothing to do at once"),  # IGNORE, then CONTACT_SUPPORT
    (157, "warning", "RMA"),                 # no spare resources left
])
def test_the_table_follows_the_catalogs_resolution_buckets(code: int, severity: str,
                                                           says: str) -> None:
    x = xid_table()[code]
    assert x.severity == severity and says.lower() in x.action.lower()


@pytest.mark.parametrize("rows, message", [
    ("79,a,critical,5,b,c\n79,a,critical,5,b,c", "line 3: XID 79 is listed twice"),
    ("79,a,urgent,5,b,c", "line 2: severity 'urgent'"),
    ("x,a,info,0,b,c", "line 2: code 'x'"),
    ("79,a,info,0,b", "line 2: expected 6 columns"),
    ("79,,info,0,b,c", "line 2: name, action and meaning"),
    ("79,a,info,7,b,c", "line 2: rank '7' must be a whole number 0..6"),
    ("79,a,info,worst,b,c", "line 2: rank 'worst'"),
])
def test_xid_table_errors_name_the_line(rows: str, message: str) -> None:
    with pytest.raises(XidTableError, match=message):
        parse(HEADER + rows)


def test_real_kernel_log_xids_are_in_the_table(real_data: Path) -> None:
    codes = set()
    for log in (real_data / "failure_logs").glob("*.log"):
        codes |= {int(m) for m in re.findall(r"NVRM: Xid \([^)]*\): (\d+)", log.read_text())}
    assert codes >= {13, 43, 119}
    assert {describe(c).severity for c in (13, 43)} == {"info"}
    assert describe(119).severity == "critical"


def test_xids_become_latched_findings_split_by_severity() -> None:
    found = XidEvents().update([node(5, [busy(60), busy(60)], xids={1: (13, 13, 79)})])
    assert rules(found) == [("gpu_xid_info", 1), ("gpu_xid_critical", 1)]
    info, crit = found
    assert info.hold_s == 600 and crit.hold_s == 3600 and crit.for_s == 0
    assert crit.evidence["xid"] == 79 and crit.evidence["count"] == 1 and "Drain" in crit.action
    assert info.evidence["xid_13_count"] == 2
    assert "79 (GPU has fallen off the bus)" in crit.message


def test_an_unknown_xid_is_a_warning_that_names_it() -> None:
    found = XidEvents().update([node(5, [busy(60)], xids={0: (999,)})])
    assert rules(found) == [("gpu_xid_warning", 0)] and "999" in found[0].message


def test_a_double_bit_ecc_increase_is_critical_and_latched_but_old_ones_are_not_news() -> None:
    d = GpuErrors()
    assert d.update([node(0, [busy(60, gpu_ecc_dbe_volatile_total=2.0)])]) == []
    found = d.update([node(5, [busy(60, gpu_ecc_dbe_volatile_total=3.0)])])
    assert rules(found) == [("gpu_ecc_dbe", 0)]
    assert found[0].severity == "critical" and found[0].hold_s == 3600
    assert d.update([node(10, [busy(60, gpu_ecc_dbe_volatile_total=3.0)])]) == []


def test_row_remap_states_hold_while_reported() -> None:
    found = GpuErrors().update([node(0, [busy(60, gpu_row_remap_pending=1.0),
                                         busy(60, gpu_row_remap_failure=1.0), busy(60)])])
    assert rules(found) == [("gpu_row_remap_pending", 0), ("gpu_row_remap_failure", 1)]
    assert [f.severity for f in found] == ["warning", "critical"]


def test_pcie_replays_alarm_on_their_rate_not_their_total() -> None:
    d = GpuErrors()
    found = []
    for k in range(40):   # 5 replays a minute on a GPU with 10,000 from long ago: fine
        found += d.update([node(15.0 * k, [busy(60, gpu_pcie_replay_total=10_000 + 1.25 * k)])])
    assert found == []
    for k in range(40, 48):   # then 60 a minute
        found += d.update([node(15.0 * k, [busy(60, gpu_pcie_replay_total=10_050 + 15 * k)])])
    assert rules(found)[:1] == [("gpu_pcie_replay", 0)] and found[0].hold_s > 0


def test_nvlink_errors_and_links_down() -> None:
    d = GpuErrors()
    d.update([node(0, [busy(60, gpu_nvlink_recovery_errors_total=0.0,
                            gpu_nvlink_links_down=0.0)])])
    found = d.update([node(5, [busy(60, gpu_nvlink_recovery_errors_total=1.0,
                                    gpu_nvlink_links_down=2.0)])])
    assert rules(found) == [("gpu_nvlink_errors", 0), ("gpu_nvlink_down", 0)]


def test_a_lost_gpu_is_critical() -> None:
    found = GpuErrors().update([node(0, [busy(60), busy(60)], lost=[1])])
    assert rules(found) == [("gpu_lost", 1)] and found[0].severity == "critical"


def test_a_silent_node_is_judged_on_the_streams_own_clock() -> None:
    d = NodeSilence()
    found = []
    for k in range(40):               # a replay: 5 s frames, handed over far faster
        frames = [node(1000 + 5.0 * k, [busy(60)], name="a")]
        if k < 10:
            frames.append(node(1000 + 5.0 * k, [busy(60)], name="b"))
        found += d.update(frames)
    silent = [f for f in found if f.node == "b"]
    assert silent and all(f.scope == "node" and f.gpu is None for f in silent)
    assert silent[0].ts - 1045 >= 60                   # silent_min_s after its last frame
    assert not [f for f in found if f.node == "a"]
    d.drop(["b"])
    assert d.update([node(1300, [busy(60)], name="a")]) == []


def test_a_node_with_a_clock_far_ahead_does_not_make_the_others_silent() -> None:
    d = NodeSilence()
    for k in range(20):
        frames = [node(1000 + 5.0 * k, [busy(60)], name=n) for n in ("a", "b", "c")]
        frames.append(node(1e6 + 5.0 * k, [busy(60)], name="skewed"))
        assert d.update(frames) == []
