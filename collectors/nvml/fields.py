"""What the NVML reader asks for, as data: field ids, GPM metrics and per-tick calls.

Each entry maps an NVML answer to one of our catalogue names and the factor
that turns NVML's unit into ours (units from nvml.h).
"""

from __future__ import annotations

from fleetwatch.collectors.nvml import backend as b

KIB = 1024.0  # NVML's "KB/s" and "KiB" are 1024 bytes (nvml.h; nvitop converts the same way)

# (field id, scope, our metric name, factor to our unit)
FIELDS: tuple[tuple[int, int, str, float], ...] = (
    (b.FI_ECC_SBE_VOL_TOTAL, 0, "gpu_ecc_sbe_volatile_total", 1.0),
    (b.FI_ECC_DBE_VOL_TOTAL, 0, "gpu_ecc_dbe_volatile_total", 1.0),
    (b.FI_ECC_SBE_AGG_TOTAL, 0, "gpu_ecc_sbe_aggregate_total", 1.0),
    (b.FI_ECC_DBE_AGG_TOTAL, 0, "gpu_ecc_dbe_aggregate_total", 1.0),
    (b.FI_RETIRED_SBE, 0, "gpu_retired_pages_sbe", 1.0),
    (b.FI_RETIRED_DBE, 0, "gpu_retired_pages_dbe", 1.0),
    (b.FI_RETIRED_PENDING, 0, "gpu_retired_pages_pending", 1.0),
    (b.FI_MEMORY_TEMP, 0, "gpu_mem_temp_c", 1.0),
    (b.FI_TOTAL_ENERGY_MJ, 0, "gpu_energy_j", 1e-3),
    (b.FI_PCIE_REPLAY_COUNTER, 0, "gpu_pcie_replay_total", 1.0),
    (b.FI_REMAPPED_COR, 0, "gpu_remapped_rows_correctable", 1.0),
    (b.FI_REMAPPED_UNC, 0, "gpu_remapped_rows_uncorrectable", 1.0),
    (b.FI_REMAPPED_PENDING, 0, "gpu_row_remap_pending", 1.0),
    (b.FI_REMAPPED_FAILURE, 0, "gpu_row_remap_failure", 1.0),
)
NVLINK_FIELDS: tuple[tuple[int, int, str, float], ...] = (
    (b.FI_NVLINK_CRC_FLIT_ERROR_TOTAL, 0, "gpu_nvlink_crc_errors_total", 1.0),
    (b.FI_NVLINK_REPLAY_ERROR_TOTAL, 0, "gpu_nvlink_replay_errors_total", 1.0),
    (b.FI_NVLINK_RECOVERY_ERROR_TOTAL, 0, "gpu_nvlink_recovery_errors_total", 1.0),
    (b.FI_NVLINK_THROUGHPUT_DATA_TX_KIB, b.SCOPE_ALL_LINKS, "gpu_nvlink_tx_bytes_total", KIB),
    (b.FI_NVLINK_THROUGHPUT_DATA_RX_KIB, b.SCOPE_ALL_LINKS, "gpu_nvlink_rx_bytes_total", KIB),
    # Summed into gpu_nvlink_raw_bytes_total when both answer (RAW_PARTS).
    (b.FI_NVLINK_THROUGHPUT_RAW_TX_KIB, b.SCOPE_ALL_LINKS, "_nvlink_raw_tx", KIB),
    (b.FI_NVLINK_THROUGHPUT_RAW_RX_KIB, b.SCOPE_ALL_LINKS, "_nvlink_raw_rx", KIB),
)
RAW_PARTS = ("_nvlink_raw_tx", "_nvlink_raw_rx")
# Byte counters turned into the rates of the catalogue; where the driver has them they
# replace the two blocking nvmlDeviceGetPcieThroughput calls (~20 ms each).
PCIE_COUNTERS: tuple[tuple[int, int, str, float], ...] = (
    (b.FI_PCIE_COUNT_TX_BYTES, 0, "gpu_pcie_tx_bytes_per_s", 1.0),
    (b.FI_PCIE_COUNT_RX_BYTES, 0, "gpu_pcie_rx_bytes_per_s", 1.0),
)
PCIE_PROBES = ("pcie_tx", "pcie_rx")
GPM: tuple[tuple[int, str], ...] = (
    (b.GPM_SM_UTIL, "gpu_sm_active_ratio"),
    (b.GPM_SM_OCCUPANCY, "gpu_sm_occupancy_ratio"),
    (b.GPM_ANY_TENSOR_UTIL, "gpu_tensor_active_ratio"),
    (b.GPM_DRAM_BW_UTIL, "gpu_dram_active_ratio"),
    (b.GPM_GRAPHICS_UTIL, "gpu_gr_engine_active_ratio"),
)
GPM_IDS = [mid for mid, _ in GPM]
# The per-tick calls: (key, our metric names, backend method, extra args, factor to our unit).
# A call that answers a tuple (factor 0) fills one name per element, skipping None.
PROBES: tuple[tuple[str, tuple[str, ...], str, tuple[int, ...], float], ...] = (
    ("utilization", ("gpu_util_pct", "gpu_mem_copy_util_pct"), "utilization", (), 0.0),
    ("memory", ("gpu_fb_total_bytes", "gpu_fb_free_bytes", "gpu_fb_used_bytes",
                "gpu_fb_reserved_bytes"), "memory", (), 0.0),
    ("power", ("gpu_power_w",), "power_usage_mw", (), 1e-3),
    ("temperature", ("gpu_temp_c",), "temperature_c", (), 1.0),
    ("sm_clock", ("gpu_sm_clock_mhz",), "clock_mhz", (b.CLOCK_SM,), 1.0),
    ("mem_clock", ("gpu_mem_clock_mhz",), "clock_mhz", (b.CLOCK_MEM,), 1.0),
    ("clocks_event_reasons", ("gpu_throttle_reasons",), "clocks_event_reasons", (), 1.0),
    ("fan", ("gpu_fan_pct",), "fan_speed_pct", (), 1.0),
    # nvmlDeviceGetPcieThroughput: KB/s over a 20 ms window.
    ("pcie_tx", ("gpu_pcie_tx_bytes_per_s",), "pcie_throughput_kib_s", (b.PCIE_TX,), KIB),
    ("pcie_rx", ("gpu_pcie_rx_bytes_per_s",), "pcie_throughput_kib_s", (b.PCIE_RX,), KIB),
    ("encoder", ("gpu_enc_util_pct",), "encoder_util_pct", (), 1.0),
    ("decoder", ("gpu_dec_util_pct",), "decoder_util_pct", (), 1.0),
)
