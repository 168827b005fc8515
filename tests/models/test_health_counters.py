"""GpuErrors on counters as NVML reads them: a field read that failed for a tick, pages
retired for single- and double-bit errors up to the retirement limit, a GPU reset that
zeroes the volatile ECC counters, and error rates that change during an episode."""

from __future__ import annotations

from fleetwatch.models.gpu_errors import GpuErrors
from tests.models.helpers import busy, node, rules


def _run(d: GpuErrors, samples: list[dict[str, float]], step: float = 10.0) -> list:
    found = []
    for k, m in enumerate(samples):
        found += d.update([node(step * k, [busy(60, **m)])])
    return found


def test_a_missing_nvlink_counter_reading_is_no_reading_not_a_drop() -> None:
    """CRC and replay totals flat, the replay field absent every 7th tick (its NVML field
    read failed): no counter moved, so no alert."""
    samples = []
    for k in range(120):
        m = {"gpu_nvlink_crc_errors_total": 1000.0, "gpu_nvlink_replay_errors_total": 500.0,
             "gpu_nvlink_recovery_errors_total": 0.0}
        if k % 7 == 4:
            del m["gpu_nvlink_replay_errors_total"]
        samples.append(m)
    assert _run(GpuErrors(), samples) == []


def test_a_missing_crc_reading_neither_hides_nor_invents_a_replay_rate() -> None:
    samples = []
    for k in range(30):   # replays at 60/min, the CRC field absent every other tick
        m = {"gpu_nvlink_crc_errors_total": 7.0, "gpu_nvlink_replay_errors_total": 10.0 * k}
        if k % 2:
            del m["gpu_nvlink_crc_errors_total"]
        samples.append(m)
    found = _run(GpuErrors(), samples)
    assert found and {f.rule for f in found} == {"gpu_nvlink_errors"}
    assert "replay" in found[-1].message


def test_a_missing_pcie_or_ecc_reading_raises_nothing() -> None:
    samples = []
    for k in range(60):
        m = {"gpu_pcie_replay_total": 300.0, "gpu_ecc_dbe_volatile_total": 2.0,
             "gpu_ecc_dbe_aggregate_total": 5.0, "gpu_retired_pages_sbe": 3.0,
             "gpu_retired_pages_dbe": 1.0}
        if k % 5 == 2:
            for name in list(m)[k % 3::2]:
                del m[name]
        samples.append(m)
    assert _run(GpuErrors(), samples) == []


def test_pages_retired_for_single_bit_errors_count_and_a_new_one_warns() -> None:
    d = GpuErrors()
    base = {"gpu_retired_pages_sbe": 4.0, "gpu_retired_pages_dbe": 0.0,
            "gpu_retired_pages_pending": 0.0}
    assert _run(d, [base]) == []
    found = d.update([node(10, [busy(60, **{**base, "gpu_retired_pages_sbe": 5.0})])])
    assert rules(found) == [("gpu_retired_pages", 0)]
    f = found[0]
    assert f.severity == "warning" and f.hold_s > 0
    assert "5 memory pages retired" in f.message and "limit of 64" in f.message
    assert f.value == 5.0
    # the SBE field unread this tick: its last reading still counts
    found = d.update([node(20, [busy(60, gpu_retired_pages_dbe=1.0,
                                    gpu_retired_pages_pending=1.0)])])
    assert rules(found) == [("gpu_retired_pages", 0)]
    assert found[0].message == ("GPU 0 on n1 (job job1): 6 memory pages retired (5 for "
                                "single-bit, 1 for double-bit errors) of the limit of 64; "
                                "a retirement waits for a GPU reset")


def test_retired_pages_near_the_limit_are_critical_with_an_rma_action() -> None:
    d = GpuErrors()
    found = _run(d, [{"gpu_retired_pages_sbe": 55.0 + k, "gpu_retired_pages_dbe": 4.0}
                     for k in range(5)])
    limit = [f for f in found if f.rule == "gpu_retired_pages_limit"]
    assert [f.ts for f in limit] == [10.0, 20.0, 30.0, 40.0]   # from 60 pages on
    assert all(f.severity == "critical" and "RMA" in f.action for f in limit)
    assert "63 memory pages retired" in limit[-1].message
    assert "limit of 64" in limit[-1].message
    # the retirements themselves still warn, the limit holds while the count stands
    assert _run(d, [{"gpu_retired_pages_sbe": 59.0, "gpu_retired_pages_dbe": 4.0}]) != []


def test_a_gpu_reset_seen_in_the_volatile_dbe_counter_ends_the_dbe_alert() -> None:
    """Volatile DBE 1 -> 0 with the aggregate unchanged: the GPU was reset, the finding
    that says "reset the GPU" lets its alert resolve (hold 0) instead of holding an hour."""
    d = GpuErrors()
    m = {"gpu_ecc_dbe_volatile_total": 0.0, "gpu_ecc_dbe_aggregate_total": 3.0}
    assert _run(d, [m]) == []
    dbe = d.update([node(10, [busy(60, gpu_ecc_dbe_volatile_total=1.0,
                                   gpu_ecc_dbe_aggregate_total=4.0)])])
    assert rules(dbe) == [("gpu_ecc_dbe", 0)] and dbe[0].hold_s == 3600
    assert d.update([node(20, [busy(60, gpu_ecc_dbe_volatile_total=1.0,
                                    gpu_ecc_dbe_aggregate_total=4.0)])]) == []
    reset = d.update([node(30, [busy(60, gpu_ecc_dbe_volatile_total=0.0,
                                      gpu_ecc_dbe_aggregate_total=4.0)])])
    assert rules(reset) == [("gpu_ecc_dbe", 0)]
    assert reset[0].hold_s == 0 and "reset" in reset[0].message
    # once only, and a GPU with no open DBE finding gets no such finding
    assert d.update([node(40, [busy(60, gpu_ecc_dbe_volatile_total=0.0,
                                    gpu_ecc_dbe_aggregate_total=4.0)])]) == []
    fresh = GpuErrors()
    assert _run(fresh, [{"gpu_ecc_dbe_volatile_total": 2.0, "gpu_ecc_dbe_aggregate_total": 2.0},
                        {"gpu_ecc_dbe_volatile_total": 0.0,
                         "gpu_ecc_dbe_aggregate_total": 2.0}]) == []


def test_rate_messages_follow_the_current_rate() -> None:
    d = GpuErrors()
    found = _run(d, [{"gpu_pcie_replay_total": 20.0 / 6 * k} for k in range(60)])
    assert found and all(f.rule == "gpu_pcie_replay" for f in found)
    assert "20 PCIe replays/min" in found[-1].message
    assert found[-1].evidence["replays_per_min"] == 20.0
    d = GpuErrors()
    found = _run(d, [{"gpu_pcie_replay_total": 20.0 / 6 * k} for k in range(30)]
                 + [{"gpu_pcie_replay_total": 100.0 + 60.0 / 6 * k} for k in range(30)])
    assert "60 PCIe replays/min" in found[-1].message


def test_nvlink_messages_say_the_counters_are_all_link_totals_and_how_to_find_the_link(
        ) -> None:
    found = _run(GpuErrors(), [{"gpu_nvlink_crc_errors_total": 200.0 / 6 * k,
                                "gpu_nvlink_replay_errors_total": 0.0} for k in range(30)])
    last = found[-1]
    assert "200 NVLink CRC errors/min" in last.message and "all links" in last.message
    assert "nvidia-smi nvlink -e -i 0" in last.action
    assert last.evidence["crc_errors_per_min"] == 200.0
