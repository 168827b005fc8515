"""kafka-python client options from [bus.kafka_producer] / [bus.kafka_consumer]: only keys
the installed kafka-python takes, of its types; keys fleetwatch owns refused, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.config import ConfigError, load


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "f.toml"
    path.write_text(text)
    return path


def test_options_load_as_kafka_python_arguments(tmp_path: Path) -> None:
    config = load(write(tmp_path, """
[bus]
kind = "kafka"
[bus.kafka_producer]
compression_type = "zstd"
linger_ms = 20
retries = 5
[bus.kafka_consumer]
max_poll_records = 7
fetch_max_bytes = 1048576
isolation_level = "read_committed"
"""), env={})
    assert config.bus.kafka_producer == {"compression_type": "zstd", "linger_ms": 20,
                                         "retries": 5}
    assert config.bus.kafka_consumer == {"max_poll_records": 7, "fetch_max_bytes": 1048576,
                                         "isolation_level": "read_committed"}
    assert load(None, env={}).bus.kafka_producer == {}


@pytest.mark.parametrize(("table", "said"), [
    ("[bus.kafka_consumer]\nmax_poll_record = 7",
     "[bus.kafka_consumer] max_poll_record: not an option of kafka-python's KafkaConsumer "
     "(did you mean max_poll_records?)"),
    ("[bus.kafka_consumer]\nmax_poll_records = \"7\"",
     "[bus.kafka_consumer] max_poll_records = '7': must be an integer"),
    ("[bus.kafka_consumer]\nmax_poll_records = -1",
     "max_poll_records = -1: must be at least 0"),
    ("[bus.kafka_producer]\nlinger_ms = 2.5", "linger_ms = 2.5: must be an integer"),
    ("[bus.kafka_producer]\ncompression_type = \"brotli\"",
     "compression_type = 'brotli': must be one of gzip, snappy, lz4, zstd"),
    ("[bus.kafka_consumer]\ngroup_id = \"other\"",
     "group_id: fleetwatch sets this kafka-python option itself (set bus.group instead)"),
    ("[bus.kafka_consumer]\nenable_auto_commit = true",
     "enable_auto_commit: fleetwatch sets this kafka-python option itself (fleetwatch "
     "commits a batch's offsets only once it is stored)"),
    ("[bus.kafka_consumer]\nvalue_deserializer = \"json\"", "value_deserializer: fleetwatch"),
    ("[bus.kafka_producer]\nbootstrap_servers = \"k:9092\"", "set bus.bootstrap instead"),
    ("[bus.kafka_producer]\nacks = 1", "acks: fleetwatch sets this"),
    ("[bus.kafka_producer]\nsasl_plain_password = \"pw\"", "bus.sasl_*"),
    ("[bus.kafka_consumer]\nsession_timeout_ms = 6000", "set bus.session_timeout_s instead"),
    ("[bus.kafka_producer]\npartitioner = \"x\"", "its value is a Python object"),
    ("[bus.kafka_consumer]\nmax_partition_fetch_bytes = 2147483648",
     "max_partition_fetch_bytes = 2147483648: must be at most 2147483647 (the Kafka "
     "protocol's 32-bit field"),
    ("[bus.kafka_consumer]\nfetch_max_bytes = 1099511627776", "must be at most 2147483647"),
    ("[bus.kafka_consumer]\nfetch_min_bytes = 1099511627776", "must be at most 2147483647"),
    ("[bus.kafka_producer]\nmax_request_size = 1099511627776", "must be at most 2147483647"),
    ("[bus.kafka_producer]\nrequest_timeout_ms = 0", "request_timeout_ms = 0: must be above 0"),
    ("[bus.kafka_producer]\ndelivery_timeout_ms = 0", "delivery_timeout_ms = 0: must be above"),
    ("[bus.kafka_producer]\nmax_block_ms = 0", "max_block_ms = 0: must be above 0"),
    ("[bus.kafka_producer]\nconnections_max_idle_ms = 0", "connections_max_idle_ms = 0: must"),
    ("[bus.kafka_consumer]\ncheck_crcs = false", "check_crcs: fleetwatch sets this"),
    ("[bus.kafka_producer]\nclient_id = \"x\\n\\u001b[31m\"",
     "client_id = 'x\\n\\x1b[31m': must hold printable characters only"),
    ("[bus.kafka_consumer]\nrequest_timeout_ms = 400",
     "fetch_max_wait_ms (500) < request_timeout_ms (400) < connections_max_idle_ms"),
])
def test_a_wrong_option_is_named_with_what_to_do(tmp_path: Path, table: str,
                                                 said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, table), env={})
    assert said in str(caught.value)
    assert str(tmp_path / "f.toml") in str(caught.value)


def test_a_proxy_is_accepted_and_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = load(write(tmp_path, '[bus.kafka_producer]\nsocks5_proxy = "socks5://p:1080"'),
                  env={})
    assert config.bus.kafka_producer == {"socks5_proxy": "socks5://p:1080"}
    assert "SASL credentials included, goes through that host" in caplog.text


def test_the_tables_come_from_the_file_not_the_environment() -> None:
    with pytest.raises(ConfigError, match=r"bus.kafka_producer is a table .*\[bus.kafka_pro"
                                          r"ducer\].*not from the environment"):
        load(None, env={"FLEETWATCH_BUS_KAFKA_PRODUCER": "linger_ms=5"})


def test_fleetwatch_config_prints_the_tables_as_toml_that_loads_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleetwatch.cli import main

    given = write(tmp_path, '[bus.kafka_producer]\ncompression_type = "zstd"\nlinger_ms = 20\n'
                            "[bus.kafka_consumer]\nmax_poll_records = 7\n")
    assert main(["--config", str(given), "config"]) == 0
    out = capsys.readouterr().out
    assert 'kafka_producer = { "compression_type" = "zstd", "linger_ms" = 20 }' in out
    saved = tmp_path / "saved.toml"
    saved.write_text(out)
    again = load(saved, env={}).bus
    assert again.kafka_producer == {"compression_type": "zstd", "linger_ms": 20}
    assert again.kafka_consumer == {"max_poll_records": 7}
