"""`fleetwatch process` against a VictoriaMetrics without -dedup.minScrapeInterval: one
configuration-error line that names the flag to set, exit status 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from tests.servers import Server, free_port, victoria_metrics

pytestmark = pytest.mark.kafka


def test_process_refuses_a_server_without_dedup_as_a_configuration_error(
        tmp_path: Path, kafka: Server, capsys: pytest.CaptureFixture[str]) -> None:
    server = victoria_metrics(tmp_path, **{"dedup.minScrapeInterval": None}).start()
    try:
        config = tmp_path / "fw.toml"
        config.write_text(f'[bus]\nkind = "kafka"\nbootstrap = "{kafka.address}"\n'
                          f'[store]\nkind = "victoriametrics"\nurl = "http://{server.address}"\n'
                          f'[processor]\nmetrics_port = {free_port()}\n')
        assert main(["--config", str(config), "process"]) == 2
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert err.endswith(
        f"fleetwatch: configuration error: VictoriaMetrics at http://{server.address} runs "
        "without -dedup.minScrapeInterval, so every batch the processor writes again after a "
        "restart or a store outage would be stored twice. Restart victoria-metrics with "
        "-dedup.minScrapeInterval=1ms\n")
    assert "Traceback" not in err
