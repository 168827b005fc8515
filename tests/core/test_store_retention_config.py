"""Roll-ups kept for less time than raw samples are refused at load (grow #5): upkeep
deleted the roll-ups, events and alert history of days whose samples were still kept,
and a month's report lost its repeat offenders without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.config import ConfigError, load, override


def test_rollups_shorter_than_raw_are_refused_naming_both_keys(tmp_path: Path) -> None:
    path = tmp_path / "fw.toml"
    path.write_text("[store]\nraw_retention_h = 336\nrollup_retention_d = 0.01\n")
    with pytest.raises(ConfigError) as refused:
        load(path, env={})
    said = str(refused.value)
    assert said.startswith(f"{path} [store] rollup_retention_d: store.rollup_retention_d = "
                           "0.01 (0.24 h) is shorter than store.raw_retention_h = 336"), said
    assert "at least 14 (days)" in said


def test_from_the_environment_and_the_command_line_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="FLEETWATCH_STORE_ROLLUP_RETENTION_D"):
        load(None, env={"FLEETWATCH_STORE_ROLLUP_RETENTION_D": "5"})
    config = load(None, env={})
    with pytest.raises(ConfigError, match="shorter than store.raw_retention_h = 336"):
        override(config, "store", rollup_retention_d=1.0)


def test_equal_or_longer_rollups_load(tmp_path: Path) -> None:
    assert load(None, env={"FLEETWATCH_STORE_ROLLUP_RETENTION_D": "14"}).store \
        .rollup_retention_d == 14
    assert load(None, env={}).store.rollup_retention_d == 400


def test_a_store_that_keeps_no_rollups_of_its_own_is_not_judged(tmp_path: Path) -> None:
    """Both keys are the SQLite store's: a VictoriaMetrics or InfluxDB config that carries
    them (as the previous release loaded it) still loads."""
    for kind in ("victoriametrics", "influx"):
        path = tmp_path / f"{kind}.toml"
        path.write_text(f'[store]\nkind = "{kind}"\nraw_retention_h = 336\n'
                        "rollup_retention_d = 1\n")
        assert load(path, env={}).store.kind == kind
