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
    """SIGTERM (systemd, docker, Kubernetes) stops ``up`` as Ctrl-C does: the handler
    raises KeyboardInterrupt in the main thread, where the dashboard serves.

    Once the stop has begun (``ignore``), both signals stay ignored until the
    process exits: a second Ctrl-C or SIGTERM neither cuts the drain short nor,
    arriving after the last line, turns the clean exit (0) into a death by
    SIGINT with a traceback.
    """

    def __init__(self) -> None:
        self.reason = "Ctrl-C"
        self._final = False
        self._saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: object) -> None:
        self.reason = "SIGTERM"
        raise KeyboardInterrupt

    def ignore(self) -> None:
        self._final = True
        for s in self._saved:
            signal.signal(s, signal.SIG_IGN)

    def restore(self) -> None:
        """The handlers from before ``up``, unless the stop has begun (see the class)."""
        if self._final:
            return
        for s, handler in self._saved.items():
            signal.signal(s, handler)
