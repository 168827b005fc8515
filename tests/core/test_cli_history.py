"""``fleetwatch train`` and ``fleetwatch alerts`` on the command line: a missing store, a
training span out of range, phases without a model, and ``--since`` as typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main


def test_train_on_a_missing_store_is_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexist.db"
    assert main(["train", "--store", str(missing), "--duration", "2h"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fleetwatch train: no store at {missing}") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, named", [(["--duration", "20m"], "--duration 20 min"),
                                         (["--duration", "0"], "--duration 0 s"),
                                         (["--days", "500"], "--days 500")])
def test_a_training_span_out_of_range_names_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str) -> None:
    assert main(["train", "--store", str(tmp_path / "x.db"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fleetwatch train: {named}: train on 1 h to 400 d of history")
    assert "configuration error" not in err


def test_train_warns_of_phases_without_a_model_and_ends_in_utc(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetwatch.train
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    db = tmp_path / "h.db"
    SqliteStore(db).close()
    meta = {"train_s": 1.0, "gpus": 8, "thermal_regressor": "huber",
            "thermal_heldout_mae_c": {}, "thermal_spread_c": 1.0, "anomaly_phases": {3: 85},
            "anomaly_phases_missing": ["idle", "light", "medium"], "lemon_nodes": 0}
    monkeypatch.setattr(fleetwatch.train, "train",
                        lambda *a, **k: (tmp_path / "m.fwm", meta))
    assert main(["train", "--store", str(db), "--duration", "1h", "--end", "1780000000",
                 "--out", str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert "training on 1 h of sqlite store history ending 2026-05-28 20:26 UTC" in err
    named = ("idle work (SM activity under 5%), light work (SM activity 5%-30%), medium work "
             "(SM activity 30%-60%)")
    assert f"warning: the anomaly model has no model of {named}" in err
    from fleetwatch.cli_history import _phases_without_model

    assert _phases_without_model({"anomaly_phases": {"3": 85}}) == named   # an older file
    assert _phases_without_model({"anomaly_phases": {str(p): 60 for p in range(4)}}) == ""


def test_train_says_when_the_store_held_far_less_than_the_span_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An installation's first night: `train --days 7` on a store of 20 minutes wrote a
    model the processors then said was "trained on" the week asked."""
    import fleetwatch.train
    from fleetwatch.models.learned import trained_text
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    db = tmp_path / "h.db"
    SqliteStore(db).close()
    end = 1780000000.0
    meta = {"train_s": 1.0, "gpus": 516, "thermal_regressor": "huber",
            "thermal_heldout_mae_c": {}, "thermal_spread_c": 1.0, "anomaly_phases": {3: 85},
            "anomaly_phases_missing": ["idle"], "lemon_nodes": 0,
            "range": [end - 7 * 86400, end], "data_range": [end - 1200, end]}
    monkeypatch.setattr(fleetwatch.train, "train", lambda *a, **k: (tmp_path / "m.fwm", meta))
    assert main(["train", "--store", str(db), "--days", "7", "--end", str(int(end)),
                 "--out", str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    held = "history 2026-05-28T20:06Z to 2026-05-28T20:26Z (0.3 h), of " \
           "2026-05-21T20:26Z to 2026-05-28T20:26Z asked"
    assert trained_text(meta) == held
    assert f"warning: the store held only {held}" in err
    assert "(e.g. --days 7)" not in err  # it was asked for a week
    assert trained_text({"range": [end - 3600, end]}) == \
        "2026-05-28T19:26Z to 2026-05-28T20:26Z"  # an older file: the range asked only


def test_alerts_since_echoes_what_was_typed(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    db = tmp_path / "a.db"
    SqliteStore(db).close()
    assert main(["alerts", "--store", str(db), "--since", "48h"]) == 0
    assert "none resolved in the last 48h" in capsys.readouterr().out
