"""How fleetwatch's Kafka clients get into a broker (``pipeline.bus.kafka``, ``topics``):
the configured security protocol as kafka-python's arguments, and, when a broker refuses
a connection, why (a SASL mechanism it does not offer, a wrong password, missing ACLs, a
failed TLS handshake), named in the ``BusError`` instead of "cannot reach"."""

from __future__ import annotations

import logging
import socket
import ssl
import time
from typing import Any

import kafka.errors as kerr
from kafka.net.transport import KafkaSSLTransport

from fleetwatch.config import BusConfig
from fleetwatch.pipeline.bus import BusError


def kafka_security(bus: BusConfig) -> dict[str, Any]:
    """kafka-python keyword arguments for the configured security protocol: every client
    fleetwatch makes (producer, consumer, admin, the topic check's probe) takes these."""
    out: dict[str, Any] = {"security_protocol": bus.security_protocol}
    if bus.security_protocol.startswith("SASL"):
        out["sasl_mechanism"] = bus.sasl_mechanism
        out["sasl_plain_username"] = bus.sasl_username
        out["sasl_plain_password"] = bus.sasl_password.reveal()
    if bus.security_protocol in ("SSL", "SASL_SSL"):
        if not bus.ssl_check_hostname:  # kafka-python checks it unless told otherwise
            out["ssl_check_hostname"] = False
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(bus, key):
                out[key] = getattr(bus, key)
    return out


# Why a broker refused a connection, as fleetwatch says it. kafka-python logs the cause
# (kafka.net.connection, kafka.net.manager) and then raises only "Unable to bootstrap"
# once its timeout is over; its log is kept quiet (service.quiet_kafka_client), so the
# cause is recorded here and named in the BusError instead of "cannot reach".
def refusal_of(exc: BaseException) -> str | None:
    """What a connection error says about fleetwatch's settings, or None (a network error)."""
    if isinstance(exc, kerr.UnsupportedSaslMechanismError):
        return (f"the broker does not offer this SASL mechanism ({exc}): check "
                "bus.sasl_mechanism against the broker's sasl.enabled.mechanisms, and "
                "bus.security_protocol")
    if isinstance(exc, kerr.SaslAuthenticationFailedError | kerr.IllegalSaslStateError):
        return (f"SASL authentication failed ({exc}): check bus.sasl_username, "
                "bus.sasl_password and bus.sasl_mechanism")
    if isinstance(exc, kerr.AuthorizationError):
        return f"not authorized ({exc}): check the ACLs of bus.sasl_username"
    if isinstance(exc, kerr.KafkaConnectionError) and str(exc).startswith(
            ("Handshake failed", "KafkaConnectionError: Handshake failed")):
        return (f"the TLS handshake failed ({exc}): check bus.security_protocol, "
                "bus.ssl_cafile (the CA of the brokers' certificates) and, for a client "
                "certificate, bus.ssl_certfile and bus.ssl_keyfile")
    return None


class _Refusals(logging.Filter):
    """Keeps the latest refusal that kafka-python logged (see ``refusal_of``) and lets no
    record of the loggers it filters through: they print nothing, whatever their
    ``propagate`` (``service.quiet_kafka_client`` puts it on them)."""

    def __init__(self) -> None:
        super().__init__()
        self.latest: tuple[float, str] | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            why = refusal_of(arg) if isinstance(arg, BaseException) else None
            if why is not None:
                self.latest = (time.monotonic(), why)
        return False


REFUSALS = _Refusals()
# The loggers that name a failed connection's cause.
REFUSAL_LOGGERS = ("kafka.net.connection", "kafka.net.manager")


def cannot_reach(bootstrap: str, exc: BaseException, since: float) -> str:
    """The message for a client that could not start at ``bootstrap``: the broker's refusal
    when one was logged since ``since`` (``time.monotonic()``), else "cannot reach"."""
    why = refusal_of(exc)
    latest = REFUSALS.latest
    if why is None and latest is not None and latest[0] >= since:
        why = latest[1]
    if why is not None:
        return f"Kafka at {bootstrap} refused fleetwatch's connection: {why}"
    unknown = unresolved(bootstrap)
    if unknown:
        return (f"cannot reach Kafka at {bootstrap}: {unknown}: check the host names of "
                "bus.bootstrap, and name resolution (DNS, /etc/hosts) on this machine")
    return f"cannot reach Kafka at {bootstrap}: {exc}"


def unresolved(bootstrap: str) -> str | None:
    """What the resolver says when no host of ``bootstrap`` has an address (a misspelt
    name, no DNS): kafka-python's own error names neither. None: one resolves."""
    said = []
    for entry in bootstrap.split(","):
        host, port = _first_address(entry)
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            return None
        except (socket.gaierror, UnicodeError) as exc:
            said.append(f"no address for host {host!r} ({getattr(exc, 'strerror', None) or exc})")
        except OSError:
            return None
    return "; ".join(said) or None


# kafka-python (3.0) waits for a TLS handshake without a bound: against a listener that
# does not speak TLS (a plaintext one reads the ClientHello as the start of a huge
# request and waits for the rest) its client never starts, never raises, and holds the
# thread that would obey SIGTERM. So a client with TLS is made only once a handshake of
# fleetwatch's own, bounded, with the same settings, has been answered.
TLS_TIMEOUT_S = 5.0


