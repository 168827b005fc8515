"""cluster.toml's hint for what a node ends up with (deploy finding 6, r22): it gave
`fleetwatch --config ... config`, which leaves out fleetwatch.env, the per-node values and
secrets the units read (EnvironmentFile): a node's rack showed as rack0 where the unit ran
with r12. Both commands it gives now read the file as the units do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "deploy" / "cluster.toml"


def hints() -> list[str]:
    return [line.removeprefix("#").strip() for line in
            CLUSTER.read_text("utf-8").splitlines()[:12]
            if line.startswith("#   ") and " config" in line]


def test_the_systemd_run_hint_reads_the_units_environment_file() -> None:
    (run,) = [h for h in hints() if h.startswith("systemd-run")]
    unit = (ROOT / "deploy" / "systemd" / "fleetwatch-process.service").read_text("utf-8")
    env_file = re.search(r"^EnvironmentFile=-?(\S+)", unit, re.M).group(1)
    binary = re.search(r"^ExecStart=(\S+)", unit, re.M).group(1)
    assert f"-p EnvironmentFile={env_file} {binary} --config /etc/fleetwatch/fleetwatch.toml " \
           "config" in run


def test_the_shell_hint_shows_the_rack_of_the_environment_file(tmp_path: Path) -> None:
    (shell,) = [h for h in hints() if h.startswith("sh -c")]
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "fleetwatch.toml").write_text(CLUSTER.read_text("utf-8").replace(
        "CHANGE-ME", "dc1"), "utf-8")
    (etc / "fleetwatch.env").write_text("FLEETWATCH_NODE_RACK=r12\n", "utf-8")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "fleetwatch").write_text(f"#!/bin/sh\nexec {sys.executable} -m fleetwatch.cli "
                                       '"$@"\n', "utf-8")
    (bindir / "fleetwatch").chmod(0o755)
    command = shell.replace("/etc/fleetwatch", str(etc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env["PATH"] = f"{bindir}:{env['PATH']}"
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert re.search(r'^rack = "r12"$', result.stdout, re.M), result.stdout
