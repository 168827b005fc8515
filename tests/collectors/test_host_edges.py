"""Host and InfiniBand sources on the edges a host engineer meets: saturated and wrapping
counters, hot-removed and hot-added HCAs, failing sensors, many NICs, IPoIB."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from fleetwatch.collectors.counters import counter_delta
from fleetwatch.collectors.infiniband import SATURATED_32, InfinibandSource, word_rate
from tests.collectors.conftest import Clock


def ib_port(sys: Path, hca: str, rcv: int = 0, xmit: int = 0, state: str = "4: ACTIVE") -> None:
    base = sys / "class" / "infiniband" / hca / "ports" / "1"
    (base / "counters").mkdir(parents=True, exist_ok=True)
    (base / "state").write_text(state + "\n")
    for name, value in (("symbol_error", 0), ("link_downed", 0), ("port_rcv_errors", 0),
                        ("port_rcv_data", rcv), ("port_xmit_data", xmit)):
        (base / "counters" / name).write_text(f"{value}\n")


def test_a_saturated_32_bit_data_counter_is_unknown_not_idle(
        tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    sys = tmp_path / "sys"
    ib_port(sys, "mlx5_1", rcv=1000, xmit=SATURATED_32 - 250_000_000)
    src = InfinibandSource(sys, clock)
    src.read()
    for _ in range(3):  # climbs into 0xFFFFFFFF, then stays there while the link is busy
        clock.advance(2)
        ib_port(sys, "mlx5_1", rcv=1000, xmit=SATURATED_32)
        [port] = src.read()
        assert "ib_tx_bytes_per_s" not in port.metrics
        assert port.metrics["ib_rx_bytes_per_s"] == 0.0  # the other direction still reads
    said = [r for r in caplog.records if "0xFFFFFFFF" in r.getMessage()]
    assert len(said) == 1 and "mlx5_1/1" in said[0].getMessage()
    assert "port_xmit_data" in said[0].getMessage()


def test_counter_wrap_gives_the_modular_rate_and_a_reset_gives_none() -> None:
    # IB 64-bit PortCountersExtended wraps at 2^64 (words): the right rate across it.
    before = (1 << 64) - 3_125_000_000
    assert word_rate(before, 3_125_000_000, 2.0) == pytest.approx(12.5e9)
    # 32-bit IB counters saturate, they never wrap: a smaller value is a reset.
    assert word_rate(3_000_000_000, 5, 2.0) is None
    # NIC driver 32-bit counter wrapping, and a reset far from the top.
    assert counter_delta((1 << 32) - 1_000_000, 1_000_000, 32) == 2_000_000
    assert counter_delta(1_000_000, 500, 32) is None
    assert counter_delta(float(1 << 40), 500, 32) is None


def test_a_64_bit_ib_counter_wrap_reads_right_through_the_source(tmp_path: Path,
                                                                 clock: Clock) -> None:
    sys = tmp_path / "sys"
    ib_port(sys, "mlx5_0", rcv=(1 << 64) - 6_250_000_000)
    src = InfinibandSource(sys, clock)
    src.read()
    clock.advance(4)
    ib_port(sys, "mlx5_0", rcv=6_250_000_000)
    [port] = src.read()
    assert port.metrics["ib_rx_bytes_per_s"] == pytest.approx(12.5e9)


def test_a_removed_hca_is_said_once_and_dropped_and_a_new_one_is_read_next_tick(
        tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    sys = tmp_path / "sys"
    ib_port(sys, "mlx5_0")
    ib_port(sys, "mlx5_1")
    src = InfinibandSource(sys, clock)
    assert [p.name for p in src.read()] == ["mlx5_0/1", "mlx5_1/1"]
    shutil.rmtree(sys / "class" / "infiniband" / "mlx5_1")
    ib_port(sys, "mlx5_4")
    for _ in range(3):
        clock.advance(5)
        ports = src.read()
        assert [p.name for p in ports] == ["mlx5_0/1", "mlx5_4/1"]
        assert all(p.metrics["ib_port_active"] == 1.0 for p in ports)
    gone = [r for r in caplog.records if "mlx5_1" in r.getMessage()]
    assert len(gone) == 1 and "gone" in gone[0].getMessage()
    assert "mlx5_1/1" not in src._prev


def test_an_unreadable_port_state_is_said_once(tmp_path: Path, clock: Clock,
                                              caplog: pytest.LogCaptureFixture) -> None:
    sys = tmp_path / "sys"
    ib_port(sys, "mlx5_0")
    state = sys / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "state"
    state.unlink()
    state.mkdir()  # reading it fails (EISDIR), as a failing sysfs attribute does
    src = InfinibandSource(sys, clock)
    for _ in range(3):
        [port] = src.read()
        assert "ib_port_active" not in port.metrics
    assert sum("state unreadable" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING) == 1


def host_tree(root: Path, nics: dict[str, tuple[int, int]], vfs: tuple[str, ...] = (),
              ipoib: tuple[str, ...] = ()) -> tuple[Path, Path]:
    proc, sys = root / "proc", root / "sys"
    (proc / "net").mkdir(parents=True, exist_ok=True)
    for name in nics:
        dev = sys / "class" / "net" / name / "device"
        dev.mkdir(parents=True, exist_ok=True)
        if name in vfs:
            (dev / "physfn").mkdir(exist_ok=True)
        (sys / "class" / "net" / name / "type").write_text("32\n" if name in ipoib else "1\n")
    rows = "".join(f"{n}: {rx} 1 0 0 0 0 0 0 {tx} 1 0 0 0 0 0 0\n" for n, (rx, tx) in nics.items())
    (proc / "net" / "dev").write_text("h1\nh2\n" + rows)
    return proc, sys


def test_a_32_bit_nic_counter_wrap_gives_the_right_rate(tmp_path: Path, clock: Clock) -> None:
    from fleetwatch.collectors.host import HostSource

    proc, sys = host_tree(tmp_path, {"eth0": ((1 << 32) - 2_000_000, 0)})
    src = HostSource(proc, sys, clock)
    src.read()
    clock.advance(2)
    host_tree(tmp_path, {"eth0": (2_000_000, 4_000_000)})
    _, [eth0] = src.read()
    assert eth0.metrics["nic_rx_bytes_per_s"] == pytest.approx(2e6)
    assert eth0.metrics["nic_tx_bytes_per_s"] == pytest.approx(2e6)


def test_ipoib_is_left_to_the_ib_port_and_the_nic_cap_keeps_pfs_and_says_so(
        tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.collectors.host import MAX_NICS, HostSource

    vfs = tuple(f"ens1f0v{i}" for i in range(200))
    nics = {**{v: (0, 0) for v in vfs}, "ens1f0np0": (0, 0), "ib0": (0, 0)}
    proc, sys = host_tree(tmp_path, nics, vfs=vfs, ipoib=("ib0",))
    src = HostSource(proc, sys, clock)
    for _ in range(3):
        clock.advance(5)
        _, ports = src.read()
    names = [p.name for p in ports]
    assert len(names) == MAX_NICS and names[0] == "ens1f0np0" and "ib0" not in names
    said = [r.getMessage() for r in caplog.records if "MAX_NICS" in r.getMessage()]
    assert len(said) == 1 and "left out: 137 (137 of them VFs)" in said[0]


def test_an_inlet_sensor_reading_0_is_left_out_and_a_failing_one_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.collectors.hwmon import InletSource

    hw = tmp_path / "sys" / "class" / "hwmon"
    for chip, label, value in (("hwmon0", "Inlet Temp", "0"), ("hwmon1", "Ambient", "24000"),
                               ("hwmon2", "Front Panel Temp", None)):
        (hw / chip).mkdir(parents=True)
        (hw / chip / "temp1_label").write_text(label + "\n")
        if value is None:
            (hw / chip / "temp1_input").mkdir()  # reading it fails, as an EIO would
        else:
            (hw / chip / "temp1_input").write_text(value + "\n")
    src = InletSource(tmp_path / "sys")
    assert [src.read() for _ in range(3)] == [{"host_inlet_temp_c": 24.0}] * 3
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 2
    assert any("hwmon0" in m and "reads 0 C" in m for m in said)
    assert any("hwmon2" in m and "unreadable" in m for m in said)


def test_a_failing_rapl_package_is_named_once(tmp_path: Path, clock: Clock,
                                             caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.collectors.rapl import RaplSource

    pc = tmp_path / "sys" / "class" / "powercap"
    for zone, name in (("intel-rapl:0", "package-0"), ("intel-rapl:1", "package-1")):
        (pc / zone).mkdir(parents=True)
        (pc / zone / "name").write_text(name + "\n")
        (pc / zone / "max_energy_range_uj").write_text("262143328850\n")
    (pc / "intel-rapl:0" / "energy_uj").write_text("0\n")
    (pc / "intel-rapl:1" / "energy_uj").mkdir()  # unreadable
    src = RaplSource(tmp_path / "sys", clock)
    for k in range(3):
        clock.advance(5)
        (pc / "intel-rapl:0" / "energy_uj").write_text(f"{150_000_000 * 5 * (k + 1)}\n")
        assert src.read() == {}  # not 150 W for a two-package CPU
    said = [r.getMessage() for r in caplog.records if "intel-rapl:1" in r.getMessage()]
    assert len(said) == 1 and "unreadable" in said[0]
    (pc / "intel-rapl:1" / "energy_uj").rmdir()
    (pc / "intel-rapl:1" / "energy_uj").write_text("0\n")
    src.read()
    clock.advance(5)
    (pc / "intel-rapl:0" / "energy_uj").write_text(f"{150_000_000 * 20}\n")
    (pc / "intel-rapl:1" / "energy_uj").write_text(f"{100_000_000 * 5}\n")
    assert src.read()["host_cpu_power_w"] == pytest.approx(250.0)
