"""A replay is how a recorded series is tested against detectors and configs: the same
file with the same config gives byte-identical lines, however fast the machine replays
it, and whatever seed Python hashes strings with. The notifier judges every open alert's
muting again at each reload of the silences (an inhibition that began while the alert
did not change); that reload follows the data's time in a replay, not the wall's, whose
pace depends on the machine's load. The alerts still open at the end are printed in the
order they opened, not in a dict's that follows the hash seed."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleetwatch.cli import main
from fleetwatch.config import DetectorsConfig
from fleetwatch.pipeline.sinks import mutes
from fleetwatch.replay import replay
from fleetwatch.wiring import detectors

T0 = 1_780_000_000
STEP = 15


def lost_then_silent(path: Path) -> Path:
    """n1 and n2, 2 GPUs each, every 15 s for 90 ticks: n1 GPU 1 stops at tick 10 (read
    as lost), then all of n1 stops at tick 50 (node_silent, which inhibits gpu_lost)."""
    lines = ["timestamp,node,gpu,metric,value"]
    for t in range(90):
        for node in ("n1", "n2"):
            for g in range(2):
                if node == "n1" and (t >= 50 or (g == 1 and t >= 10)):
                    continue
                lines.append(f"{T0 + STEP * t},{node},{g},gpu_temp_c,{60 + g}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_silences_are_read_again_every_reload_s_of_the_clock_given() -> None:
    now = [0.0]
    reads: list[float] = []
    m = mutes.Mutes(lambda: reads.append(now[0]) or [], lambda: [], 5.0, lambda: now[0])
    for t in (100.0, 104.9, 105.0, 106.0, 110.0):
        now[0] = t
        m.reload()
    assert reads == [100.0, 105.0, 110.0]


def frozen() -> Callable[[], float]:
    """A machine so fast that no wall time passes during the replay."""
    return lambda: 0.0


def racing() -> Callable[[], float]:
    """A machine so loaded that 10 s of wall time pass between any two looks."""
    ticks = itertools.count()
    return lambda: 10.0 * next(ticks)


def under(monkeypatch: pytest.MonkeyPatch, wall: Callable[[], float]) -> None:
    """The wall clock as the silences' reload reads it, and nothing else's."""
    monkeypatch.setattr(mutes, "time", SimpleNamespace(monotonic=wall))


def replayed(path: Path) -> str:
    out = io.StringIO()
    replay([path], detectors(DetectorsConfig()), out)
    return out.getvalue()


def test_the_same_file_gives_the_same_lines_however_fast_it_is_replayed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = lost_then_silent(tmp_path / "lost.csv")
    under(monkeypatch, frozen())
    fast = replayed(path)
    under(monkeypatch, racing())
    loaded = replayed(path)
    assert fast == loaded
    lines = [json.loads(line) for line in fast.splitlines()]
    silent = "node_silent/replay/n1/host/1780000840000"
    # The muting that began when n1 went silent is said, once, as live: every reload_s of
    # the data's time.
    assert [(d["id"], d["muted_by"], d.get("open_at_end", False)) for d in lines] == [
        ("gpu_lost/replay/n1/gpu1/1780000450000", "", False),
        (silent, "", False),
        ("gpu_lost/replay/n1/gpu1/1780000450000", f"inhibited:{silent}", False),
        ("gpu_lost/replay/n1/gpu1/1780000450000", f"inhibited:{silent}", True),
        (silent, "", True),
    ]


def test_the_cli_prints_the_same_bytes_on_a_fast_and_a_loaded_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = lost_then_silent(tmp_path / "lost.csv")
    outputs = []
    for wall in (frozen(), racing()):
        under(monkeypatch, wall)
        assert main(["replay", str(path)]) == 0
        outputs.append(capsys.readouterr())
    assert outputs[0].out == outputs[1].out
    assert len(outputs[0].out.splitlines()) == 5  # 3 transitions, 2 still open at the end
    for said in outputs:
        assert "3 alert transitions, 2 alerts fired" in said.err


def silent_together(path: Path) -> Path:
    """8 nodes of 2 GPUs every 15 s; 7 of them stop at once at tick 20 and stay silent to
    the end: their node_silent alerts, and their rack's, are still open when it ends."""
    lines = ["timestamp,node,gpu,metric,value"]
    for t in range(40):
        for n in range(8):
            if n and t >= 20:
                continue
            lines += [f"{T0 + STEP * t},n{n},{g},gpu_temp_c,{60 + g}" for g in range(2)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_alerts_open_at_the_end_come_in_one_order_whatever_the_hash_seed(
        tmp_path: Path) -> None:
    """Each Python process hashes strings with a seed of its own (unless PYTHONHASHSEED
    is set): the lines of alerts still open at the end came in the order of a dict that
    followed it, so two runs of one file printed them in different orders."""
    path = silent_together(tmp_path / "silent.csv")
    outs = []
    for seed in ("0", "1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-m", "fleetwatch", "replay", str(path)],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout)
    assert outs[0] == outs[1] == outs[2]
    at_end = [json.loads(line)["id"] for line in outs[0].splitlines()
              if json.loads(line).get("open_at_end")]
    assert at_end == [*(f"node_silent/replay/n{n}/host/1780000525000" for n in range(1, 8)),
                      "rack_silent/replay//rack:unknown/1780000525000"]
