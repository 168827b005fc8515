"""The simulated GPU part and its node, with where each number comes from.

The GPU is an NVIDIA A100-SXM4-80GB. From a real ``nvidia-smi -q -x`` of one
(``shared/data/gpu_telemetry/nvidia_smi_xml/telegraf_a100-sxm4-v12.xml``):
500 W default/enforced power limit (100 W minimum), slowdown at 89 °C,
shutdown at 92 °C, max operating 85 °C, memory max operating 95 °C, SM clock
up to 1410 MHz in 15 MHz steps, memory clock fixed at 1593 MHz, 81920 MiB of
HBM of which 871 MiB are reserved (total - used - free), no fan (SXM: the
chassis cools it), retired pages N/A (Ampere remaps rows instead). At idle
that GPU drew 67 W with the die at 27 °C and the HBM at 44 °C: HBM reads
well above the die at idle and only a few degrees above it under load, as the
HBM stacks share the cold plate with the die but sit further from it.
The idle SM clock of 210 MHz is what the dcgm-exporter captures of idle
parts show (``DCGM_FI_DEV_SM_CLOCK 210``).
"""

from __future__ import annotations

from fleetwatch.catalogue import THROTTLE_FLAGS

MODEL = "NVIDIA A100-SXM4-80GB"
MIB = 2**20
FB_TOTAL = 81920 * MIB
FB_RESERVED = 871 * MIB
POWER_LIMIT_W = 500.0
POWER_LIMIT_MIN_W = 100.0
MAX_OPERATING_C, SLOWDOWN_C, SHUTDOWN_C = 85.0, 89.0, 92.0
MEM_MAX_OPERATING_C = 95.0
SM_CLOCK_IDLE, SM_CLOCK_MAX, SM_CLOCK_STEP = 210.0, 1410.0, 15.0
MEM_CLOCK = 1593.0
NVLINKS = 12  # third-generation NVLink: 12 links per A100

# Power model (W). Idle from the capture (~67 W; the Acme study: ~60 W per idle
# GPU); clocking up from idle to the boost clock costs some leakage on its own;
# the dynamic part at full activity is what takes a heavy training kernel to the
# 500 W limit, as the Acme study saw (A100s well above their 400 W TDP).
P_IDLE_W = 62.0
P_CLOCKED_W = 15.0
P_DYN_W = 520.0
# Dynamic power ~ f * V^2 and V rises with f over the DVFS range.
CLOCK_POWER_EXP = 2.5

# Thermal model: two nodes, die and heat sink. In steady state die = inlet + R * P;
# 0.10 °C/W takes a 400 W GPU in 22 °C air to ~62 °C and the idle GPU to ~28 °C
# (capture: 27), and a healthy GPU at its 500 W limit in the warmest allowed air
# (ASHRAE's 27 °C) to just under the 85 °C max operating temperature.
# How the die gets there, from a real H100 stepping from 72 to 700 W and back
# (tests/data/recorded/h100_gemm_load.jsonl.gz, fit to its 1 s readings within 1.1 °C):
# 47% of the rise comes within a second (die to heat sink: the die follows its power),
# the rest as the heat sink warms, with a 23 s time constant. A single 45 s lag, as
# this model had before, misses that series by 9 °C.
R_TH = 0.10
R_DIE_SHARE = 0.47
TAU_SINK_S = 23.0
# HBM follows the die within seconds on the same part (fit: 4 s).
TAU_MEM_S = 5.0
# HBM: inlet + MEM_BASE + MEM_COUPLING * (die - inlet) (+ its own DRAM heat):
# 44 °C at idle (capture), a few degrees above a loaded die.
MEM_BASE_C = 18.6
MEM_COUPLING = 0.65
MEM_DRAM_C = 4.0

FLAG_IDLE = THROTTLE_FLAGS["gpu_idle"]
FLAG_POWER_CAP = THROTTLE_FLAGS["sw_power_cap"]
FLAG_THERMAL = THROTTLE_FLAGS["sw_thermal_slowdown"] | THROTTLE_FLAGS["hw_thermal_slowdown"]
# NVML reports a power brake as HW slowdown with the power-brake reason.
FLAG_POWER_BRAKE = THROTTLE_FLAGS["hw_slowdown"] | THROTTLE_FLAGS["hw_power_brake_slowdown"]

# Host: two sockets; RAPL package power idles ~140 W and rises with load.
HOST_MEM_TOTAL = 2.0 * 2**40
HOST_CPU_IDLE_W, HOST_CPU_W_PER_PCT = 140.0, 3.0
