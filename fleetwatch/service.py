"""What every long-running command shares: its preconditions, the ports it takes, how it
waits for its broker, and how it stops."""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fleetwatch.config import Config

log = logging.getLogger("fleetwatch")
T = TypeVar("T")


def needs_kafka(config: Config, command: str) -> bool:
    """False, with one line that says what to set, when the bus is not Kafka."""
    if config.bus.kind == "kafka":
        return True
    log.error("`fleetwatch %s` works over Kafka: set bus.kind = \"kafka\" "
              "(FLEETWATCH_BUS_KIND=kafka) and bus.bootstrap; `fleetwatch up` runs everything "
              "in one process on the in-process bus instead", command)
    return False


def quiet_kafka_client() -> None:
    """Keep kafka-python's own lines out of the log of every command that uses Kafka.

    At INFO it logs every connection it opens (the processor's topic check opens
    admin clients every 30 s: about 114 lines a minute), and while the broker is
    away several lines a second at WARNING and ERROR. fleetwatch says itself, once,
    when the broker goes and when it is back (the agent's spool, the processor's
    ``reach_kafka`` and topic watch), so only the client's CRITICAL lines are kept.

    Except the cause of a refused connection (a SASL mechanism the broker does not
    offer, a wrong password, a failed TLS handshake): the loggers that say it keep
    their ERROR lines, for ``pipeline.bus.kafka_access`` to record (not print) and to name in
    its errors, where kafka-python itself only raises "Unable to bootstrap".
    """
    from fleetwatch.pipeline.bus.kafka_access import REFUSAL_LOGGERS, REFUSALS

    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    for name in REFUSAL_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.ERROR)
        if REFUSALS not in logger.filters:
            logger.addFilter(REFUSALS)  # records the cause; lets no record through


