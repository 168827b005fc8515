"""Kafka over TLS: the files checked at load and given to every client, a real TLS connection
with the configured CA (and without it, named as a TLS failure), and TLS to a listener
without TLS named within a timeout, the processor still obeying SIGTERM."""

from __future__ import annotations

import time
from pathlib import Path

import kafka
import kafka.errors as kerr
import pytest

from fleetwatch.config import BusConfig, ConfigError, Secret, load
from fleetwatch.pipeline.bus import BusError, topics
from fleetwatch.pipeline.bus.kafka import ensure_topic
from fleetwatch.pipeline.bus.kafka_access import kafka_security
from fleetwatch.wiring import ensure_topics, open_consumer, open_producer
from tests.bus.test_kafka_security import quiet_kafka

__all__ = ["quiet_kafka"]  # the fixture, used by name


# --- TLS ---

@pytest.fixture
def pems(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name in ("ca", "cert", "key"):
        p = tmp_path / f"{name}.pem"
        p.write_text("-----BEGIN CERTIFICATE-----\n")
        out[name] = str(p)
    return out


def test_tls_files_are_checked_at_load(tmp_path, pems):
    env = {"FLEETWATCH_BUS_SECURITY_PROTOCOL": "SSL"}
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError) as err:
        load(env={**env, "FLEETWATCH_BUS_SSL_CAFILE": missing})
    assert str(err.value) == (f"bus.ssl_cafile = {missing!r}: cannot read it (No such file or "
                              "directory); give a PEM file this user can read")
    with pytest.raises(ConfigError, match="bus.ssl_cafile is set but bus.security_protocol is "
                                          "'PLAINTEXT', which does not use TLS"):
        load(env={"FLEETWATCH_BUS_SSL_CAFILE": pems["ca"]})
    with pytest.raises(ConfigError, match="bus.ssl_keyfile is set without bus.ssl_certfile"):
        load(env={**env, "FLEETWATCH_BUS_SSL_KEYFILE": pems["key"]})
    c = load(env={**env, "FLEETWATCH_BUS_SSL_CAFILE": pems["ca"],
                  "FLEETWATCH_BUS_SSL_CERTFILE": pems["cert"],
                  "FLEETWATCH_BUS_SSL_KEYFILE": pems["key"]})
    assert (c.bus.ssl_cafile, c.bus.ssl_certfile, c.bus.ssl_keyfile) == (
        pems["ca"], pems["cert"], pems["key"])
    assert c.bus.ssl_check_hostname is True


def test_every_kafka_client_gets_the_tls_settings(monkeypatch, pems):
    bus = BusConfig(kind="kafka", bootstrap="127.0.0.1:1", security_protocol="SASL_SSL",
                    sasl_mechanism="SCRAM-SHA-256", sasl_username="fw",
                    sasl_password=Secret("pw"), ssl_cafile=pems["ca"],
                    ssl_certfile=pems["cert"], ssl_keyfile=pems["key"],
                    ssl_check_hostname=False)
    expected = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_plain_username": "fw", "sasl_plain_password": "pw",
                "ssl_cafile": pems["ca"], "ssl_certfile": pems["cert"],
                "ssl_keyfile": pems["key"], "ssl_check_hostname": False}
    seen: dict[str, dict] = {}

    def recorder(what: str):
        def init(self, *args, **configs):
            seen[what] = configs
            raise kerr.KafkaTimeoutError("Unable to bootstrap")
        return init

    monkeypatch.setattr(kafka.KafkaProducer, "__init__", recorder("producer"))
    monkeypatch.setattr(kafka.KafkaProducer, "__del__", lambda self: None)
    monkeypatch.setattr(kafka.KafkaConsumer, "__init__", recorder("consumer"))
    monkeypatch.setattr(kafka.KafkaAdminClient, "__init__", recorder("admin"))
    monkeypatch.setattr(topics._AdminClient, "_give_back", lambda self: None)
    with pytest.raises(BusError):
        open_producer(bus).send("t", b"x")
    with pytest.raises(BusError):
        open_consumer(bus)
    assert ensure_topics(bus, timeout_s=1.0) is False
    for what in ("producer", "consumer", "admin"):
        configs = seen.get(what)
        assert configs is not None, what
        assert {k: configs.get(k) for k in expected} == expected, what
    # The hostname check stays on (kafka-python's default) unless turned off.
    assert kafka_security(BusConfig(security_protocol="SSL")) == {"security_protocol": "SSL"}
    assert kafka.KafkaProducer.DEFAULT_CONFIG["ssl_check_hostname"] is True
    assert "ssl_cafile" not in kafka_security(BusConfig())


# --- a real TLS connection ---
# Tansu (the test broker) speaks no TLS: its --cert and --key refuse to be given together,
# and with --cert alone its listener stays plain TCP. So the broker is put behind a TLS
# terminator here, and advertises the terminator's address, as a TLS listener would.


