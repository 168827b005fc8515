"""The root agent's spool is never a way into another file: a link planted in it is refused,
not followed (its target is left as it was), and a spool directory another user could
write is refused at start with what to do (security review, defect 9)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetwatch.collectors.spool import Spool, SpoolError, SpoolRecord
from fleetwatch.collectors.spool_files import unsafe_owner_or_mode
from tests.servers import free_port

VICTIM = b"IMPORTANT ROOT-OWNED DATA line1\n"


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_bytes(VICTIM)
    path.chmod(0o600)
    return path


def spool_dir(tmp_path: Path) -> Path:
    path = tmp_path / "spool"
    path.mkdir(mode=0o700)
    return path


def test_a_planted_link_segment_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target, spool = victim(tmp_path), spool_dir(tmp_path)
    link = spool / "0000000000000001.seg"
    link.symlink_to(target)
    with pytest.raises(SpoolError) as caught:
        Spool(spool, 1 << 20)
    assert str(caught.value) == (
        f"the spool file {link} is a symbolic link: the spool never reads or writes through "
        "one (it could point at any file); remove it")
    assert target.read_bytes() == VICTIM  # neither truncated nor appended to
    assert link.is_symlink()  # left for the admin to look at


def test_a_link_in_place_of_the_checkpoint_is_refused(tmp_path: Path) -> None:
    target, spool = victim(tmp_path), spool_dir(tmp_path)
    (spool / "head").symlink_to(target)
    with pytest.raises(SpoolError, match="head is a symbolic link"):
        Spool(spool, 1 << 20)
    assert target.read_bytes() == VICTIM


def test_a_link_at_the_temporary_checkpoint_is_replaced_not_written_through(
        tmp_path: Path) -> None:
    target, spool = victim(tmp_path), spool_dir(tmp_path)
    s = Spool(spool, 1 << 20, fsync=False)
    s.append([SpoolRecord("t", b"frame-%d" % i) for i in range(3)])
    (spool / "head.tmp").symlink_to(target)
    s.remove(2)  # writes the checkpoint through head.tmp
    assert target.read_bytes() == VICTIM
    assert not (spool / "head.tmp").exists()
    assert [r.value for r in s.peek(5)] == [b"frame-2"]
    s.close()
    # And what it wrote is what a restart reads.
    assert [r.value for r in Spool(spool, 1 << 20).peek(5)] == [b"frame-2"]


def test_the_spool_writes_its_segments_for_its_user_alone(tmp_path: Path) -> None:
    spool = tmp_path / "new-spool"
    s = Spool(spool, 1 << 20, fsync=False)
    s.append([SpoolRecord("t", b"x")])
    s.close()
    assert spool.stat().st_mode & 0o777 == 0o700
    (segment,) = spool.glob("*.seg")
    assert segment.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("mode", [0o1777, 0o775, 0o757])
def test_a_spool_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    target, spool = victim(tmp_path), spool_dir(tmp_path)
    spool.chmod(mode)
    with pytest.raises(SpoolError) as caught:
        Spool(spool, 1 << 20)
    assert str(caught.value) == (
        f"the spool directory {spool} is writable by group or others (mode {mode:o}): "
        "anyone who can write it can plant a link that the agent would follow; "
        f"chmod go-w {spool}")
    assert target.read_bytes() == VICTIM and os.listdir(spool) == []


def test_a_segment_others_can_write_is_refused(tmp_path: Path) -> None:
    spool = spool_dir(tmp_path)
    s = Spool(spool, 1 << 20, fsync=False)
    s.append([SpoolRecord("t", b"x")])
    s.close()
    (segment,) = spool.glob("*.seg")
    segment.chmod(0o666)
    with pytest.raises(SpoolError, match=f"the spool file {segment} is writable by group or "
                                         r"others \(mode 666\)"):
        Spool(spool, 1 << 20)


def test_ownership_is_judged_against_the_processs_user() -> None:
    # The review's case: the root agent (uid 0) and a spool that systemd handed to the user
    # fleetwatch (uid 999) by sharing its StateDirectory.
    st = os.stat_result((0o40755, 0, 0, 2, 999, 999, 4096, 0, 0, 0))
    assert unsafe_owner_or_mode(st, 0, "spool directory", "/var/lib/fleetwatch/spool") == (
        "the spool directory /var/lib/fleetwatch/spool is owned by uid 999, not by this "
        "process's user (uid 0): that user could plant a link that the agent would follow; "
        "chown it to uid 0, or point agent.spool_dir at a directory of this user's (the "
        "agent unit's is /var/lib/fleetwatch-agent)")
    own = os.stat_result((0o40700, 0, 0, 2, 0, 0, 4096, 0, 0, 0))
    assert unsafe_owner_or_mode(own, 0, "spool directory", "/x") is None


def test_the_agent_refuses_a_planted_link_at_start_and_leaves_its_target(
        tmp_path: Path) -> None:
    # The review's repro: the agent started on a spool holding a link to a root file.
    target, spool = victim(tmp_path), spool_dir(tmp_path)
    (spool / "0000000000000001.seg").symlink_to(target)
    result = subprocess.run(
        [sys.executable, "-m", "fleetwatch.cli", "agent", "--fake-gpus", "1"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "FLEETWATCH_BUS_KIND": "kafka",
             "FLEETWATCH_BUS_BOOTSTRAP": "127.0.0.1:1", "FLEETWATCH_AGENT_SPOOL_DIR": str(spool),
             "FLEETWATCH_AGENT_METRICS_PORT": str(free_port())})
    assert result.returncode == 2, result.stderr
    assert f"agent.spool_dir = '{spool}' cannot be used: the spool file " in result.stderr
    assert "is a symbolic link" in result.stderr and "Traceback" not in result.stderr
    assert target.read_bytes() == VICTIM


@pytest.mark.parametrize("umask", [0o022, 0o277])
def test_the_agent_makes_its_missing_spool_directory_and_parents_its_users_alone(
        tmp_path: Path, umask: int) -> None:
    # The admin's repro: `fleetwatch agent` by hand (umask 022) or in the DaemonSet's
    # container, agent.spool_dir missing: it was made 0755, its parents too.
    spool = tmp_path / "state" / "fleetwatch-agent" / "spool"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetwatch.cli", "agent", "--fake-gpus", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: os.umask(umask),  # noqa: PLW1509 - the agent's own umask
        env={**os.environ, "FLEETWATCH_BUS_KIND": "kafka",
             "FLEETWATCH_BUS_BOOTSTRAP": "127.0.0.1:1", "FLEETWATCH_AGENT_SPOOL_DIR": str(spool),
             "FLEETWATCH_AGENT_METRICS_PORT": str(free_port())})
    try:
        deadline = time.monotonic() + 30
        while not spool.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spool.exists(), proc.stderr.read() if proc.poll() is not None else "no spool"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err
    modes = {p.name: p.stat().st_mode & 0o777 for p in (spool, spool.parent, spool.parent.parent)}
    assert modes == {"spool": 0o700, "fleetwatch-agent": 0o700, "state": 0o700}
