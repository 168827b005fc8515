"""Every bad value and masked secret in one error, as unknown keys are (hunt2 #5): a file
printed by `fleetwatch config` masks several secrets at once, and took one run per secret.
An error from the environment names the variable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleetwatch.config import ConfigError, load

BAD = """\
[store]
kind = "victoria"
url = "http://user:***@127.0.0.1:8428"
token = "***"
[bus]
sasl_password = "***"
"""


def test_bad_values_and_masked_secrets_of_file_and_environment_come_in_one_error(
        tmp_path: Path) -> None:
    path = tmp_path / "fw.toml"
    path.write_text(BAD)
    with pytest.raises(ConfigError) as refused:
        load(path, env={"FLEETWATCH_ALERTS_INSTANCE": "bad name!",
                        "FLEETWATCH_AGENT_INTERVAL_S": "-1"})
    said = str(refused.value)
    assert said.startswith("6 settings to change (all of them, in one edit):")
    for line in (f"{path} [store] kind: store.kind = 'victoria'",
                 f"{path} [store] url: store.url is the masked value",
                 f"{path} [store] token: store.token is the masked value",
                 f"{path} [bus] sasl_password: bus.sasl_password is the masked value",
                 "environment FLEETWATCH_AGENT_INTERVAL_S: agent.interval_s = '-1'",
                 "environment FLEETWATCH_ALERTS_INSTANCE: alerts.instance = 'bad name!'"):
        assert f"\n  {line}" in said, line


def test_an_instance_from_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError) as refused:
        load(None, env={"FLEETWATCH_ALERTS_INSTANCE": "bad name!"})
    assert str(refused.value).startswith(
        "environment FLEETWATCH_ALERTS_INSTANCE: alerts.instance = 'bad name!'; must be")


def test_the_cli_prints_them_all_in_one_run(tmp_path: Path) -> None:
    path = tmp_path / "fw.toml"
    path.write_text(BAD)
    run = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "-c", str(path), "config"],
                         capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"})
    assert run.returncode == 2
    assert "4 settings to change" in run.stderr and run.stderr.count("masked value") == 3
