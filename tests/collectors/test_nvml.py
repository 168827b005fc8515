"""NVML reader over FakeNvml: units, unsupported -> absent, lost GPU, XID events, GPM fallback."""

from __future__ import annotations

import pynvml
import pytest

from fleetwatch.catalogue import catalogue
from fleetwatch.collectors.nvml import FakeNvml, NvmlReader, NvmlUnavailable
from fleetwatch.collectors.nvml import backend as b
from fleetwatch.collectors.nvml.fake_gpus import FieldError


def open_reader(nv: FakeNvml, errors: list[str] | None = None) -> NvmlReader:
    return NvmlReader.open(nv, on_error=None if errors is None else errors.append)


def test_units_are_converted_to_the_catalogue_units(monkeypatch) -> None:
    import fleetwatch.collectors.nvml.fake as fake

    now = [100.0]
    monkeypatch.setattr(fake.time, "monotonic", lambda: now[0])
    nv = FakeNvml.of(1)
    reader = NvmlReader.open(nv, clock=lambda: now[0])
    first = reader.read().gpus[0].metrics
    assert "gpu_pcie_tx_bytes_per_s" not in first  # a rate from counters needs two readings
    now[0] += 10.0
    [g] = reader.read().gpus
    m = g.metrics
    assert m["gpu_power_w"] == pytest.approx(612.345)            # mW -> W
    assert m["gpu_power_limit_w"] == pytest.approx(700.0)        # mW -> W
    assert m["gpu_power_default_limit_w"] == pytest.approx(700.0)  # mW -> W
    assert m["gpu_energy_j"] - first["gpu_energy_j"] == pytest.approx(6123.45)  # mJ -> J
    assert m["gpu_pcie_tx_bytes_per_s"] == pytest.approx(1_200 * 1024)  # bytes over 10 s
    assert m["gpu_pcie_rx_bytes_per_s"] == pytest.approx(3_400 * 1024)
    assert m["gpu_nvlink_tx_bytes_total"] == 9_000_000 * 1024    # KiB -> bytes
    assert m["gpu_fb_total_bytes"] == 85_520_809_984             # bytes stay bytes
    assert m["gpu_sm_active_ratio"] == pytest.approx(0.785)      # GPM percent -> ratio
    assert m["gpu_gr_engine_active_ratio"] == pytest.approx(0.86)
    assert m["gpu_slowdown_temp_c"] == 89 and m["gpu_shutdown_temp_c"] == 92
    assert m["gpu_nvlink_links_down"] == 0
    assert g.info == {"serial": "1650124014200", "pci_bus_id": "00000000:18:00.0",
                      "driver": "580.105.08", "mig_mode": "disabled", "profiling": "gpm"}
    assert g.state == "ok" and g.model == "NVIDIA H100 80GB HBM3"


def test_pcie_throughput_call_where_the_driver_has_no_byte_counters() -> None:
    nv = FakeNvml.of(1, model="l4")
    m = open_reader(nv).read().gpus[0].metrics
    assert m["gpu_pcie_tx_bytes_per_s"] == 1_200 * 1024  # KB/s -> bytes/s, from the first tick
    assert m["gpu_pcie_rx_bytes_per_s"] == 3_400 * 1024


def test_byte_counters_replace_the_blocking_throughput_call() -> None:
    nv = FakeNvml.of(1)
    errors: list[str] = []
    nv.fail(0, "pcie_throughput_kib_s", pynvml.NVMLError_Unknown())
    reader = open_reader(nv, errors)
    reader.read()
    reader.read()
    assert errors == []  # never called


def test_pcie_counter_wrap_skips_one_tick(monkeypatch) -> None:
    from fleetwatch.collectors.nvml import backend as nb

    nv = FakeNvml.of(1)
    now = [0.0]
    reader = NvmlReader.open(nv, clock=lambda: now[0])
    reader.read()
    nv.gpus[0].fields[nb.FI_PCIE_COUNT_TX_BYTES] = 5  # wrapped past 2^64 (or reset)
    now[0] += 5
    assert "gpu_pcie_tx_bytes_per_s" not in reader.read().gpus[0].metrics
    now[0] += 5
    assert "gpu_pcie_tx_bytes_per_s" in reader.read().gpus[0].metrics


