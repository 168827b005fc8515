from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_alerts import frame


def test_cli_silence_mutes_a_running_processors_notifications_and_ack_is_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    store = SqliteStore(db)
    notifier = Notifier([], silences=store.silences, acks=store.acks, background=False,
                        reload_s=0)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notify=notifier.send)
    assert main(["silence", "--store", db, "add", "node=n1", "rule=~gpu_.*", "--for", "2h",
                 "--by", "ops", "--comment", "fan swap"]) == 0
    silence_id = capsys.readouterr().out.strip()
    now = time.time()
    hot = [frame(now, [95])]
    (notice,) = notifier.send(processor.alerts.observe(hot, processor.detectors[0].update(hot)))
    assert notice.muted_by == f"silence:{silence_id}" and not notice.notify
    assert main(["silence", "--store", db, "list"]) == 0
    assert "node=n1,rule=~gpu_.*" in capsys.readouterr().out
    assert main(["silence", "--store", db, "expire", silence_id]) == 0
    capsys.readouterr()
    assert main(["silence", "--store", db, "list"]) == 0
    assert capsys.readouterr().out == ""                      # no longer in force
    assert main(["silence", "--store", db, "list", "--all"]) == 0
    assert silence_id in capsys.readouterr().out


def test_cli_ack_needs_an_open_alert_and_a_name(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    store = SqliteStore(db)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)])
    processor.process([frame(100, [95])])
    (alert,) = store.alerts()
    assert main(["ack", alert.id, "--by", "oncall", "--store", db]) == 0
    assert [a.by for a in store.acks()] == ["oncall"]
    assert main(["ack", "nope", "--by", "oncall", "--store", db]) == 2
    assert "no open alert 'nope'" in capsys.readouterr().err
    assert main(["ack", alert.id, "--by", "", "--store", db]) == 2


@pytest.mark.parametrize("argv, why", [
    (["add", "colour=red"], "LABEL=VALUE"),
    (["add", "node=n1", "--for", "0s"], "must be above 0"),
    (["expire", "nosuch"], "no silence 'nosuch'"),
])
def test_cli_silence_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                            why: str) -> None:
    assert main(["silence", "--store", str(tmp_path / "f.db"), *argv]) == 2
    assert why in capsys.readouterr().err


def test_a_silence_made_now_is_in_force_now_and_kept_to_the_ms(tmp_path: Path) -> None:
    """Times are cut to the ms (every backend keeps those exactly), downwards: a start
    rounded up would begin a fraction of a ms after the alerts of this instant."""
    from fleetwatch.silencing import add_silence

    store = SqliteStore(tmp_path / "f.db")
    s = add_silence(store, ["node=n1"], 60.0, start_ts=1_795_000_000.0006)
    assert (s.start_ts, s.end_ts) == (1_795_000_000.0, 1_795_000_060.0)
    assert store.silences(1_795_000_000.0006) == [s]
