"""How ``fleetwatch up`` hears SIGTERM, Ctrl-C and a closed terminal's SIGHUP: recorded,
never raised into its code."""

from __future__ import annotations

import os
import signal

from fleetwatch.service import StopSignals


def test_a_stop_signal_raises_nothing_where_it_lands_and_a_late_one_is_ignored() -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        stopping = StopSignals()
        # Delivered to this, the main, thread: the handler runs between two bytecodes of
        # whatever runs then. An exception there could land in an import.
        os.kill(os.getpid(), signal.SIGTERM)
        total = sum(range(100_000))
        assert total and stopping.stop.is_set() and stopping.reason == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # a second one changes nothing
        sum(range(100_000))
        assert stopping.reason == "SIGTERM"
        stopping.ignore()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        stopping.restore()  # the stop began: the process is exiting, the ignore stays
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_without_a_signal_up_gives_the_handlers_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    StopSignals().restore()
    assert signal.getsignal(signal.SIGINT) is before


def test_a_closed_terminals_sighup_stops_in_order_like_sigterm() -> None:
    """Its default action kills at once, the frames in flight unstored."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        stopping = StopSignals()
        os.kill(os.getpid(), signal.SIGHUP)
        sum(range(100_000))
        assert stopping.stop.is_set() and stopping.reason == "SIGHUP"
        stopping.ignore()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
