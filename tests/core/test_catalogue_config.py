from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.catalogue import CatalogueError, catalogue, parse, throttle_flags
from fleetwatch.config import ConfigError, Secret, load, public_view

HEADER = "id,name,scope,kind,unit,dcgm,dcgm_scale,min,max,source,help\n"


def test_shipped_catalogue_loads_and_units_are_in_names() -> None:
    cat = catalogue()
    assert cat["gpu_temp_c"].dcgm == "DCGM_FI_DEV_GPU_TEMP"
    assert cat["gpu_energy_j"].dcgm_scale == 1000  # DCGM counts mJ
    for m in cat.metrics:
        assert m.name.startswith(("gpu_", "host_", "nic_", "ib_"))


@pytest.mark.parametrize("row, message", [
    ("1,gpu_a,gpu,gauge,C,,1,0,1,s,h\n1,gpu_b,gpu,gauge,C,,1,0,1,s,h",
     "line 3: id 1 is used twice"),
    ("1,gpu_a,gpu,gauge,C,,1,0,1,s,h\n2,gpu_a,gpu,gauge,C,,1,0,1,s,h",
     "name 'gpu_a' is used twice"),
    ("1,gpu_a,disk,gauge,C,,1,0,1,s,h", "line 2: scope 'disk'"),
    ("1,gpu_a,gpu,gauge,C,,1,5,1,s,h", "min must be below max"),
    ("x,gpu_a,gpu,gauge,C,,1,0,1,s,h", "line 2"),
    ("1,gpu_a,gpu,gauge", "expected 11 columns"),
])
def test_catalogue_errors_name_the_line(row: str, message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        parse(HEADER + row)


def test_throttle_flags_are_named() -> None:
    assert throttle_flags(0x20 | 0x40) == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert throttle_flags(0) == []


def test_defaults_are_safe() -> None:
    config = load(env={})
    assert config.dashboard.host == "127.0.0.1"
    assert config.agent.metrics_host == "127.0.0.1"
    assert config.bus.kind == "memory" and config.store.kind == "sqlite"


def test_file_then_environment(tmp_path: Path) -> None:
    f = tmp_path / "fw.toml"
    f.write_text('[bus]\nkind = "kafka"\nbootstrap = "k1:9092"\n[alerts]\nkeep_firing_s = 30\n')
    config = load(f, env={"FLEETWATCH_BUS_BOOTSTRAP": "k2:9092",
                          "FLEETWATCH_STORE_RAW_RETENTION_H": "48"})
    assert config.bus.kind == "kafka"
    assert config.bus.bootstrap == "k2:9092"
    assert config.alerts.keep_firing_s == 30.0
    assert config.store.raw_retention_h == 48.0


@pytest.mark.parametrize("text, env, message", [
    ('[bus]\nkind = "rabbit"\n', {}, r"bus.kind = 'rabbit'; must be one of memory, kafka"),
    ('[bus]\nbootstrp = "x"\n', {}, "unknown key bus.bootstrp"),
    ('[alerts]\ngpu_temp_limit_c = 80\n', {}, r"alerts.gpu_temp_limit_c is now "
     r"detectors.site_temp_limit_c \(0 for none\): move it there"),
    ("", {"FLEETWATCH_ALERTS_FOR_S": "30"}, "alerts.for_s is now detectors.site_temp_for_s"),
    ('[buss]\nkind = "kafka"\n', {}, r"unknown section \[buss\]"),
    ("", {"FLEETWATCH_AGENT_INTERVAL_S": "soon"}, "FLEETWATCH_AGENT_INTERVAL_S: "
     "agent.interval_s = 'soon'; must be a number"),
    ("", {"FLEETWATCH_NOPE_X": "1"}, "environment FLEETWATCH_NOPE_X: no such setting"),
    ("[dashboard]\nport = 70000\n", {}, "dashboard.port = 70000; must be between 1 and 65535"),
    ('[dashboard]\nport = "8050"\n', {}, r"dashboard.port = '8050'; must be an integer "
     r"\(without quotes\)"),
    ("[agent]\ninterval_s = inf\n", {}, "agent.interval_s = inf; must be a finite number"),
    ("[agent]\ninterval_s = 0\n", {}, "agent.interval_s = 0; must be between 0.05 and 3600"),
    ("", {"FLEETWATCH_AGENT_INTERVAL_S": "1e400"}, "must be a finite number"),
    ("[store]\nraw_retention_h = 0\n", {}, "store.raw_retention_h = 0; must be between 0.1 and"),
    ("[store]\nraw_retention_h = 0.01\n", {}, "store.raw_retention_h = 0.01; must be between 0.1"),
    ("[bus\n", {}, "not valid TOML"),
])
def test_bad_values_stop_start_up_naming_the_key(tmp_path: Path, text: str, env: dict,
                                                 message: str) -> None:
    f = tmp_path / "fw.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(f, env=env)


def test_secrets_never_print(tmp_path: Path) -> None:
    secret_file = tmp_path / "token"
    secret_file.write_text("s3cr3t\n")
    config = load(env={"FLEETWATCH_STORE_TOKEN_FILE": str(secret_file),
                       "FLEETWATCH_BUS_SASL_PASSWORD": "hunter2"})
    assert isinstance(config.store.token, Secret)
    assert config.store.token.reveal() == "s3cr3t"
    assert "s3cr3t" not in repr(config) and "hunter2" not in repr(config)
    assert "hunter2" not in str(public_view(config))
    assert f"{config.bus.sasl_password}" == "***"


def test_secrets_inside_urls_never_print() -> None:
    config = load(env={
        "FLEETWATCH_ALERTS_WEBHOOK_URL": "https://hooks.example.com/services/T0/B1/XyZsecret",
        "FLEETWATCH_ALERTS_ALERTMANAGER_URL": "http://ops:hunter2@127.0.0.1:9093",
        "FLEETWATCH_STORE_URL": "http://127.0.0.1:8428/?authKey=k3y"})
    shown = public_view(config)
    assert shown["alerts"]["webhook_url"] == "https://hooks.example.com/***"
    assert shown["alerts"]["alertmanager_url"] == "http://ops:***@127.0.0.1:9093"
    assert shown["store"]["url"] == "http://127.0.0.1:8428/?***"
    assert not [secret for secret in ("XyZsecret", "hunter2", "k3y") if secret in str(shown)]
    assert config.alerts.alertmanager_url == "http://ops:hunter2@127.0.0.1:9093"  # kept


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load("/nonexistent/fleetwatch.toml", env={})


def test_command_line_overrides_are_checked_like_the_file() -> None:
    from fleetwatch.config import override

    config = load(env={})
    assert override(config, "dashboard", port=9000, host=None).dashboard.port == 9000
    with pytest.raises(ConfigError, match=r"command line --port: dashboard.port = 99999; "
                                          "must be between 1 and 65535"):
        override(config, "dashboard", port=99999)
    with pytest.raises(ConfigError, match="must be a finite number"):
        override(config, "agent", interval_s=float("inf"))
