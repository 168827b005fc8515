"""`fleetwatch up` whose SQLite store can no longer be written (a full disk: a small
tmpfs) says so on its status line, with since when and why, instead of "catching up"."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.core.test_up import start_up, stop, wait_for_line
from tests.servers import free_port


def test_up_says_its_store_is_not_writable(tmp_path: Path) -> None:
    where = tmp_path / "small"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        proc = start_up(tmp_path, "--store", str(where / "sim.db"), "--port",
                        str(free_port()), "--speed", "200", "--backfill", "1h")
        wait_for_line(proc, "disk is full", 120)
        lines = wait_for_line(proc, "store not writable since", 60)
        code, out = stop(proc)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
    (status,) = [line for line in lines if "store not writable since" in line]
    assert f"the disk holding {where / 'sim.db'} is full" in status
    assert "catching up" not in status and ".recover" not in status
    assert code == 1 and "Traceback" not in out
