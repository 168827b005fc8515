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
        self._saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
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
