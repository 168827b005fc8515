"""`fleetwatch config` output saved as a file does not load back with "***" as a secret.

An admin freezing the effective config (`fleetwatch config > /etc/fleetwatch/fleetwatch.toml`)
deployed the mask as the Kafka password, the store token or a URL's password: every secret
`config` masks is refused in the file, naming the key, and `config` says so above them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.config import ConfigError, load

SECRETS = {
    "FLEETWATCH_BUS_SASL_PASSWORD": "s3cret",
    "FLEETWATCH_STORE_TOKEN": "t0k-9f2",
    "FLEETWATCH_STORE_URL": "http://fw:pw@127.0.0.1:8428/?db=x",
    "FLEETWATCH_ALERTS_WEBHOOK_URL": "https://hooks.example/services/T0/B0/X0",
}


def saved_config(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                 monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Path:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["config"]) == 0
    saved = tmp_path / "fleetwatch.toml"
    saved.write_text(capsys.readouterr().out)
    for name in env:
        monkeypatch.delenv(name)
    return saved


@pytest.mark.parametrize("name, key", [
    ("FLEETWATCH_BUS_SASL_PASSWORD", "sasl_password"),
    ("FLEETWATCH_STORE_TOKEN", "token"),
    ("FLEETWATCH_STORE_URL", "url"),
    ("FLEETWATCH_ALERTS_WEBHOOK_URL", "webhook_url"),
])
def test_each_masked_secret_is_refused_naming_its_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        name: str, key: str) -> None:
    saved = saved_config(tmp_path, capsys, monkeypatch, {name: SECRETS[name]})
    assert "***" in saved.read_text()
    with pytest.raises(ConfigError) as refused:
        load(saved, env={})
    message = str(refused.value)
    assert f"{key}" in message and "masked value printed by fleetwatch config" in message
    assert SECRETS[name] not in message


def test_the_output_of_config_says_its_secrets_are_masked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    saved = saved_config(tmp_path, capsys, monkeypatch, SECRETS).read_text()
    assert saved.startswith("# ") and "***" in saved.splitlines()[0]
    assert 'sasl_password = "***"' in saved


def test_without_secrets_the_output_loads_back_as_it_was(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    saved = saved_config(tmp_path, capsys, monkeypatch, {})
    assert not saved.read_text().startswith("#")
    assert load(saved, env={}) == load(env={})


def test_a_real_secret_with_stars_in_it_is_kept(tmp_path: Path) -> None:
    config = tmp_path / "f.toml"
    config.write_text('[bus]\nsasl_password = "a***b"\n[store]\n'
                      'url = "http://fw:a***b@127.0.0.1:8428"\n')
    loaded = load(config, env={})
    assert loaded.bus.sasl_password == "a***b"
    assert loaded.store.url == "http://fw:a***b@127.0.0.1:8428"


def test_config_with_per_cluster_carbon_and_kafka_options_loads_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nested tables ([carbon.clusters.NAME], [bus.kafka_consumer]) print as TOML that
    loads back to the same configuration (a cluster's table printed its own empty
    ``clusters`` key, which loading refuses)."""
    src = tmp_path / "in.toml"
    src.write_text('[carbon.clusters.east]\npue = 1.3\ncountry = "FRA"\n'
                   "[bus.kafka_consumer]\nmax_poll_records = 50\n")
    assert main(["--config", str(src), "config"]) == 0
    saved = tmp_path / "saved.toml"
    saved.write_text(capsys.readouterr().out)
    assert load(saved, env={}) == load(src, env={})
