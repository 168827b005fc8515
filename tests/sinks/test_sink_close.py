"""Closing while a notifying sink is down (oncall2 #1, #3): each lane gets one last bounded
try for what it holds, within the notifier's close budget, then logs once which alert
changes it could not deliver (how many, the first ids) and counts them as failed; the line
says how long the sink was really down and counts only the changes it would have sent."""

from __future__ import annotations

import logging
import time

import pytest

from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.sinks.webhook import WebhookSink
from fleetwatch.retry import Backoff
from tests.sinks.test_sink_lanes import LOGGER, Hook, alert, fast, until


@pytest.fixture
def hook() -> object:
    h = Hook()
    yield h
    h.close()


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno >= logging.ERROR]


def test_a_sink_still_hanging_at_the_close_deadline_has_its_changes_logged_and_counted(
        hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    hook.code = 0                                    # hangs: every request times out
    notifier = Notifier([WebhookSink(hook.url, timeout_s=2.0)], attempts=1, backoff=fast,
                        retry_s=120.0)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    notifier.send([alert("a0"), alert("a1"), alert("p0", state="pending")])
    assert until(lambda: notifier.stats.sinks["webhook"].retries >= 1)  # held, now retrying
    assert until(lambda: hook.requests >= 2)         # the retry is in flight, hanging
    started = time.monotonic()
    notifier.close(timeout_s=0.5)
    assert time.monotonic() - started < 1.5          # bounded by the budget, not the sink
    errors = _errors(caplog)
    assert len(errors) == 1, errors
    assert errors[0].startswith("alert sink webhook: 2 alert changes not delivered there, "
                                "given up at close (still waiting for the sink after 0.5s, "
                                "down for ")
    assert "gpu_temp_high/c/n1/gpu0/a0, gpu_temp_high/c/n1/gpu0/a1" in errors[0]
    assert "p0" not in errors[0]                     # pending: the webhook never sends it
    assert notifier.stats.sinks["webhook"].failed == 1   # the one batch
    assert hook.bodies == []


def test_a_failed_last_try_at_close_says_the_real_outage_and_count(
        hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    hook.code = 500                                  # down, answering at once
    notifier = Notifier([WebhookSink(hook.url, timeout_s=2.0)], attempts=1,
                        backoff=lambda: Backoff(30.0, 30.0), retry_s=120.0)  # no retry before
    caplog.set_level(logging.WARNING, logger=LOGGER)
    notifier.send([alert("a0"), alert("p0", state="pending")])
    assert until(lambda: notifier.stats.sinks["webhook"].retries >= 1)  # held: down
    notifier.send([alert("a1")])                     # held at once (another batch)
    notifier.close(timeout_s=5.0)
    assert hook.requests == 2                        # the first try, one last try at close
    errors = _errors(caplog)
    assert len(errors) == 1, errors
    msg = errors[0]
    assert msg.startswith("alert sink webhook: 2 alert changes not delivered there, given up "
                          "at close (the last try at close failed, down for ")
    down_s = int(msg.split("down for ")[1].split("s)")[0])
    assert down_s < 30                               # not now + sink_retry_s
    assert "sink_retry_s" not in msg
    assert "last error: " in msg and "500" in msg
    assert notifier.stats.sinks["webhook"].failed == 2   # both batches
    assert notifier.stats.failed == 2


def test_no_time_left_for_a_last_try_gives_up_without_one(
        hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    hook.code = 500
    notifier = Notifier([WebhookSink(hook.url, timeout_s=30.0)], attempts=1, backoff=fast,
                        retry_s=120.0)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    notifier.send([alert("a0")])
    assert until(lambda: notifier.stats.sinks["webhook"].retries >= 1)
    notifier.close(timeout_s=1.0)                    # a 30 s try does not fit in 1 s
    errors = _errors(caplog)
    assert len(errors) == 1, errors
    assert "no time left at close for a last try (the sink's timeout is 30s)" in errors[0]
    assert notifier.stats.sinks["webhook"].failed == 1


def test_a_sink_back_for_the_last_try_gets_the_held_changes(
        hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    hook.code = 500
    notifier = Notifier([WebhookSink(hook.url, timeout_s=2.0)], attempts=1,
                        backoff=lambda: Backoff(30.0, 30.0), retry_s=120.0)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    notifier.send([alert("a0")])
    assert until(lambda: notifier.stats.sinks["webhook"].retries >= 1)
    hook.code = 200                                  # back; the next retry is 30 s away
    notifier.close(timeout_s=5.0)
    assert [hook.states(b) for b in hook.bodies] == [[("a0", "firing")]]
    assert _errors(caplog) == []
    assert notifier.stats.sinks["webhook"].failed == 0
