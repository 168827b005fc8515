from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.config import ConfigError, DetectorsConfig, load, override
from fleetwatch.models.registry import REGISTRY, build, rules
from fleetwatch.wiring import detectors


def test_every_registered_detector_is_enabled_by_default_and_built_from_config() -> None:
    built = detectors(DetectorsConfig())
    assert [d.name for d in built] == list(REGISTRY)
    for d in built:
        assert d.rules and callable(d.drop)


def test_a_wrong_detector_name_stops_start_up_and_lists_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[detectors]\nenabled = ["thermal_limits", "thermal_peer"]\n')
    config = load(path, env={})
    with pytest.raises(ConfigError, match="'thermal_peer'.*known: thermal_limits, throttle"):
        build(config.detectors)


def test_enabled_from_the_environment_and_numbers_range_checked() -> None:
    config = load(env={"FLEETWATCH_DETECTORS_ENABLED": "xid, node_silent"})
    assert [d.name for d in detectors(config.detectors)] == ["xid", "node_silent"]
    with pytest.raises(ConfigError, match="detectors.peer_margin_c"):
        load(env={"FLEETWATCH_DETECTORS_PEER_MARGIN_C": "0"})
    with pytest.raises(ConfigError, match="detectors.rack_fraction"):
        override(load(env={}), "detectors", rack_fraction=1e400)


def test_enabled_must_be_a_list_of_names(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[detectors]\nenabled = 3\n")
    with pytest.raises(ConfigError, match="list of names"):
        load(path, env={})


def test_every_rule_needs_only_catalogue_metrics() -> None:
    from fleetwatch.catalogue import catalogue

    for rule, metrics in rules().items():
        assert all(m in catalogue() for m in metrics), rule
