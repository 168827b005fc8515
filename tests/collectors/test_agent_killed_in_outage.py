"""An agent killed (SIGKILL, the OOM killer, a node crash) while its broker is down loses at
most the frame of about one interval: once the broker is known down, each new frame reaches
the disk spool at once, not after the topic check that waits for the broker (one timeout
per try) has given up. The admin's repro: frames taken while ``broker_up`` was already 0
waited in the sender's memory for up to 15 s and died with the process.

``fleetwatch agent`` itself (fake GPUs, every 0.5 s) against a broker address where nothing
listens, as a broker that is down: /metrics read while it runs, then SIGKILL, then the
spool it left on disk counted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.collectors.spool import Spool
from tests.servers import free_port, wait_for

INTERVAL_S = 0.5
WATCH_S = 12.0    # past the first topic checks (a 5 s timeout each) and their backoff


def scrape(port: int) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if not s.labels}


def test_frames_reach_the_disk_spool_while_the_broker_is_down_and_survive_sigkill(
        tmp_path: Path) -> None:
    spool, port = tmp_path / "spool", free_port()
    conf = tmp_path / "fw.toml"
    conf.write_text(f'[node]\ncluster = "c"\nrack = "r1"\nnode = "kill-1"\n'
                    f'[agent]\ninterval_s = {INTERVAL_S}\nspool_dir = "{spool}"\n'
                    f'metrics_port = {port}\nkernel_log = ""\n'
                    f'[bus]\nkind = "kafka"\nbootstrap = "127.0.0.1:{free_port()}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "--config", str(conf),
                             "agent", "--fake-gpus", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    queued: list[float] = []
    try:
        wait_for("the agent spooling (the broker known down)",
                 lambda: (scrape(port) or {}).get("fleetwatch_agent_frames_spooled_total", 0)
                 >= 1, timeout_s=60)
        # Over several topic checks, what waits in memory is at most about one interval's.
        end = time.monotonic() + WATCH_S
        while time.monotonic() < end:
            got = scrape(port)
            assert got is not None and proc.poll() is None
            assert got["fleetwatch_agent_broker_up"] == 0
            queued.append(got["fleetwatch_agent_send_queue_frames"])
            time.sleep(0.1)
        last = scrape(port)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=30)
    assert last is not None
    assert max(queued) <= 2, queued
    # Everything taken up to the last look is on disk but what was queued then.
    taken = (last["fleetwatch_agent_frames_spooled_total"]
             + last["fleetwatch_agent_send_queue_frames"])
    on_disk = len(Spool(spool, 1 << 30))
    assert on_disk >= last["fleetwatch_agent_frames_spooled_total"]
    assert on_disk >= taken - 2, (on_disk, taken)
    assert last["fleetwatch_agent_frames_sent_total"] == 0
    assert "Traceback" not in err, err


def test_the_background_topic_check_never_holds_the_sender_past_its_wait() -> None:
    import threading

    from fleetwatch.agent_service import BackgroundCheck

    release, calls = threading.Event(), []

    def check() -> bool:
        calls.append(1)
        return release.wait(30)

    bc = BackgroundCheck(check, wait_s=0.05)
    bc._first = False                         # after a failed send (the first is waited for)
    start = time.monotonic()
    assert bc.passed() is False               # still checking: the caller spools
    assert bc.passed() is False and len(calls) == 1  # no second check beside the first
    assert time.monotonic() - start < 1.0
    release.set()
    wait_for("the check done", lambda: bc._done.is_set(), timeout_s=10, every_s=0.01)
    assert bc.passed() is True                # the late result, taken once
    assert bc.passed() is True and len(calls) == 2  # a new client: a new check

    stale = BackgroundCheck(lambda: calls.append(1) is None, wait_s=5, fresh_s=0.0)
    assert stale.passed() is True
    calls.clear()
    stale._result = True                      # a pass left over from long ago
    assert stale.passed() is True and calls == [1]  # not trusted: checked again
