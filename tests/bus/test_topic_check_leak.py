"""A failed topic check gives back what it opened: its client's IO thread and sockets.

The agent checks its topics before every new producer client, i.e. at every spool
retry while the broker is away; the processor every 30 s. A check that cannot
bootstrap (nothing listens, or something accepts and never answers) must leave the
process with the threads and file descriptors it had.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from fleetwatch.pipeline.bus import BusError
from fleetwatch.pipeline.bus.topics import ensure_topic
from tests.servers import free_port, wait_port

CHECKS = 4


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# In another process, so that the connections it accepts are not counted here.
_BLACK_HOLE = """
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
held = []
while True:
    held.append(s.accept()[0])
"""


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A port that accepts connections and never answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", _BLACK_HOLE, str(port)])
    try:
        wait_port(port)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def quiet_kafka() -> Iterator[None]:
    """As the agent and processor run (``quiet_kafka_client``): pytest's log capture would
    otherwise keep kafka-python's records, and through them the failed sockets."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.mark.parametrize("where", ["refused", "black_hole"])
def test_failed_topic_checks_leave_threads_and_fds_as_they_were(
        where: str, request: pytest.FixtureRequest, quiet_kafka: None) -> None:
    address = (f"127.0.0.1:{free_port()}" if where == "refused"
               else request.getfixturevalue("black_hole"))
    # One check first: kafka-python's lazily made module state is not a leak.
    with pytest.raises(BusError, match="cannot reach Kafka"):
        ensure_topic(address, "t", 6, timeout_s=0.5)
    threads, fds = threading.active_count(), _fds()
    for _ in range(CHECKS):
        with pytest.raises(BusError, match="cannot reach Kafka"):
            ensure_topic(address, "t", 6, timeout_s=0.5)
    assert (threading.active_count(), _fds()) == (threads, fds)
