from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import Server, kafka_broker, victoria_metrics

# Real captures (dcgm-exporter scrapes, kernel logs), copied into the repository with
# their licences and origins: tests/data/README.md.
REAL_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def real_data() -> Path:
    """The folder of real captures; a clone without it fails here, it never skips."""
    assert (REAL_DATA / "README.md").is_file(), (
        f"{REAL_DATA} is missing: the real captures ship with the repository (tests/data)")
    return REAL_DATA


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A Tansu Kafka-protocol broker on 127.0.0.1, shared by the session."""
    server = kafka_broker(tmp_path_factory.mktemp("kafka")).start()
    yield server
    server.stop()


@pytest.fixture
def own_kafka(tmp_path: Path) -> Iterator[Server]:
    """A broker of the test's own, which the test may stop and start."""
    server = kafka_broker(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A VictoriaMetrics server on 127.0.0.1, shared by the session."""
    server = victoria_metrics(tmp_path_factory.mktemp("vm")).start()
    yield server
    server.stop()
