"""The kernel-log XID parser against real driver lines, the log follower, and the merger."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.collectors.kmsg import KernelLog
from fleetwatch.collectors.xid_merge import XidMerger
from fleetwatch.collectors.xid_parse import (
    fold_bursts,
    parse_kmsg_record,
    parse_lines,
    parse_xid,
    pci_key,
)
from tests.collectors.conftest import FIXTURES, Clock


def test_real_xid_119_gsp_timeout(real_data: Path) -> None:
    text = (real_data / "failure_logs" / "gpud_dmesg_xid119_gsp_timeout_XE9680.log").read_text()
    xids = parse_lines(text.splitlines())
    assert len(xids) == 5
    assert {(x.pci, x.xid) for x in xids} == {("0000:9b:00", 119)}
    assert xids[0].message.startswith("pid=2024380, name=nvidia-smi, Timeout after 6s")
    assert "GSP_RM_ALLOC" in xids[0].message


def test_real_xid_13_then_43(real_data: Path) -> None:
    text = (real_data / "failure_logs" / "gpud_dmesg_xid13_xid43_plus_oom.log").read_text()
    xids = parse_lines(text.splitlines())
    assert [x.xid for x in xids] == [13] * 16 + [43]
    assert {x.pci for x in xids} == {"0000:38:00"}
    assert xids[0].message.startswith("pid='<unknown>', name=<unknown>, Graphics SM Global")
    assert xids[-1].message == "pid=2924364, name=pt_main_thread, Ch 00000008"


def test_logs_without_xids_give_none(real_data: Path) -> None:
    for name in ("gpud_dmesg_libnccl_segfault.log", "gpud_fabricmanager.log"):
        lines = (real_data / "failure_logs" / name).read_text().splitlines()
        assert parse_lines(lines) == []


def test_kmsg_record_and_near_misses() -> None:
    x = parse_kmsg_record(b"4,1002,6000000,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=0, name=x, "
                          b"GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:2a:00.0")
    assert x is not None and (x.pci, x.xid) == ("0000:2a:00", 79)
    assert x.message.endswith("GPU has fallen off the bus.")
    assert parse_xid("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616") is None
    assert parse_xid("NVRM: Xid (PCI:0000:9b:00): notanumber, pid=1") is None
    assert parse_xid("NVRM: Xid (PCI:0000:9B:00.0): 48, pid=1, DBE") is not None


@pytest.mark.parametrize(("bus_id", "key"), [
    ("00000000:9B:00.0", "0000:9b:00"),   # NVML
    ("0000:9b:00", "0000:9b:00"),         # kernel log
    ("0001:1A:00.0", "0001:1a:00"),
])
def test_pci_key(bus_id: str, key: str) -> None:
    assert pci_key(bus_id) == key


def test_text_log_follows_appends_from_the_end(tmp_path: Path) -> None:
    log_file = tmp_path / "kern.log"
    log_file.write_text("NVRM: Xid (PCI:0000:18:00): 13, pid=1, old\n")
    log = KernelLog(str(log_file))
    assert log.poll() == []  # history before the agent started is not reported
    with log_file.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:18:00): 31, pid=2, new\nNVRM: Xid (PCI:0000:18:00): 4")
    assert [x.xid for x in log.poll()] == [31]  # the half-written line waits
    with log_file.open("a") as f:
        f.write("8, pid=3, done\n")
    assert [x.xid for x in log.poll()] == [48]
    log.close()


def test_unreadable_log_is_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = KernelLog(str(tmp_path / "absent"))
    assert log.poll() == [] and log.poll() == []
    assert sum("kernel log" in r.message for r in caplog.records) == 1


def test_fixture_kmsg_from_start() -> None:
    log = KernelLog(str(FIXTURES / "kmsg.txt"), from_start=True)
    assert [(x.pci, x.xid) for x in log.poll()] == [
        ("0000:2a:00", 79), ("0000:18:00", 13), ("0000:ff:00", 31)]
    log.close()


def test_merger_counts_an_event_seen_twice_once() -> None:
    clock = Clock()
    m = XidMerger(window_s=30.0, clock=clock)
    # Same tick, both sources.
    assert m.merge({0: [79]}, [(0, 79)]) == {0: [79]}
    # Kernel log first, NVML one tick later: still one.
    assert m.merge({}, [(1, 13)]) == {1: [13]}
    clock.advance(5)
    assert m.merge({1: [13]}, []) == {}
    # A burst: 16 from each source is 16 events, not 32 and not 1.
    assert m.merge({2: [13] * 16}, [(2, 13)] * 16) == {2: [13] * 16}
    # Past the window the same code is a new event.
    clock.advance(31)
    assert m.merge({}, [(0, 79)]) == {0: [79]}


def test_real_sm_fault_burst_is_one_xid_13_event(real_data: Path, tmp_path: Path) -> None:
    # One SM exception: the driver prints 16 XID 13 lines within 2 ms, then an XID 43.
    text = (real_data / "failure_logs" / "gpud_dmesg_xid13_xid43_plus_oom.log").read_text()
    log_file = tmp_path / "kern.log"
    log_file.write_text("")
    log = KernelLog(str(log_file))
    log_file.write_text(text)
    events = log.poll()
    assert [(x.xid, x.lines) for x in events] == [(13, 16), (43, 1)]
    assert events[0].message.startswith("pid='<unknown>', name=<unknown>, Graphics SM Global")
    log.close()


def test_separate_faults_of_one_code_stay_separate(real_data: Path, tmp_path: Path) -> None:
    # XID 119 every 6 s (whole-second dmesg -T stamps): five events, not one.
    text = (real_data / "failure_logs" / "gpud_dmesg_xid119_gsp_timeout_XE9680.log").read_text()
    events, late = fold_bursts(parse_lines(text.splitlines()))
    assert [(x.xid, x.lines) for x in events] == [(119, 1)] * 5 and late == 0


def test_burst_across_two_polls_and_kmsg_stamps() -> None:
    line = "{seq},{usec},-;NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, Graphics SM Warp"
    recs = [parse_kmsg_record(("4," + line.format(seq=s, usec=u)).encode())
            for s, u in ((1, 6_000_000), (2, 6_000_090), (3, 6_000_180), (4, 9_000_000))]
    assert all(r is not None for r in recs)
    last: dict[tuple[str, int, int | None, int | None], float] = {}
    first, late = fold_bursts([r for r in recs[:2] if r], last)
    assert [x.lines for x in first] == [2] and late == 0
    # The burst's third line came with the next poll: not a new event, but counted.
    second, late = fold_bursts([r for r in recs[2:] if r], last)
    assert [(x.xid, x.lines) for x in second] == [(13, 1)] and late == 1
    # Another GPU's or another code's lines never fold in.
    other = parse_xid("[  79.497354] NVRM: Xid (PCI:0000:19:00): 13, Graphics SM Warp")
    other43 = parse_xid("[  79.497360] NVRM: Xid (PCI:0000:19:00): 43, Ch 00000008")
    assert other is not None and other.at == pytest.approx(79.497354)
    assert len(fold_bursts([other, other43])[0]) == 2


def test_merger_cancels_nvml_event_against_the_folded_burst(real_data: Path) -> None:
    text = (real_data / "failure_logs" / "gpud_dmesg_xid13_xid43_plus_oom.log").read_text()
    events, _ = fold_bursts(x for x in parse_lines(text.splitlines()) if x.xid == 13)
    m = XidMerger(window_s=30.0, clock=Clock())
    assert m.merge({2: [13]}, [(2, x.xid) for x in events]) == {2: [13]}


def test_kmsg_overrun_counts_the_records_lost_and_says_it_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import errno

    from fleetwatch.collectors import kmsg

    def records() -> list[object]:
        return [b"6,100,1000,-;NVRM: Xid (PCI:0000:9b:00): 48, pid=1, name=x, DBE\n",
                OSError(errno.EPIPE, "Broken pipe"),
                b"4,350,2000,-;NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, fallen\n",
                BlockingIOError()]

    log = KernelLog("/dev/null")  # a character device: the /dev/kmsg path
    queue = records()

    def fake_read(fd: int, n: int) -> bytes:
        r = queue.pop(0)
        if isinstance(r, BaseException):
            raise r
        return r  # type: ignore[return-value]

    monkeypatch.setattr(kmsg.os, "read", fake_read)
    assert [x.xid for x in log.poll()] == [48, 79]
    assert log.overrun == 249
    queue.extend([b"6,351,3000,-;hello\n", OSError(errno.EPIPE, "Broken pipe"),
                  b"6,400,4000,-;again\n", BlockingIOError()])
    log.poll()
    assert log.overrun == 249 + 48
    assert sum("overwritten" in r.getMessage() for r in caplog.records) == 1
    log.close()


def test_callbacks_suppressed_counts_nvidia_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_text("")
    log = KernelLog(str(path))
    path.write_text("[Sun Feb 23 16:25:00 2025] krcReportXid: 12 callbacks suppressed\n"
                    "[Sun Feb 23 16:25:01 2025] nvme_timeout: 3 callbacks suppressed\n"
                    "[Sun Feb 23 16:25:02 2025] net_ratelimit: 5 callbacks suppressed\n")
    assert log.poll() == [] and log.suppressed == 12
    log.close()
