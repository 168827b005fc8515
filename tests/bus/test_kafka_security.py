"""Kafka security settings: the SASL mechanism checked at load, and a broker's refusal named
as such (not "cannot reach Kafka"); TLS is ``test_kafka_tls``'s."""

from __future__ import annotations

import logging
import time

import kafka.errors as kerr
import pytest

from fleetwatch.config import BusConfig, ConfigError, Secret, load
from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.bus.kafka import KafkaConsumer, KafkaProducer, ensure_topic
from fleetwatch.pipeline.bus.kafka_access import REFUSAL_LOGGERS, cannot_reach, kafka_security
from fleetwatch.service import quiet_kafka_client


@pytest.fixture
def quiet_kafka():
    """As the agent and the processor run: kafka-python's own lines silenced."""
    names = ("kafka", *REFUSAL_LOGGERS)
    saved = {n: (logging.getLogger(n).level, logging.getLogger(n).propagate) for n in names}
    quiet_kafka_client()
    yield
    for n, (level, propagate) in saved.items():
        logging.getLogger(n).setLevel(level)
        logging.getLogger(n).propagate = propagate


def test_an_unknown_sasl_mechanism_is_refused_at_load_naming_the_usable_ones():
    with pytest.raises(ConfigError) as err:
        load(env={"FLEETWATCH_BUS_SASL_MECHANISM": "SCRAM-SHA-999"})
    assert str(err.value) == ("environment FLEETWATCH_BUS_SASL_MECHANISM: bus.sasl_mechanism = "
                              "'SCRAM-SHA-999'; must be one of PLAIN, SCRAM-SHA-256, "
                              "SCRAM-SHA-512")
    assert load(env={"FLEETWATCH_BUS_SASL_MECHANISM": "SCRAM-SHA-512"}
                ).bus.sasl_mechanism == "SCRAM-SHA-512"


def _sasl(kafka_address: str) -> BusConfig:
    # The test broker has no SASL: it refuses the handshake as a broker that does not
    # offer the mechanism does.
    return BusConfig(kind="kafka", bootstrap=kafka_address, security_protocol="SASL_PLAINTEXT",
                     sasl_username="fw", sasl_password=Secret("KAFKAPASS123"))


def test_a_broker_refusing_sasl_is_named_by_every_client(kafka, quiet_kafka):
    bus = _sasl(kafka.address)
    with pytest.raises(BusError) as admin:
        ensure_topic(bus.bootstrap, "sasl-check", 1, kafka_security(bus), timeout_s=3.0)
    with pytest.raises(BusError) as consumer:
        KafkaConsumer(bus.bootstrap, "sasl-check", "g", security=kafka_security(bus),
                      bootstrap_timeout_ms=3000)
    producer = KafkaProducer(bus.bootstrap, security=kafka_security(bus), max_block_ms=3000)
    with pytest.raises(BusError) as producing:
        producer.send("sasl-check", b"x")
    producer.close()
    for err in (admin, consumer, producing):
        assert str(err.value).startswith(
            f"Kafka at {kafka.address} refused fleetwatch's connection: the broker does not "
            "offer this SASL mechanism ([Error 33] UnsupportedSaslMechanismError): check "
            "bus.sasl_mechanism"), str(err.value)
        assert "KAFKAPASS123" not in str(err.value)


def test_a_wrong_password_and_a_failed_tls_handshake_are_named():
    since = 0.0
    wrong = kerr.SaslAuthenticationFailedError("Authentication failed: Invalid credentials")
    assert cannot_reach("b:9093", wrong, since) == (
        "Kafka at b:9093 refused fleetwatch's connection: SASL authentication failed "
        "([Error 58] SaslAuthenticationFailedError: Authentication failed: Invalid "
        "credentials): check bus.sasl_username, bus.sasl_password and bus.sasl_mechanism")
    tls = kerr.KafkaConnectionError("Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED]")
    assert "the TLS handshake failed" in cannot_reach("b:9093", tls, since)
    assert "bus.ssl_cafile" in cannot_reach("b:9093", tls, since)


def test_a_network_error_is_still_cannot_reach(own_kafka, quiet_kafka):
    address = own_kafka.address
    own_kafka.stop()
    with pytest.raises(BusError) as err:
        ensure_topic(address, "gone", 1, None, timeout_s=1.0)
    assert str(err.value).startswith(f"cannot reach Kafka at {address}: ")


