"""A configuration file every user of the machine may read (the README's install makes
/etc/fleetwatch/fleetwatch.toml 0644) that holds the brokers' password itself: on a GPU node
every job user could read it. Said at load, with what to do; a secret in a file of its own
(``*_file``), or a file only the service may read, is not."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fleetwatch.config import load

TOML = """
[bus]
kind = "kafka"
bootstrap = "kafka-1:9093"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "fleetwatch-agent"
{password}
"""


def loaded(tmp_path: Path, mode: int, password: str, caplog: pytest.LogCaptureFixture
           ) -> list[str]:
    path = tmp_path / "fleetwatch.toml"
    path.write_text(TOML.format(password=password))
    path.chmod(mode)
    with caplog.at_level(logging.WARNING, "fleetwatch"):
        config = load(path, env={})
    assert config.bus.sasl_password == "s3cret"
    return [r.getMessage() for r in caplog.records if "readable by every user" in r.getMessage()]


def test_a_password_in_a_file_every_user_reads_is_said(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (line,) = loaded(tmp_path, 0o644, 'sasl_password = "s3cret"', caplog)
    assert "mode 0644" in line and "holds bus.sasl_password" in line
    assert "chmod 640" in line and "bus.sasl_password_file" in line
    assert "s3cret" not in line


@pytest.mark.parametrize("mode", [0o640, 0o600])
def test_a_file_only_the_service_reads_is_not(tmp_path: Path, mode: int,
                                              caplog: pytest.LogCaptureFixture) -> None:
    assert loaded(tmp_path, mode, 'sasl_password = "s3cret"', caplog) == []


def test_a_password_in_a_file_of_its_own_is_not(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    secret = tmp_path / "kafka-password"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    assert loaded(tmp_path, 0o644, f'sasl_password_file = "{secret}"', caplog) == []


@pytest.mark.parametrize(("protocol", "bootstrap", "cert", "said"), [
    ("PLAINTEXT", "kafka-1:9092,kafka-2:9092", "", True),
    ("PLAINTEXT", "10.0.0.5:9092", "", True),
    ("SSL", "kafka-1:9093", "", True),              # encrypted, but anyone may write
    ("SSL", "kafka-1:9093", "client.pem", False),   # a client certificate: known writers
    ("SASL_SSL", "kafka-1:9093", "", False),
    ("SASL_PLAINTEXT", "kafka-1:9092", "", False),
    ("PLAINTEXT", "127.0.0.1:9092", "", False),     # one machine: fleetwatch up, tests
    ("PLAINTEXT", "localhost:9092,[::1]:9092", "", False)])
def test_brokers_anyone_may_write_to_are_said(tmp_path: Path, protocol: str, bootstrap: str,
                                              cert: str, said: bool) -> None:
    """The shipped cluster.toml points at brokers on the network over PLAINTEXT, and nothing
    said that any client there can forge frames (the README says ACLs are a requirement)."""
    from fleetwatch.config import BusConfig

    if cert:
        cert = str(tmp_path / cert)
        Path(cert).write_text("-----BEGIN CERTIFICATE-----\n")
    bus = BusConfig(kind="kafka", bootstrap=bootstrap, security_protocol=protocol,  # type: ignore[arg-type]
                    ssl_certfile=cert)
    text = bus.open_to_anyone()
    assert (text is not None) == said
    if said:
        assert f"bus.security_protocol = {protocol!r}" in text and bootstrap in text
        assert "SASL_SSL" in text and "Who may write to the frames topic" in text