def _openssl(*args: str, cwd: Path) -> None:
    import shutil
    import subprocess

    assert shutil.which("openssl"), "openssl is needed to make the test's certificates"
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def tls_kafka(tmp_path: Path):
    import contextlib
    import socket
    import ssl
    import threading

    from tests.servers import Server, free_port, tansu_binary

    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=fleetwatch test CA", cwd=tmp_path)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
             "-subj", "/CN=localhost", cwd=tmp_path)
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf",
             cwd=tmp_path)
    inner, outer = free_port(), free_port()
    broker = Server("tansu", [tansu_binary(), "broker", "--listener-url",
                              f"tcp://127.0.0.1:{inner}", "--advertised-listener-url",
                              f"tcp://127.0.0.1:{outer}", "--storage-engine", "memory://tansu/"],
                    inner, log_path=tmp_path / "tansu.log").start()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "srv.pem", tmp_path / "srv.key")
    listener = socket.create_server(("127.0.0.1", outer))
    stop = threading.Event()

    def pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                tls = ctx.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):  # a client that does not trust the CA
                raw.close()
                continue
            plain = socket.create_connection(("127.0.0.1", inner))
            for a, b in ((tls, plain), (plain, tls)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"127.0.0.1:{outer}", str(tmp_path / "ca.pem")
    stop.set()
    listener.close()
    broker.stop()


def test_a_real_tls_connection_with_the_configured_ca(tls_kafka, quiet_kafka):
    address, ca = tls_kafka
    bus = load(env={"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": address,
                    "FLEETWATCH_BUS_SECURITY_PROTOCOL": "SSL",
                    "FLEETWATCH_BUS_SSL_CAFILE": ca}).bus
    assert ensure_topic(address, "tls-frames", 3, kafka_security(bus), timeout_s=10.0) == 3
    producer = open_producer(bus)
    producer.send("tls-frames", b"over TLS")
    producer.flush()
    producer.close()
    # Without the CA (the system's trust store does not know it): named as a TLS failure.
    untrusted = BusConfig(kind="kafka", bootstrap=address, security_protocol="SSL")
    with pytest.raises(BusError) as err:
        ensure_topic(address, "tls-frames", 3, kafka_security(untrusted), timeout_s=3.0)
    assert str(err.value).startswith(f"Kafka at {address} refused fleetwatch's connection: "
                                     "the TLS handshake failed ("), str(err.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(err.value)


# --- TLS to a listener without TLS ---
# kafka-python waits for the handshake's answer without a bound: against a plaintext
# listener (Tansu here) its client never starts, never raises, and SIGTERM went unheard.


def test_tls_to_a_listener_that_never_answers_is_named_within_the_timeout():
    import socket

    from fleetwatch.pipeline.bus.kafka_access import tls_refusal

    with socket.create_server(("127.0.0.1", 0)) as listener:  # takes it, says nothing
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        start = time.monotonic()
        why = tls_refusal(address, {"security_protocol": "SSL"}, timeout_s=1.0)
        took = time.monotonic() - start
    assert why is not None and why.startswith("no answer to a TLS handshake within 1 s: "
                                              "a plaintext listener? check bus.security_protocol")
    assert took < 3
    assert tls_refusal(address, {"security_protocol": "PLAINTEXT"}) is None  # no TLS: no probe


@pytest.mark.kafka
def test_every_client_with_tls_to_a_plaintext_broker_is_refused_in_seconds(
        kafka, quiet_kafka, monkeypatch):
    from fleetwatch.pipeline.bus import kafka_access

    monkeypatch.setattr(kafka_access, "TLS_TIMEOUT_S", 2.0)
    bus = BusConfig(kind="kafka", bootstrap=kafka.address, security_protocol="SSL")
    expected = (f"Kafka at {kafka.address} refused fleetwatch's connection: "
                "no answer to a TLS handshake within 2 s: a plaintext listener?")
    for make in (lambda: ensure_topic(kafka.address, "tls-plain", 1, kafka_security(bus)),
                 lambda: open_consumer(bus), lambda: open_producer(bus).send("t", b"x")):
        start = time.monotonic()
        with pytest.raises(BusError) as err:
            make()
        assert time.monotonic() - start < 5
        assert str(err.value).startswith(expected), str(err.value)


@pytest.mark.kafka
def test_a_processor_with_tls_to_a_plaintext_broker_says_so_and_obeys_sigterm(
        kafka, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    env.update({"FLEETWATCH_BUS_KIND": "kafka", "FLEETWATCH_BUS_BOOTSTRAP": kafka.address,
                "FLEETWATCH_BUS_SECURITY_PROTOCOL": "SSL",
                "FLEETWATCH_STORE_PATH": str(tmp_path / "s.db"),
                "FLEETWATCH_PROCESSOR_METRICS_PORT": "0"})
    log = tmp_path / "process.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch.cli", "process"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 15
        while "no answer to a TLS handshake" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        code = proc.wait(15)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 0 and "stopped on SIGTERM while waiting for Kafka" in text, text
    assert took < 7, (took, text)  # at most one bounded handshake (5 s) in hand