def test_a_processor_waiting_for_kafka_says_it_was_refused(caplog):
    import socket
    import threading

    from fleetwatch.service import reach_kafka

    with socket.create_server(("127.0.0.1", 0)) as listener:  # takes the TCP connection
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        stop = threading.Event()

        def refused() -> None:
            stop.set()
            raise BusError(cannot_reach(address, kerr.SaslAuthenticationFailedError("bad"), 0))

        caplog.set_level(logging.WARNING, "fleetwatch")
        assert reach_kafka(address, stop, refused) is None
    said = [r.getMessage() for r in caplog.records if r.name == "fleetwatch"]
    assert said == [f"Kafka at {address} refused fleetwatch's connection: SASL authentication "
                    "failed ([Error 58] SaslAuthenticationFailedError: bad): check "
                    "bus.sasl_username, bus.sasl_password and bus.sasl_mechanism; will retry "
                    "in 1 s (stop with SIGTERM or Ctrl-C)"]


def test_a_refused_topic_check_says_what_to_fix_not_to_make_the_topic_by_hand(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The topic check's line after a broker's refusal: the refusal and its setting, without
    'create it with your Kafka tools' (the topic is not the problem); nor for a broker that
    could not be reached (test_a_broker_that_is_down_is_said_once_not_as_a_topic_to_make)."""
    import logging

    from fleetwatch import wiring
    from fleetwatch.config import BusConfig
    from fleetwatch.pipeline.bus import BusError
    from fleetwatch.pipeline.bus import kafka as bus_kafka

    def refused(*_: object, **__: object) -> int:
        raise BusError("Kafka at 127.0.0.1:1 refused fleetwatch's connection: SASL "
                       "authentication failed (x): check bus.sasl_username")

    def unreachable(*_: object, **__: object) -> int:
        raise BusError("cannot reach Kafka at 127.0.0.1:1: timed out")

    config = BusConfig(kind="kafka", bootstrap="127.0.0.1:1")
    for fake, hint in ((refused, False), (unreachable, False)):
        monkeypatch.setattr(bus_kafka, "ensure_topic", fake)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fleetwatch.wiring"):
            assert wiring.ensure_topics(config) is False
        lines = [r.getMessage() for r in caplog.records]
        assert lines and all(("create it with your Kafka tools" in m) is hint for m in lines)


def test_a_broker_that_is_down_is_said_once_not_as_a_topic_to_make(
        caplog: pytest.LogCaptureFixture) -> None:
    """The admin's report: with the broker stopped, agent and processor said per topic
    "could not check or create topic ... (cannot reach Kafka at ...); create it with your
    Kafka tools if it does not exist". The broker is the problem: one line that says so,
    and the other topics not tried (each would wait out its timeout)."""
    from fleetwatch import wiring
    from tests.servers import free_port

    address = f"127.0.0.1:{free_port()}"        # nothing listens: the broker is down
    config = BusConfig(kind="kafka", bootstrap=address)
    with caplog.at_level(logging.WARNING, logger="fleetwatch.wiring"):
        start = time.monotonic()
        assert wiring.ensure_topics(config, timeout_s=1.0) is False
        took = time.monotonic() - start
    lines = [r.getMessage() for r in caplog.records if r.name == "fleetwatch.wiring"]
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"could not check or create topics {config.topic}, {config.dead_letter_topic}, "
        f"{config.alert_topic} (cannot reach Kafka at {address}: ")
    assert lines[0].endswith("): the broker is down or cannot be reached from here; they are "
                             "checked, and created if missing, once it can be reached")
    assert "Kafka tools" not in lines[0]
    assert took < 2.5                           # one timeout, not one per topic


def test_a_misspelt_broker_name_is_named(caplog: pytest.LogCaptureFixture) -> None:
    """The admin's report: `bus.bootstrap = "kafak-1:9092"` made the agent say only "Unable
    to bootstrap ... the broker is down or cannot be reached from here", never the name that
    does not resolve (the processor's path said "Name or service not known")."""
    from fleetwatch import wiring

    config = BusConfig(kind="kafka", bootstrap="kafak-1.invalid:9092")
    with caplog.at_level(logging.WARNING, logger="fleetwatch.wiring"):
        assert wiring.ensure_topics(config, timeout_s=1.0) is False
    (line,) = [r.getMessage() for r in caplog.records if r.name == "fleetwatch.wiring"]
    assert "no address for host 'kafak-1.invalid'" in line
    assert "check the host names of bus.bootstrap" in line
    assert "no broker by that name" in line and "is down" not in line
