"""A key that no longer does anything still lets a config start, with a warning naming it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fleetwatch.config import load


def test_a_retired_detector_key_is_ignored_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "fleetwatch.toml"
    path.write_text("[detectors]\nstraggler_gap = 0.4\nstraggler_clock_frac = 0.8\n")
    with caplog.at_level(logging.WARNING, logger="fleetwatch.config"):
        config = load(path, env={})
    assert config.detectors.straggler_clock_frac == 0.8
    assert not hasattr(config.detectors, "straggler_gap")
    [record] = [r for r in caplog.records if "straggler_gap" in r.getMessage()]
    assert "detectors.straggler_gap is no longer used and is ignored" in record.getMessage()
    assert "straggler_clock_frac" in record.getMessage()
    # From the environment too.
    with caplog.at_level(logging.WARNING, logger="fleetwatch.config"):
        load(None, env={"FLEETWATCH_DETECTORS_STRAGGLER_GAP": "0.5"})
    assert sum("straggler_gap" in r.getMessage() for r in caplog.records) == 2