def test_every_metric_is_a_catalogue_gpu_metric_within_range() -> None:
    cat = catalogue()
    for g in open_reader(FakeNvml.of(2)).read().gpus:
        for name, value in g.metrics.items():
            metric = cat[name]
            assert metric.scope == "gpu"
            assert metric.min <= value <= metric.max, name


def test_not_supported_is_absent_never_zero_and_not_asked_again() -> None:
    nv = FakeNvml.of(2)
    nv.fail(1, "temperature_c", pynvml.NVMLError_NotSupported())
    errors: list[str] = []
    reader = open_reader(nv, errors)
    gpus = reader.read().gpus
    assert "gpu_temp_c" not in gpus[1].metrics
    assert gpus[0].metrics["gpu_temp_c"] == 61
    assert "gpu_fan_pct" not in gpus[0].metrics  # SXM: no fan
    assert errors == []                           # not supported is not an error
    calls = nv.calls
    reader.read()
    second = nv.calls - calls
    reader.read()
    assert nv.calls - calls == 2 * second  # steady: the unsupported calls are not retried


def test_unsupported_field_is_dropped_from_the_batch() -> None:
    nv = FakeNvml.of(1)
    nv.gpus[0].fields[b.FI_ECC_DBE_VOL_TOTAL] = FieldError()
    reader = open_reader(nv)
    assert "gpu_ecc_dbe_volatile_total" not in reader.read().gpus[0].metrics
    asked = [fid for fid, *_ in reader._gpus[0].fields]
    assert b.FI_ECC_DBE_VOL_TOTAL not in asked and b.FI_ECC_SBE_VOL_TOTAL in asked


def test_other_errors_skip_the_metric_once_and_are_counted() -> None:
    nv = FakeNvml.of(1)
    errors: list[str] = []
    reader = open_reader(nv, errors)
    nv.fail(0, "power_usage_mw", pynvml.NVMLError_Unknown())
    assert "gpu_power_w" not in reader.read().gpus[0].metrics
    assert errors == ["unknown"]
    nv.set(0, "power_usage_mw", 500_000)
    assert reader.read().gpus[0].metrics["gpu_power_w"] == 500.0  # transient: asked again


def test_gpu_lost_mid_run_keeps_the_others_flowing() -> None:
    nv = FakeNvml.of(4)
    errors: list[str] = []
    reader = open_reader(nv, errors)
    assert all(g.state == "ok" for g in reader.read().gpus)
    nv.lose(2)
    for _ in range(3):
        gpus = reader.read().gpus
        assert [g.state for g in gpus] == ["ok", "ok", "lost", "ok"]
        assert gpus[2].metrics == {}
        assert gpus[2].uuid == nv.gpus[2].uuid  # still identified
        assert all(len(g.metrics) > 30 for g in gpus if g.state == "ok")
    assert errors.count("gpu_is_lost") == 1


def test_lost_in_the_middle_of_a_gpu_read_drops_its_partial_metrics() -> None:
    nv = FakeNvml.of(2)
    reader = open_reader(nv)
    nv.fail(1, "clock_mhz", pynvml.NVMLError_GpuIsLost())
    gpus = reader.read().gpus
    assert gpus[1].state == "lost" and gpus[1].metrics == {}
    assert gpus[0].state == "ok"


def test_gpu_lost_at_discovery() -> None:
    nv = FakeNvml.of(2)
    nv.lose(0)
    gpus = open_reader(nv).read().gpus
    assert [g.state for g in gpus] == ["lost", "ok"]


def test_pre_hopper_has_no_gpm_ratios_and_falls_back_for_gr_engine() -> None:
    nv = FakeNvml.of(1, model="l4")
    m = open_reader(nv).read().gpus[0].metrics
    for name in ("gpu_sm_active_ratio", "gpu_sm_occupancy_ratio", "gpu_tensor_active_ratio",
                 "gpu_dram_active_ratio"):
        assert name not in m
    assert m["gpu_gr_engine_active_ratio"] == pytest.approx(m["gpu_util_pct"] / 100)
    assert "gpu_mem_temp_c" not in m      # GDDR answers 0: absent, not 0 degrees
    assert "gpu_nvlink_tx_bytes_total" not in m and "gpu_nvlink_links_down" not in m


