"""What every long-running command shares: its preconditions and how it stops."""

from __future__ import annotations

import logging
import signal
import threading

from fleetwatch.config import Config

log = logging.getLogger("fleetwatch")


def needs_kafka(config: Config, command: str) -> bool:
    """False, with one line that says what to set, when the bus is not Kafka."""
    if config.bus.kind == "kafka":
        return True
    log.error("`fleetwatch %s` works over Kafka: set bus.kind = \"kafka\" "
              "(FLEETWATCH_BUS_KIND=kafka) and bus.bootstrap; `fleetwatch up` runs everything "
              "in one process on the in-process bus instead", command)
    return False


class Stop(threading.Event):
    """A stop request; ``cause`` names what asked (``SIGTERM``, ``SIGINT``) for the last line."""

    cause = ""


def stop_on_signals(stop: threading.Event | None = None) -> threading.Event:
    """An event set by SIGTERM or SIGINT (when called from the main thread).

    systemd, docker and Kubernetes stop a service with SIGTERM, a terminal
    with SIGINT: both only ask the loop to stop, so that it finishes the
    batch in hand, commits what is stored and flushes before it exits. A
    ``Stop`` given or made here records which signal it was.
    """
    stop = stop or Stop()

    def handle(signum: int, _frame: object) -> None:
        if isinstance(stop, Stop) and not stop.is_set():
            stop.cause = signal.Signals(signum).name
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handle)
    return stop
