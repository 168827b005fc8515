from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.models.thermal_model import FEATURES, ThermalModel, _candidates


@pytest.mark.parametrize("kind", ["huber", "gradient_boosting"])
def test_expected_is_the_estimators_prediction(kind: str) -> None:
    """The processor's fast path gives scikit-learn's numbers, missing inputs included."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 500, (3000, len(FEATURES)))
    y = 25.0 + 0.1 * X[:, 0] + 0.8 * X[:, 4] + rng.normal(0, 0.5, 3000)
    X[rng.random(X.shape) < 0.05] = np.nan
    used = tuple(i for i in range(len(FEATURES)) if i != 3)  # a column never reported
    est = _candidates(0)[kind]
    est.fit(X[:, used], y)  # type: ignore[attr-defined]
    model = ThermalModel(est, kind, {}, used=used)
    rows = X[:300]
    want = est.predict(rows[:, used])  # type: ignore[attr-defined]
    assert np.allclose(model.expected(rows), want, rtol=0, atol=1e-9)
    assert np.isnan(rows).any()
