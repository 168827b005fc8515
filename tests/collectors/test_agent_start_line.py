"""The agent's start line names its node with its cluster: node names repeat from
cluster to cluster."""

from __future__ import annotations

import logging
import threading

import pytest

from fleetwatch.agent_service import AgentService
from fleetwatch.config import AgentConfig, BusConfig, Config, NodeConfig
from tests.servers import free_port


def test_the_start_line_names_cluster_and_node(caplog: pytest.LogCaptureFixture) -> None:
    config = Config(node=NodeConfig("c-east", "r1", "node001"),
                    agent=AgentConfig(interval_s=0.5, metrics_host="127.0.0.1",
                                      metrics_port=free_port(), kernel_log=""),
                    bus=BusConfig(kind="memory"))
    service = AgentService(config, fake_gpus=1)
    stop = threading.Event()
    stop.set()  # one start, then out
    with caplog.at_level(logging.INFO, logger="fleetwatch.agent_service"):
        assert service.run(stop) == 0
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("agent ")]
    assert line.startswith("agent c-east/node001: every 0.5s sending nothing")
