from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import Server, kafka_broker, victoria_metrics

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Real captures beside the checkout (../shared/data); CI always has them."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent: these checks read real captures from there")
    return SHARED_DATA


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
