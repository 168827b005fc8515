"""Host, InfiniBand and RAPL sources against the checked-in fake /proc and /sys trees."""

from __future__ import annotations

import pytest

from fleetwatch.collectors.host import HostSource, parse_stat_cpu
from fleetwatch.collectors.infiniband import InfinibandSource, parse_state
from fleetwatch.collectors.rapl import RaplSource, energy_delta
from tests.collectors.conftest import Clock, NodeTree

KIB = 1024.0


def test_host_first_read_has_levels_but_no_rates(tree: NodeTree, clock: Clock) -> None:
    metrics, ports = HostSource(tree.proc, tree.sys, clock).read()
    assert metrics == {
        "host_load1": 3.52,
        "host_mem_total_bytes": 2113437696 * KIB,
        "host_mem_used_bytes": (2113437696 - 1056718848) * KIB,
    }
    assert ports == ()  # a rate needs two readings; absent, never 0


def test_host_rates_and_physical_nics_only(tree: NodeTree, clock: Clock) -> None:
    src = HostSource(tree.proc, tree.sys, clock)
    src.read()
    tree.advance()
    clock.advance(5.0)
    metrics, ports = src.read()
    # cpu: busy 1500 -> 2500 of total 10000 -> 11500 jiffies
    assert metrics["host_cpu_util_pct"] == pytest.approx(100.0 * 1000 / 1500)
    by_name = {p.name: p for p in ports}
    assert sorted(by_name) == ["eth0", "ib0"]  # lo, docker0 and veth have no device
    eth = by_name["eth0"].metrics
    assert by_name["eth0"].kind == "nic"
    assert eth["nic_rx_bytes_per_s"] == pytest.approx(5_000_000 / 5)
    assert eth["nic_rx_packets_per_s"] == pytest.approx(5000 / 5)
    assert eth["nic_rx_errors_per_s"] == pytest.approx(10 / 5)
    assert eth["nic_tx_bytes_per_s"] == pytest.approx(500_000 / 5)
    assert by_name["ib0"].metrics["nic_tx_bytes_per_s"] == 0.0


def test_stat_cpu_counts_iowait_as_idle() -> None:
    busy, total = parse_stat_cpu("cpu  10 0 10 70 10 0 0 0 5 0\n")
    assert (busy, total) == (20.0, 100.0)


def test_host_missing_files_are_absent(tmp_path, clock: Clock) -> None:
    metrics, ports = HostSource(tmp_path / "proc", tmp_path / "sys", clock).read()
    assert metrics == {} and ports == ()


def test_infiniband_words_are_four_bytes_and_state(tree: NodeTree, clock: Clock) -> None:
    src = InfinibandSource(tree.sys, clock)
    first = {p.name: p.metrics for p in src.read()}
    assert "ib_tx_bytes_per_s" not in first["mlx5_0/1"]
    tree.advance()
    clock.advance(5.0)
    ports = {p.name: p for p in src.read()}
    assert sorted(ports) == ["mlx5_0/1", "mlx5_1/1"]
    m = ports["mlx5_0/1"].metrics
    assert ports["mlx5_0/1"].kind == "ib"
    assert m["ib_tx_bytes_per_s"] == pytest.approx((350 - 100) * 4 / 5)
    assert m["ib_rx_bytes_per_s"] == pytest.approx((1200 - 200) * 4 / 5)
    assert m["ib_symbol_errors_total"] == 5
    assert m["ib_link_downed_total"] == 1
    assert m["ib_rcv_errors_total"] == 2
    assert m["ib_port_active"] == 1.0
    assert ports["mlx5_1/1"].metrics["ib_port_active"] == 0.0


def test_infiniband_absent_tree(tmp_path, clock: Clock) -> None:
    assert InfinibandSource(tmp_path, clock).read() == ()


@pytest.mark.parametrize(("text", "active"), [("4: ACTIVE\n", True), ("1: DOWN", False),
                                              ("2: INIT", False)])
def test_ib_state(text: str, active: bool) -> None:
    assert parse_state(text) is active


def test_rapl_sums_packages_and_handles_wraparound(tree: NodeTree, clock: Clock) -> None:
    src = RaplSource(tree.sys, clock)
    assert src.read() == {}  # first reading: no rate yet
    tree.advance()
    clock.advance(5.0)
    # package-0: +200 J; package-1 wrapped at max_energy_range_uj.
    wrapped = 99_000_000 + 262_143_328_850 - 262_143_000_000
    expected = (200_000_000 + wrapped) / 1e6 / 5.0
    assert src.read() == {"host_cpu_power_w": pytest.approx(expected)}


def test_energy_delta() -> None:
    assert energy_delta(10, 25, 100) == 15
    assert energy_delta(90, 5, 100) == 15


def test_rapl_unreadable_energy_logs_once(tree: NodeTree, clock: Clock, monkeypatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    from fleetwatch.collectors.host import KernelFile

    def denied(self: KernelFile) -> bytes:
        raise PermissionError(13, "Permission denied", self.path)

    src = RaplSource(tree.sys, clock)
    monkeypatch.setattr(KernelFile, "read", denied)
    assert src.read() == {} and src.read() == {}
    assert sum("root only" in r.message for r in caplog.records) == 1


def test_kernel_file_rereads_from_the_start(tmp_path) -> None:
    from fleetwatch.collectors.host import KernelFile

    path = tmp_path / "counter"
    path.write_text("1\n")
    f = KernelFile(str(path))
    assert f.read() == b"1\n"
    path.write_text("22\n")  # rewritten in place, as the kernel regenerates it
    assert f.read() == b"22\n"
    big = "x" * 200_000
    path.write_text(big)
    assert f.text() == big
    f.close()
    with pytest.raises(OSError):
        KernelFile(str(tmp_path / "absent")).read()
