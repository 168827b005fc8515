"""The simulated GPU parts and their node, with where each number comes from.

Two parts (``PARTS``; ``SimParams.part``):

* ``a100``, an NVIDIA A100-SXM4-80GB. From a real ``nvidia-smi -q -x`` of one
  (``shared/data/gpu_telemetry/nvidia_smi_xml/telegraf_a100-sxm4-v12.xml``):
  500 W default/enforced power limit, slowdown at 89 °C, shutdown at 92 °C,
  SM clock up to 1410 MHz in 15 MHz steps, memory clock fixed at 1593 MHz,
  81920 MiB of HBM of which 871 MiB are reserved (total - used - free), no fan
  (SXM: the chassis cools it). At idle that GPU drew 67 W with the die at 27 °C
  and the HBM at 44 °C: HBM reads well above the die at idle and only a few
  degrees above it under load, as the HBM stacks share the cold plate with the
  die but sit further from it. The idle SM clock of 210 MHz is what the
  dcgm-exporter captures of idle parts show (``DCGM_FI_DEV_SM_CLOCK 210``).
* ``h100``, an NVIDIA H100 80GB HBM3 (SXM5), from fleetwatch's own agent on a
  real one (``tests/data/recorded/h100_gemm_load.jsonl.gz``: idle, 120 s of bf16
  matrix products, idle; ``h100_phases.jsonl.gz``: no kernel, copies, matrix
  products, a hung kernel): NVML's 700 W limit, slowdown 89 °C, shutdown 95 °C,
  81559 MiB of HBM of which 480 MiB reserved, memory clock 2619 MHz, SM clock
  345 MHz idle and up to 1980 MHz in 15 MHz steps. Idle it drew 72 W with the
  die at 36 °C and the HBM at 44 °C; clocked up with no kernel, 124 W; copying
  (SM 0.99, DRAM 0.90) 400 W at 1980 MHz with the HBM 9 °C above the die;
  under the matrix products (SM activity 0.96, tensor 0.93, DRAM 0.25) it held
  its 700 W cap at 1335-1410 MHz, the HBM a degree or two below the die.

Both parts live in the same simulated room: each rack's inlet air is 22 °C
give or take the day and the rack. The room around the two captures is not
known; each part's ``preheat_c`` is what the air that reaches the GPU must be
over a 22 °C inlet for its idle capture (the A100's 27 °C: none; the H100's
36 °C: 10 °C, what an HGX chassis's GPUs take from the air warmed ahead of
them), so a simulated part reads what its capture read, at idle and at load.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetwatch.catalogue import THROTTLE_FLAGS

MIB = 2**20


@dataclass(frozen=True, slots=True)
class Part:
    """One GPU part's numbers (see the module's docstring for where each comes from)."""

    name: str                 # the part's short name: a100, h100
    model: str                # NVML's product name
    fb_total: float           # bytes of HBM
    fb_reserved: float        # bytes the driver reserves
    power_limit_w: float
    slowdown_c: float
    shutdown_c: float
    sm_clock_idle: float
    sm_clock_max: float
    sm_clock_step: float
    mem_clock: float
    # Power (W): idle; clocking up from idle with no work (leakage at the boost clock);
    # the dynamic part at full activity and full clock (~ f * V^2, V rising with f).
    p_idle_w: float
    p_clocked_w: float
    p_dyn_w: float
    # What SM, tensor and DRAM activity each weigh in the activity p_dyn_w is the power of.
    act_w: tuple[float, float, float]
    # Heat, two nodes, die over heat sink: steady die = air + r_th * P, r_die_share of
    # it within a second (die to sink), the rest as the sink warms (tau_sink_s).
    r_th: float
    r_die_share: float
    tau_sink_s: float
    preheat_c: float          # the GPU's air over the rack's inlet (see above)
    # HBM: air + mem_base_c + mem_coupling * (die - air) + mem_dram_c * DRAM activity,
    # following the die within seconds (tau_mem_s).
    mem_base_c: float
    mem_coupling: float
    mem_dram_c: float
    tau_mem_s: float
    # Bytes/s each way at the links' peak: NVLink over all the GPU's links, and its PCIe
    # slot (what the job phases' link shares in ``jobs.py`` are shares of).
    nvlink_bytes_per_s: float
    pcie_bytes_per_s: float
    sms: int                  # streaming multiprocessors (a hung kernel holds a few)


# Dynamic power ~ f * V^2 and V rises with f over the DVFS range.
CLOCK_POWER_EXP = 2.5

A100 = Part(
    name="a100", model="NVIDIA A100-SXM4-80GB",
    fb_total=81920 * MIB, fb_reserved=871 * MIB, power_limit_w=500.0,
    slowdown_c=89.0, shutdown_c=92.0,
    sm_clock_idle=210.0, sm_clock_max=1410.0, sm_clock_step=15.0, mem_clock=1593.0,
    # Idle from the capture (~67 W; the Acme study: ~60 W per idle GPU); the dynamic part
    # takes a heavy training kernel to the 500 W limit, as the Acme study saw (A100s well
    # above their 400 W TDP).
    p_idle_w=62.0, p_clocked_w=15.0, p_dyn_w=520.0, act_w=(0.45, 0.45, 0.2),
    # 0.10 °C/W takes a 400 W GPU in 22 °C air to ~62 °C and the idle GPU to ~28 °C
    # (capture: 27), and a healthy GPU at its 500 W limit in the warmest allowed air
    # (ASHRAE's 27 °C) to just under its 85 °C max operating temperature. The die's
    # share and the sink's time constant are the real H100's (below): a single 45 s lag,
    # as this model had before, misses that H100's series by 9 °C.
    r_th=0.10, r_die_share=0.47, tau_sink_s=23.0, preheat_c=0.0,
    # 44 °C at idle (capture), a few degrees above a loaded die.
    mem_base_c=18.6, mem_coupling=0.65, mem_dram_c=4.0, tau_mem_s=5.0,
    # NVLink 3: 12 links x 25 GB/s each way (NVIDIA's A100 datasheet: 600 GB/s both ways);
    # PCIe 4.0 x16: 31.5 GB/s each way.
    nvlink_bytes_per_s=300e9, pcie_bytes_per_s=31.5e9,
    sms=108,                  # NVIDIA's A100 datasheet
)

H100 = Part(
    name="h100", model="NVIDIA H100 80GB HBM3",
    fb_total=81559 * MIB, fb_reserved=480 * MIB, power_limit_w=700.0,
    slowdown_c=89.0, shutdown_c=95.0,
    sm_clock_idle=345.0, sm_clock_max=1980.0, sm_clock_step=15.0, mem_clock=2619.0,
    # 72 W idle. The rest is a least-squares fit (errors relative to the reading) of
    # p_clocked and of W per unit of SM, tensor and DRAM activity at 1980 MHz to the
    # recorded phases' medians (activity; power at the recorded clock, dynamic power
    # ~ f^2.5):   no kernel, clocked      124.3 W            fit 124.3 W
    #             hung kernel, SM 0.060   130.0 W            fit 130.0 W
    #             copies, SM .99 DRAM .90 399.8 W at 1980    fit 399.8 W
    #             GEMM, .96/.93/.25       697.5 W at 1335    fit 680.8 W (-2.4%)
    #             the same, first visit   698.5 W at 1365    fit 714.3 W (+2.3%)
    # gives p_clocked 52 W and SM 96 W, tensor 1448 W, DRAM 201 W: tensor work costs
    # 7 times DRAM traffic, so a copy draws 400 W at full clock, and the GEMM (1,490 W
    # of dynamic power at 1980 MHz) is held at its 700 W cap at 1350 MHz (recorded: 1335
    # and 1365). SM activity's 96 W rests on the hung kernel alone (6 W over a clocked
    # GPU at SM 0.06, part of it perhaps the leakage of a die 6 °C warmer): the least
    # sure of the three. (The old law, 0.45 SM + 0.45 tensor + 0.2 DRAM fit to the GEMM
    # alone, drew 1,094 W for the copies.) The A100's weights are not fit to a recording.
    p_idle_w=72.0, p_clocked_w=52.0, p_dyn_w=1448.0, act_w=(0.066, 1.0, 0.139),
    # 72 -> 700 W took the die from 36 to 69.5 °C: 0.0535 °C/W, 47% of it within a
    # second, the rest with a 23 s time constant (fit within 1.1 °C).
    r_th=0.0535, r_die_share=0.47, tau_sink_s=23.0, preheat_c=10.0,
    # HBM over the GPU's air: a least-squares fit to five recorded states (the air
    # from each recording's die against power: 32.2 and 31.4 °C), each within 2.3 °C:
    # idle die 36 HBM 44; GEMM at 700 W die 69 HBM 67 and die 76 HBM 68 (DRAM 0.25);
    # copies at 400 W die 57 HBM 66 (DRAM 0.90); no kernel at 123 W die 40 HBM 43.
    # DRAM traffic heats the stacks themselves: full DRAM activity adds 12.5 °C to the
    # HBM on top of 0.6 of the die's rise (the die: 11 °C from the same 201 W).
    mem_base_c=8.3, mem_coupling=0.60, mem_dram_c=12.5, tau_mem_s=5.0,
    # NVLink 4: 18 links x 25 GB/s each way (the H100 SXM5 datasheet: 900 GB/s both ways);
    # PCIe 5.0 x16: 63 GB/s each way.
    nvlink_bytes_per_s=450e9, pcie_bytes_per_s=63e9,
    sms=132,                  # as PyTorch reported on the real one
)

PARTS: dict[str, Part] = {p.name: p for p in (A100, H100)}


def activity(pt: Part, sm: np.ndarray, tensor: np.ndarray, dram: np.ndarray) -> np.ndarray:
    """The share of ``p_dyn_w`` (full activity at the full clock) this activity draws."""
    w_sm, w_tensor, w_dram = pt.act_w
    return w_sm * sm + w_tensor * tensor + w_dram * dram


def part(name: str) -> Part:
    """The part by its short name; ValueError naming the ones there are."""
    try:
        return PARTS[name]
    except KeyError:
        raise ValueError(f"unknown simulated part {name!r}; the simulator has "
                         f"{', '.join(PARTS)}") from None


FLAG_IDLE = THROTTLE_FLAGS["gpu_idle"]
FLAG_POWER_CAP = THROTTLE_FLAGS["sw_power_cap"]
FLAG_THERMAL = THROTTLE_FLAGS["sw_thermal_slowdown"] | THROTTLE_FLAGS["hw_thermal_slowdown"]
# NVML reports a power brake as HW slowdown with the power-brake reason.
FLAG_POWER_BRAKE = THROTTLE_FLAGS["hw_slowdown"] | THROTTLE_FLAGS["hw_power_brake_slowdown"]

# Host: two sockets; RAPL package power idles ~140 W and rises with load.
HOST_MEM_TOTAL = 2.0 * 2**40
HOST_CPU_IDLE_W, HOST_CPU_W_PER_PCT = 140.0, 3.0
