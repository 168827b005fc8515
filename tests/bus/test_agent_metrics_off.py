"""``agent.metrics_port = 0`` turns the agent's /metrics off, as ``processor.metrics_port
= 0`` does the processor's: one shared config file with it starts processors and agents.
(It stopped every processor at load: "must be between 1 and 65535".)"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from fleetwatch.agent_service import AgentService
from fleetwatch.config import load
from tests.servers import Server, wait_for

pytestmark = pytest.mark.kafka


def test_one_config_with_agent_metrics_port_0_serves_agents_and_processors(
        kafka: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    toml = tmp_path / "fleetwatch.toml"
    toml.write_text(f"""
[node]
cluster = "dc1"
node = "node-a"
[agent]
metrics_port = 0
interval_s = 0.5
spool_dir = "{tmp_path / 'spool'}"
kernel_log = ""
[bus]
kind = "kafka"
bootstrap = "{kafka.address}"
topic = "off-{tmp_path.name[-20:]}"
[processor]
metrics_port = 0
""")
    config = load(toml, {})  # what `fleetwatch process` loads too: no configuration error
    assert config.agent.metrics_port == 0 == config.processor.metrics_port
    service = AgentService(config, fake_gpus=1)
    assert service.server is None and service.producer is not None
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    with caplog.at_level(logging.INFO):
        thread.start()
        try:
            wait_for("the agent's frames acknowledged by the broker",
                     lambda: service.producer.sent >= 3, timeout_s=60)
        finally:
            stop.set()
            thread.join(30)
    assert not thread.is_alive()
    assert "/metrics off (agent.metrics_port = 0)" in caplog.text