def _address(entry: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` of a bootstrap list (Kafka's default port 9092)."""
    host, sep, port = entry.strip().rpartition(":")
    if not sep or not port.isdigit():
        return entry.strip().strip("[]"), 9092
    return host.strip("[]"), int(port)


def kafka_unreachable(bootstrap: str, timeout_s: float = 2.0) -> str | None:
    """None when some broker of ``bootstrap`` takes a TCP connection, else why none does.

    Only the connection, no Kafka request: it answers in milliseconds (refused) or
    ``timeout_s`` (a dropped packet), where kafka-python's own bootstrap waits 30 s
    that a stop request cannot cut short.
    """
    reasons = []
    for entry in filter(str.strip, bootstrap.split(",")):
        try:
            with socket.create_connection(_address(entry), timeout=timeout_s):
                return None
        except OSError as exc:
            reasons.append(exc.strerror or str(exc) or type(exc).__name__)
    return "; ".join(dict.fromkeys(reasons)) or "no broker address"


def reach_kafka(bootstrap: str, stop: threading.Event,
                connect: Callable[[], T] | None = None,
                first_s: float = 1.0, max_s: float = 30.0) -> T | bool | None:
    """Wait until Kafka at ``bootstrap`` answers, then return ``connect()`` (True without one);
    None when ``stop`` is set first.

    A processor started before its broker (a reboot, a broker upgrade) waits for it,
    as the agent does, instead of dying after a minute with a traceback that a service
    manager turns into a restart loop: one line per attempt, the attempts further apart
    each time (``Backoff``: 1 s, 2 s, ... 30 s). A stop request (SIGTERM) ends the wait
    within the probe's 2 s. ``connect`` raising ``BusError`` counts as one more failed
    attempt (the broker took the connection but did not answer as Kafka).
    """
    from fleetwatch.pipeline.bus import BusError
    from fleetwatch.retry import Backoff

    backoff = Backoff(first_s, max_s)
    while not stop.is_set():
        reason = kafka_unreachable(bootstrap)
        if reason is None:
            try:
                result = connect() if connect is not None else True
            except BusError as exc:
                if not str(exc).startswith("cannot reach"):  # refused: the settings' fault
                    delay = backoff.next()
                    log.warning("%s; will retry in %.0f s (stop with SIGTERM or Ctrl-C)",
                                exc, delay)
                    stop.wait(delay)
                    continue
                reason = str(exc).removeprefix(f"cannot reach Kafka at {bootstrap}: ")
            else:
                if backoff.failures:
                    log.info("reached Kafka at %s after %d failed attempts", bootstrap,
                             backoff.failures)
                return result
        delay = backoff.next()
        log.warning("cannot reach Kafka at %s (%s); will retry in %.0f s (stop with SIGTERM "
                    "or Ctrl-C)", bootstrap, reason, delay)
        stop.wait(delay)
    return None


class PortInUse(OSError):
    """A port that another process listens on; the message names the address, the
    setting or flag that chose it, and the process that holds it when that can be seen.

    An ``OSError`` with ``errno.EADDRINUSE``, as the failed ``bind`` was, so code that
    caught that still does; ``str()`` is the message alone.
    """

    def __init__(self, host: str, port: int, setting: str, owner: str | None = None,
                 change: str | None = None) -> None:
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        held = (f"by {owner}: stop that one first, or" if owner else
                "by another process (another fleetwatch, or dcgm-exporter? `ss -ltnp` names "
                "it):")
        super().__init__(errno.EADDRINUSE, f"{where} ({setting}) is already in use {held} "
                         f"choose another port with {change or setting}")
        self.host, self.port, self.setting, self.owner = host, port, setting, owner

    def __str__(self) -> str:
        return str(self.strerror)


def port_owner(port: int, proc: Path = Path("/proc")) -> str | None:
    """``pid N (command line)`` of the process that listens on TCP ``port``, or None.

    Linux only: the listening socket's inode from ``/proc/net/tcp`` and ``tcp6``, then
    the process with a descriptor on that socket. Another user's processes are only
    seen by root; None then, and the message says the port alone.
    """
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            rows = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cells = row.split()
            # local address "0100007F:1F72", state 0A is LISTEN, inode is the tenth cell
            if len(cells) > 9 and cells[3] == "0A" and int(cells[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cells[9]}]")
    if not inodes:
        return None
    try:
        pids = [p for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            if not any(os.readlink(fd) in inodes for fd in (pid / "fd").iterdir()):
                continue
            argv = (pid / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        if words:
            words[0] = os.path.basename(words[0])
        command = " ".join(" ".join(words).split())  # `python -c` text holds newlines
        return f"pid {pid.name}" + (f" ({command[:80]})" if command else "")
    return None


def listen(host: str, port: int, setting: str, change: str | None = None) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening; ``PortInUse`` naming ``setting``
    (the flag or key that chose the port), the holder, and ``change`` (how to choose
    another: ``setting`` if None) when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As waitress does: a restart binds at once despite connections in TIME_WAIT
        # (on Linux this never allows two listeners on one port).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port, setting, port_owner(port), change) from None
        raise
    except BaseException:
        sock.close()
        raise
    return sock


def bound(host: str, port: int, setting: str, start: Callable[[], T]) -> T:
    """``start()`` (a server that binds ``host:port`` itself), its EADDRINUSE turned
    into ``PortInUse`` naming ``setting`` and the port's holder."""
    try:
        return start()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE and not isinstance(exc, PortInUse):
            raise PortInUse(host, port, setting, port_owner(port)) from None
        raise


class Stop(threading.Event):
    """A stop request; ``cause`` names what asked (``SIGTERM``, ``SIGINT``) for the last line."""

    cause = ""


# What stops a service or `up` in order: a service manager's SIGTERM, Ctrl-C, and the
# SIGHUP of a closed terminal (whose default is to die at once, frames in flight lost).
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP")
                     if hasattr(signal, n))


def stop_on_signals(stop: threading.Event | None = None) -> threading.Event:
    """An event set by SIGTERM, SIGINT or SIGHUP (when called from the main thread).

    systemd, docker and Kubernetes stop a service with SIGTERM, a terminal with
    SIGINT, or with SIGHUP when it is closed: each only asks the loop to stop, so
    that it finishes the batch in hand, commits what is stored and flushes before
    it exits. A
    ``Stop`` given or made here records which signal it was.
    """
    stop = stop or Stop()

    def handle(signum: int, _frame: object) -> None:
        if isinstance(stop, Stop) and not stop.is_set():
            stop.cause = signal.Signals(signum).name
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, handle)
    return stop


class StopSignals:
    """SIGTERM (systemd, docker, Kubernetes) and Ctrl-C stop ``up``. The handler only
    records the request (``stop``, an event, and ``reason``); the dashboard's loop
    checks it twice a second and returns, and ``up`` then stops the rest in order.

    Nothing is raised from the handler. A KeyboardInterrupt raised wherever the main
    thread happens to be (an import, a dataclass being made as the dashboard loads)
    can leave a half-started system behind, and CPython ends a process by SIGINT,
    exit -2, once a KeyboardInterrupt has passed through an ``exec`` of source text
    (``dataclasses`` makes its methods so), even when it was caught and every frame
    was stored. A second signal changes nothing (``ignore``).
    """

    def __init__(self) -> None:
        self._saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        self.stop = Stop()
        stop_on_signals(self.stop)

    @property
    def reason(self) -> str:
        """What asked for the stop, as the last line says it ("" if no signal did)."""
        return "Ctrl-C" if self.stop.cause == "SIGINT" else self.stop.cause

    def ignore(self) -> None:
        """The stop has begun: from here both signals are ignored, also while the
        interpreter exits. CPython puts the default action back for a signal that has
        a Python handler as it exits, so a second, late Ctrl-C would turn a clean exit
        into a death by SIGINT; an ignored signal stays ignored."""
        self.stop.set()
        for s in self._saved:
            signal.signal(s, signal.SIG_IGN)

    def restore(self) -> None:
        """The handlers from before ``up``, unless the stop has begun (see ``ignore``)."""
        if self.stop.is_set():
            return
        for s, handler in self._saved.items():
            signal.signal(s, handler)
