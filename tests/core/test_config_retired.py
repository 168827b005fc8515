"""A key that no longer does anything still lets a config start, with a warning naming it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fleetwatch.config import ConfigError, load


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


def test_every_moved_unknown_or_retired_key_is_named_in_one_error(tmp_path: Path) -> None:
    """upgrader round 20 #5: an old config was refused one key per run; now one error names
    every key to change, from the file and from the environment, each with its fix."""
    path = tmp_path / "old.toml"
    path.write_text("[alerts]\ngpu_temp_limit_c = 85.0\nfor_s = 120.0\nwebhok_url = \"\"\n"
                    "[detectors]\nstraggler_gap = 0.4\n[nodes]\ncluster = \"a\"\n")
    env = {"FLEETWATCH_ALERTS_FOR_S": "60", "FLEETWATCH_STORE_PATHH": "x.db",
           "FLEETWATCH_NOPE_X": "1"}
    with pytest.raises(ConfigError) as got:
        load(path, env=env)
    text = str(got.value)
    for want in ("alerts.gpu_temp_limit_c is now detectors.site_temp_limit_c",
                 "alerts.for_s is now detectors.site_temp_for_s",
                 "environment FLEETWATCH_ALERTS_FOR_S",
                 "unknown key alerts.webhok_url", "unknown section [nodes]",
                 "unknown key store.pathh", "environment FLEETWATCH_NOPE_X: no such setting",
                 "detectors.straggler_gap is no longer used"):
        assert want in text, want
    assert text.count("\n") >= 8          # one line each, after the heading
    # the same config fixed as it says starts
    path.write_text("[detectors]\nsite_temp_limit_c = 85.0\nsite_temp_for_s = 120.0\n")
    assert load(path, env={}).detectors.site_temp_limit_c == 85.0


def test_a_single_wrong_key_is_still_one_plain_message(tmp_path: Path) -> None:
    path = tmp_path / "old.toml"
    path.write_text("[alerts]\nfor_s = 120.0\n")
    with pytest.raises(ConfigError, match=r"^\S+ \[alerts\] for_s: alerts.for_s is now "
                                          r"detectors.site_temp_for_s: move it there$"):
        load(path, env={})
