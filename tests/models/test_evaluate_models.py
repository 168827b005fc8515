"""``fleetwatch evaluate --models``: rules and rules+models side by side, the model trained
on a history that ends where the evaluated day begins."""

from __future__ import annotations

import pytest

from fleetwatch.config import load
from fleetwatch.evaluate import EvalOptions, WithModels, detector_sets, evaluate
from fleetwatch.evaluate_table import table


def test_models_column_trains_on_the_history_before_the_evaluated_day() -> None:
    config = load(None, env={})
    sets = detector_sets(config, models=True)
    assert list(sets) == ["rules", "rules+models"]
    assert isinstance(sets["rules+models"], WithModels)
    with pytest.raises(RuntimeError, match="trains the model"):
        sets["rules+models"]()  # no model yet: never scored as if it were the rules
    o = EvalOptions(gpus=32, hours=2.0, per_kind=1, kinds=("cooling", "cooling_slow"),
                    train_hours=2.0)
    result = evaluate(o, sets, workers=1)
    assert set(result["columns"]) == {"rules", "rules+models"}
    # Trained on [start - 2 h, start): nothing of the evaluated runs.
    assert result["model"]["range"] == [o.start_ts - 7200.0, o.start_ts]
    assert result["model"]["gpus"] == 32
    # The learned column runs every rule of the rules column, plus the learned detectors.
    names = {d.name for d in sets["rules+models"]()}
    assert {d.name for d in sets["rules"]()} < names and "learned" in names
    assert "rules+models" in table(result)