def _first_address(bootstrap: str) -> tuple[str, int]:
    """The first ``host:port`` (or ``[v6]:port``) of a bootstrap list; port 9092 if none."""
    entry = bootstrap.split(",")[0].strip()
    host, sep, port = entry.rpartition(":")
    if not sep or not port.isdigit():
        return entry.strip("[]"), 9092
    return host.strip("[]"), int(port)


def tls_refusal(bootstrap: str, security: dict[str, Any] | None,
                timeout_s: float | None = None) -> str | None:
    """Why a TLS connection to the first bootstrap broker fails (its handshake with the
    configured settings), or None: it succeeded, the protocol has no TLS, or the broker
    cannot be reached at all (said elsewhere as "cannot reach")."""
    if not security or not str(security.get("security_protocol", "")).endswith("SSL"):
        return None
    timeout_s = timeout_s or TLS_TIMEOUT_S
    host, port = _first_address(bootstrap)
    config = {**KafkaSSLTransport.DEFAULT_CONFIG,
              **{k: v for k, v in security.items() if k.startswith("ssl_")}}
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return None  # not reached: the "cannot reach" path says so
    try:
        context = KafkaSSLTransport._build_ssl_context(config)
    except (OSError, ValueError) as exc:
        sock.close()
        return (f"the TLS settings cannot be used ({exc}): check bus.ssl_cafile, "
                "bus.ssl_certfile and bus.ssl_keyfile")
    plaintext = ("a plaintext listener? check bus.security_protocol (PLAINTEXT or "
                 "SASL_PLAINTEXT where the listener has no TLS) and that bus.bootstrap "
                 "names the brokers' TLS listener")
    try:
        with context.wrap_socket(sock, server_hostname=host):
            return None
    except ssl.SSLCertVerificationError as exc:
        return (f"the TLS handshake failed ({exc}): check bus.ssl_cafile "
                "(the CA of the brokers' certificates) and bus.ssl_check_hostname")
    except TimeoutError:
        return f"no answer to a TLS handshake within {timeout_s:g} s: {plaintext}"
    except ssl.SSLError as exc:
        if exc.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE",
                          "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST", "UNEXPECTED_EOF_WHILE_READING"):
            return f"it does not answer TLS ({exc.reason}): {plaintext}"
        return (f"the TLS handshake failed ({exc}): check bus.security_protocol, "
                "bus.ssl_cafile and, for a client certificate, bus.ssl_certfile and "
                "bus.ssl_keyfile")
    except OSError as exc:
        return f"it closed the connection during the TLS handshake ({exc}): {plaintext}"
    finally:
        sock.close()


# ApiVersions v0 (api key 18), correlation id 0x66770001: the first request every Kafka
# client sends, answered before any SASL step. Its client id ends with a blank line so
# that a line-based server (HTTP) on that port answers too, instead of waiting for more.
_CLIENT_ID = b"fleetwatch-probe\r\n\r\n"
_API_VERSIONS = (b"\x00\x12\x00\x00\x66\x77\x00\x01"
                 + len(_CLIENT_ID).to_bytes(2, "big") + _CLIENT_ID)


def not_kafka(bootstrap: str, security: dict[str, Any] | None,
              timeout_s: float | None = None) -> str | None:
    """What the first bootstrap address says when it is not a Kafka listener (an HTTP or
    other server on that port), or None: Kafka answered, TLS is configured (see
    ``tls_refusal``), it cannot be reached, or it stays silent (a busy broker may)."""
    if security and str(security.get("security_protocol", "")).endswith("SSL"):
        return None
    timeout_s = timeout_s or TLS_TIMEOUT_S
    try:
        with socket.create_connection(_first_address(bootstrap), timeout=timeout_s) as sock:
            sock.sendall(len(_API_VERSIONS).to_bytes(4, "big") + _API_VERSIONS)
            head = b""
            while len(head) < 8:
                chunk = sock.recv(64 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError:
        return None  # silent, gone or unreachable: kafka-python's own error says it
    if len(head) >= 8 and head[4:8] == b"\x66\x77\x00\x01":
        return None
    said = (f"it said {head.decode('ascii', 'replace').strip().splitlines()[0][:60]!r}"
            if head.strip() else "it closed the connection")
    return (f"something answers there but not as Kafka ({said} to a Kafka "
            "request): check bus.bootstrap (a Kafka listener, often port 9092) and "
            "bus.security_protocol")


def check_listener(bootstrap: str, security: dict[str, Any] | None) -> None:
    """Raise ``BusError`` when a kafka-python client would hang or be told only "cannot
    reach": TLS that fails (``tls_refusal``) or a listener that is not Kafka
    (``not_kafka``). Called before any kafka-python client is made."""
    why = tls_refusal(bootstrap, security)
    if why is not None:
        raise BusError(f"Kafka at {bootstrap} refused fleetwatch's connection: {why}")
    why = not_kafka(bootstrap, security)
    if why is not None:
        raise BusError(f"no Kafka at {bootstrap}: {why}")


def refused_options(role: str, exc: BaseException) -> str:
    """kafka-python refused a client's settings as it was made: the user's options
    (``[bus.kafka_producer]`` / ``[bus.kafka_consumer]``) are named, not an unreachable
    broker."""
    return (f"kafka-python refused the {role}'s settings ({type(exc).__name__}: {exc}): "
            f"check the [bus.kafka_{role}] options")
