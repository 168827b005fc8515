"""VictoriaMetrics keeps no comments: `silence add --comment` and `ack --comment` say so
when they drop one (a postmortem must not find the reasons gone), and what is kept still
reads back (who, when; the timeline)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from tests.servers import Server
from tests.store.helpers import cluster_name, force_flush


def test_comments_dropped_are_warned_of_and_the_rest_is_in_the_timeline(
        tmp_path: Path, victoria: Server, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "fw.toml"
    config.write_text(f'[store]\nkind = "victoriametrics"\nurl = "http://{victoria.address}"\n')
    tag, now = cluster_name(), time.time()
    store = VictoriaMetricsStore(f"http://{victoria.address}")
    alert = Alert(f"gpu_lost/{tag}/node-9/gpu2/1", "gpu_lost", "critical", tag, "r1",
                  "node-9", "gpu2", "firing", now - 60, now - 30, 1.0, "", fired_ts=now - 60)
    store.write_alerts([alert])
    force_flush(victoria.address)
    store.close()
    base = ["--config", str(config)]
    assert main([*base, "silence", "add", "node=node-9", f"cluster={tag}", "--by", "alice",
                 "--comment", "FAC-123: CRAH failed"]) == 0
    err = capsys.readouterr().err
    assert ("WARNING: VictoriaMetricsStore keeps no comments: 'FAC-123: CRAH failed' of the "
            "silence was not stored") in err
    assert main([*base, "ack", alert.id, "--by", "bob", "--comment", "RMA-77"]) == 0
    assert "keeps no comments: 'RMA-77' of the acknowledgement" in capsys.readouterr().err
    assert main([*base, "ack", alert.id, "--by", "bob"]) == 0  # no comment: nothing said
    assert "WARNING" not in capsys.readouterr().err
    assert main([*base, "timeline", "--since", "10m", "--cluster", tag, "--json"]) == 0
    out = capsys.readouterr()
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert [(r["kind"], r["what"], r["by"]) for r in rows if r["kind"] in ("ack", "silence")
            ] == [("silence", "silence added", "alice"), ("ack", "acknowledged", "bob")]
    assert "keeps no comment of acknowledgements and silences" in out.err