def test_gpm_needs_two_samples_like_the_real_one() -> None:
    nv = FakeNvml.of(1)
    reader = NvmlReader(nv)
    nv.init()
    reader._discover()  # takes the first sample
    assert "gpu_sm_active_ratio" in reader.read().gpus[0].metrics


def test_nvlink_down_counts_links() -> None:
    nv = FakeNvml.of(1)
    nv.set(0, "nvlink_active", {3: False, 7: False})
    assert open_reader(nv).read().gpus[0].metrics["gpu_nvlink_links_down"] == 2


def test_xid_events_are_drained_each_tick_none_lost() -> None:
    nv = FakeNvml.of(3)
    reader = open_reader(nv)
    for x in (13, 13, 43):
        nv.inject_xid(1, x)
    nv.inject_xid(2, 79)
    gpus = reader.read().gpus
    assert gpus[1].xids == (13, 13, 43) and gpus[2].xids == (79,) and gpus[0].xids == ()
    assert all(g.xids == () for g in reader.read().gpus)  # each event reported once


def test_pids_come_with_the_read() -> None:
    nv = FakeNvml.of(2)
    nv.gpus[1].pids = [1001, 1002]
    assert open_reader(nv).read().pids == {1: [1001, 1002]}


@pytest.mark.parametrize(("nv", "reason", "hint"), [
    (FakeNvml.missing(), "libnvidia-ml.so.1 not found", "install the NVIDIA driver"),
    (FakeNvml.mismatch(), "driver/library version mismatch", "reboot"),
    (FakeNvml([], init_error=pynvml.NVMLError_DriverNotLoaded()), "not loaded", "modprobe"),
    (FakeNvml([], init_error=pynvml.NVMLError_Unknown()), "nvmlInit failed", "nvidia-smi"),
], ids=["missing", "mismatch", "not-loaded", "unknown"])
def test_init_failures_say_what_to_do(nv: FakeNvml, reason: str, hint: str) -> None:
    with pytest.raises(NvmlUnavailable) as info:
        NvmlReader.open(nv)
    assert reason in info.value.reason and hint in info.value.hint
    assert "HINT:" in str(info.value)


def test_failure_while_listing_gpus_is_unavailable_too() -> None:
    nv = FakeNvml.of(2)
    nv.device_count = lambda: (_ for _ in ()).throw(pynvml.NVMLError_Unknown())  # type: ignore[method-assign]
    with pytest.raises(NvmlUnavailable, match="listing the GPUs"):
        NvmlReader.open(nv)


def test_fake_energy_counter_advances_with_power(monkeypatch) -> None:
    import fleetwatch.collectors.nvml.fake as fake

    now = [100.0]
    monkeypatch.setattr(fake.time, "monotonic", lambda: now[0])
    nv = FakeNvml.of(1)
    reader = open_reader(nv)
    e0 = reader.read().gpus[0].metrics["gpu_energy_j"]
    now[0] += 10.0
    e1 = reader.read().gpus[0].metrics["gpu_energy_j"]
    assert e1 - e0 == pytest.approx(612.345 * 10.0)  # W x s = J


def test_gpus_without_nvml_xid_events_are_one_line_saying_where_xids_come_from(caplog) -> None:
    from fleetwatch.collectors.nvml import FakeNvml
    from fleetwatch.collectors.nvml.reader import NvmlReader

    caplog.set_level("INFO")
    for kernel_log, said in ((False, "agent.kernel_log is off"),
                             (True, "from the kernel log only")):
        caplog.clear()
        nv = FakeNvml.of(3)
        for i in range(3):
            nv.set(i, "register_events", False)
        NvmlReader.open(nv, kernel_log=kernel_log).close()
        lines = [m for m in caplog.messages if "XID events through NVML" in m]
        assert len(lines) == 1 and said in lines[0] and lines[0].startswith("GPU 0 (")
