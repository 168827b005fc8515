"""Kernel-log XID lines of MIG GPUs and of old drivers; a text log rotated under the follower."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetwatch.collectors.kmsg import KernelLog
from fleetwatch.collectors.xid_parse import parse_kmsg_record, parse_xid


@pytest.mark.parametrize(("line", "pci", "xid", "gi", "ci", "message"), [
    # kern_gpu_error_cont_ga100.c's own example (open-gpu-kernel-modules): a MIG GPU instance.
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
     "RST: No, D-RST: No", "0000:01:00", 94, 5, None,
     "pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No"),
    # kernel_rc.c: "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u"
    ("[Thu Nov 26 10:00:00 2026] NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, "
     "name=a, Graphics Exception", "0000:3b:00", 13, 1, 2, "pid=9, name=a, Graphics Exception"),
    # Drivers before the "PCI:" prefix.
    ("NVRM: Xid (0000:03:00): 79, GPU has fallen off the bus.", "0000:03:00", 79, None, None,
     "GPU has fallen off the bus."),
    # Today's form is unchanged.
    ("NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, Timeout", "0000:9b:00", 119, None, None,
     "pid=1, name=x, Timeout"),
])
def test_mig_and_old_driver_xid_lines(line: str, pci: str, xid: int, gi: int | None,
                                      ci: int | None, message: str) -> None:
    x = parse_xid(line)
    assert x is not None
    assert (x.pci, x.xid, x.gpu_instance, x.compute_instance, x.message) == (
        pci, xid, gi, ci, message)


def test_mig_xid_kmsg_record() -> None:
    x = parse_kmsg_record(b"3,2001,123456789,-;NVRM: Xid (PCI:0000:01:00 GPU-I:05): 95, "
                          b"pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No\n"
                          b" SUBSYSTEM=pci\n DEVICE=+pci:0000:01:00.0")
    assert x is not None and (x.pci, x.xid, x.gpu_instance) == ("0000:01:00", 95, 5)


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:01:00 GPU-I:xx): 94, pid=1",      # not an instance number
    "NVRM: Xid (PCI:0000:01:00 GPU-CI:02): 94, pid=1",     # a compute instance needs its GPU-I
    "NVRM: Xid (PCI:0000:01:00 junk): 94, pid=1",
    "NVRM: Xid (0000:01): 94, pid=1",
])
def test_near_misses_stay_unread(line: str) -> None:
    assert parse_xid(line) is None


def test_follower_delivers_mig_xids_instead_of_counting_them_malformed(tmp_path: Path) -> None:
    p = tmp_path / "kern.log"
    p.write_text("")
    log = KernelLog(str(p))
    with p.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel "
                "(0x9). RST: No, D-RST: No\n")
    assert [(x.pci, x.xid) for x in log.poll()] == [("0000:01:00", 94)]
    assert log.malformed == 0
    log.close()


def xid(code: int) -> str:
    return f"NVRM: Xid (PCI:0000:18:00): {code}, pid=1, name=a, x\n"


def test_rotation_by_rename_reads_the_old_tail_then_the_new_file(tmp_path: Path) -> None:
    p = tmp_path / "kern.log"
    p.write_text("old line\n")
    log = KernelLog(str(p))
    with p.open("a") as f:
        f.write(xid(13))
    assert [x.xid for x in log.poll()] == [13]
    with p.open("a") as f:
        f.write(xid(31))  # written before the rotation, not read yet
    os.rename(p, tmp_path / "kern.log.1")  # logrotate's default: rename, then create
    p.write_text(xid(79))
    assert [x.xid for x in log.poll()] == [31, 79]
    with p.open("a") as f:
        f.write(xid(48))
    assert [x.xid for x in log.poll()] == [48]
    log.close()


def test_lines_the_writer_adds_to_the_renamed_file_are_still_read(tmp_path: Path) -> None:
    """syslog keeps writing the renamed file until logrotate's postrotate HUP reopens it."""
    p = tmp_path / "kern.log"
    p.write_text("")
    log = KernelLog(str(p))
    writer = p.open("a")
    os.rename(p, tmp_path / "kern.log.1")
    p.write_text("")
    assert log.poll() == []  # rotation seen: now on the new file
    writer.write(xid(43) + xid(6).rstrip("\n"))  # the HUP has not come yet
    writer.close()                                    # ... and the last line has no newline
    with p.open("a") as f:
        f.write(xid(79))
    assert [x.xid for x in log.poll()] == [43, 6, 79]
    assert log.poll() == []
    log.close()


def test_rotation_in_progress_keeps_the_old_file(tmp_path: Path) -> None:
    p = tmp_path / "kern.log"
    p.write_text("")
    log = KernelLog(str(p))
    with p.open("a") as f:
        f.write(xid(13))
    os.rename(p, tmp_path / "kern.log.1")  # renamed, not created yet
    assert [x.xid for x in log.poll()] == [13]
    p.write_text(xid(79))
    assert [x.xid for x in log.poll()] == [79]
    log.close()


def test_copytruncate_still_starts_again_at_the_top(tmp_path: Path) -> None:
    p = tmp_path / "kern.log"
    p.write_text("x" * 200 + "\n")
    log = KernelLog(str(p))
    with p.open("r+") as f:
        f.truncate(0)
    with p.open("a") as f:
        f.write(xid(79))
    assert [x.xid for x in log.poll()] == [79]
    log.close()


def test_close_after_a_rotation_closes_both_files(tmp_path: Path) -> None:
    p = tmp_path / "kern.log"
    p.write_text("")
    log = KernelLog(str(p))
    os.rename(p, tmp_path / "kern.log.1")
    p.write_text("")
    log.poll()
    fds = set(os.listdir("/proc/self/fd"))
    log.close()
    assert len(fds - set(os.listdir("/proc/self/fd"))) == 2


def test_a_new_file_it_cannot_open_keeps_the_old_lines_and_says_so_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    p = tmp_path / "kern.log"
    p.write_text("")
    log = KernelLog(str(p))
    with p.open("a") as f:
        f.write(xid(13))
    os.rename(p, tmp_path / "kern.log.1")
    p.write_text(xid(79))
    real_open = os.open

    def no_permission(path: str, flags: int, *args: int) -> int:
        if path == str(p):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_permission)
    assert [x.xid for x in log.poll()] == [13]
    assert log.poll() == []
    assert sum("cannot be opened" in r.getMessage() for r in caplog.records) == 1
    monkeypatch.setattr(os, "open", real_open)
    assert [x.xid for x in log.poll()] == [79]
    log.close()
