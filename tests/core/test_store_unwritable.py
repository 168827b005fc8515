"""A store whose folder cannot be written: one line naming the path and the setting, exit 2.

The default stores are relative (``fleetwatch-sim.db``, ``fleetwatch.db``): started
where the user cannot write (``/`` in a container with a ``USER`` and no ``WORKDIR``,
a read-only mount) ``up``, ``simulate`` and ``process`` ended in a traceback, exit 1,
which a unit's ``RestartPreventExitStatus=2`` does not stop. ``/proc`` stands for such
a folder here: no file can be made in it, whoever runs the test (root included).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetwatch.storelock import StorePathError, check_store_path
from tests.servers import free_port

UNWRITABLE = Path("/proc")


def fleetwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleetwatch.cli", *args], cwd=UNWRITABLE,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_an_unwritable_folder_is_refused_naming_the_path_and_the_setting() -> None:
    with pytest.raises(StorePathError) as refused:
        check_store_path(UNWRITABLE / "x.db", "store.path")
    message = str(refused.value)
    assert "/proc/x.db" in message and "cannot write in the folder /proc" in message
    assert "store.path" in message
    # /proc answers ENOENT, which read as a typo: the reason is said instead.
    assert "No such file or directory" not in message
    assert "(no file can be created there: a virtual file system such as /proc" in message


def test_the_lock_file_stays_empty_after_a_clean_stop(tmp_path: Path) -> None:
    """Not removed, on purpose (``StoreLock.release``: unlinking a flock'd file lets two
    writers in); emptied, so no stale pid is left to read."""
    from fleetwatch.storelock import StoreLock, lock_path

    with StoreLock(tmp_path / "x.db"):
        assert lock_path(tmp_path / "x.db").read_text().split()[0] == str(os.getpid())
    assert lock_path(tmp_path / "x.db").read_text() == ""


def test_a_writable_folder_passes(tmp_path: Path) -> None:
    assert check_store_path(tmp_path / "x.db") == tmp_path / "x.db"
    assert list(tmp_path.iterdir()) == []  # the probe leaves nothing


@pytest.mark.parametrize("command", [
    ["up", "--nodes", "1", "--port", "PORT"],
    ["simulate", "--duration", "1h"],
])
def test_up_and_simulate_in_an_unwritable_folder(command: list[str]) -> None:
    result = fleetwatch(*(str(free_port()) if a == "PORT" else a for a in command))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "fleetwatch-sim.db" in result.stderr
    assert "cannot write in the folder /proc" in result.stderr
    assert "--store" in result.stderr


def test_process_in_an_unwritable_folder() -> None:
    result = fleetwatch("process", env={
        "FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": f"127.0.0.1:{free_port()}",
        "FLEETWATCH_PROCESSOR_METRICS_PORT": str(free_port()),
        "FLEETWATCH_STORE_KIND": "sqlite", "FLEETWATCH_STORE_PATH": "fleetwatch.db"})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "fleetwatch.db" in result.stderr and "store.path" in result.stderr
