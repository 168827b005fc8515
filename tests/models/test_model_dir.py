"""The model directory: the newest file that loads is used, in the order files were written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fleetwatch.models.artifact import ModelSet, candidates, newest, save
from fleetwatch.models.learned import LearnedDetectors
from fleetwatch.models.thermal_model import ThermalModel

NOW = 1_795_000_000.0  # 2026-11-18T...


def model_set(kind: str) -> ModelSet:
    """A model file's content that says which one it is (its thermal model's kind)."""
    return ModelSet(ThermalModel(None, kind, {}), None, {}, {"gpus": 1})


def damage(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # a copy cut short: the pickle is truncated


def old_format(path: Path) -> None:
    head, body = path.read_bytes().split(b"\n", 1)
    path.write_bytes(json.dumps({**json.loads(head), "format": 1}).encode() + b"\n" + body)


def test_files_written_in_the_same_second_are_ordered_as_written(tmp_path: Path) -> None:
    paths = [save(model_set(f"m{k}"), tmp_path, now=NOW) for k in range(12)]
    assert paths[1].name.endswith("-1.fwm") and paths[11].name.endswith("-11.fwm")
    assert newest(tmp_path) == paths[-1]
    assert candidates(tmp_path) == paths[::-1]
    later = save(model_set("later"), tmp_path, now=NOW + 1)
    assert newest(tmp_path) == later


def test_a_name_without_a_timestamp_is_tried_last(tmp_path: Path) -> None:
    good = save(model_set("good"), tmp_path, now=NOW)
    other = tmp_path / "fleetwatch-model-backup.fwm"
    other.write_bytes(good.read_bytes())
    assert candidates(tmp_path) == [good, other]


@pytest.mark.parametrize("spoil, why", [(damage, "damaged"), (old_format, "format 1")])
def test_a_bad_newest_file_falls_back_to_the_newest_that_loads(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, spoil, why: str) -> None:
    caplog.set_level(logging.INFO, "fleetwatch.models.learned")
    good = save(model_set("good"), tmp_path, now=NOW - 86400)
    bad = save(model_set("bad"), tmp_path, now=NOW)
    spoil(bad)
    now = [0.0]
    learned = LearnedDetectors(tmp_path, check_every_s=60, clock=lambda: now[0])
    assert learned.loaded == good and learned.thermal.model.kind == "good"
    text = caplog.text
    assert f"{bad.name}" in text and why in text and "skipped" in text
    assert f"loaded model {good.name}" in text
    # Checked again a minute later: the same files, nothing new to say or load.
    caplog.clear()
    now[0] = 61.0
    assert learned.reload() is False and caplog.text == ""
    # A good file written after them wins.
    newer = save(model_set("newer"), tmp_path, now=NOW + 60)
    now[0] = 122.0
    assert learned.reload() is True
    assert learned.loaded == newer and learned.thermal.model.kind == "newer"


def test_a_file_that_never_loads_leaves_the_rules_alone_and_says_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fleetwatch.models.learned")
    damage(save(model_set("bad"), tmp_path, now=NOW))
    learned = LearnedDetectors(tmp_path, check_every_s=0)
    assert learned.loaded is None and learned.thermal.model is None
    learned.reload()
    assert caplog.text.count("damaged") == 1
    assert caplog.text.count("running the rules alone") == 1


def test_a_file_mended_in_place_is_tried_again(tmp_path: Path) -> None:
    # A copy still being written is refused; once whole (another size or time), it loads.
    path = save(model_set("copied"), tmp_path, now=NOW)
    whole = path.read_bytes()
    damage(path)
    learned = LearnedDetectors(tmp_path, check_every_s=0)
    assert learned.loaded is None
    path.write_bytes(whole)
    assert learned.reload() is True and learned.loaded == path


def test_the_files_skipped_and_why_are_there_to_report(tmp_path: Path) -> None:
    good = save(model_set("good"), tmp_path, now=NOW - 60)
    bad = save(model_set("bad"), tmp_path, now=NOW)
    old_format(bad)
    learned = LearnedDetectors(tmp_path)
    assert learned.loaded == good
    assert list(learned.skipped) == [bad] and "format 1" in learned.skipped[bad]
    bad.unlink()
    learned.reload()
    assert learned.skipped == {}
