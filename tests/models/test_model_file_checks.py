"""Model files the processor must not use as they are: holding the wrong objects, writable
by others, named in the future, written at once; and what it does when the file in use is
deleted or a newer one does not load (``test_model_file_trust``: another kind of GPU)."""

from __future__ import annotations

import json
import logging
import os
import pickle
import threading
from pathlib import Path

import pytest

from fleetwatch.models.anomaly import AnomalyModel
from fleetwatch.models.artifact import (
    FORMAT,
    ModelFileError,
    ModelSet,
    _sklearn_version,
    load,
    read_metadata,
    save,
)
from fleetwatch.models.learned import LearnedDetectors
from fleetwatch.models.thermal_model import ThermalModel
from tests.models.test_model_file_trust import START, model_set


def _raw_file(directory: Path, name: str, body: bytes) -> Path:
    path = directory / name
    meta = {"format": FORMAT, "sklearn": _sklearn_version(), "gpus": 1}
    path.write_bytes(json.dumps(meta).encode() + b"\n" + body)
    return path


def test_a_file_of_the_wrong_objects_is_refused_at_start_and_when_dropped_in(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = save(model_set("good"), tmp_path, now=START)
    bad = _raw_file(tmp_path, "fleetwatch-model-20251123T000000.fwm",
                    pickle.dumps(("a", "b", "c")))
    with pytest.raises(ModelFileError, match="is damaged .*thermal model is a str"):
        load(bad)
    learned = LearnedDetectors(tmp_path)
    assert learned.loaded == good and learned.thermal.model.kind == "good"
    assert bad in learned.skipped
    # Dropped in beside the model in use: skipped once, the model in use kept.
    bad.unlink()
    now = [0.0]
    learned = LearnedDetectors(tmp_path, check_every_s=60, clock=lambda: now[0])
    _raw_file(tmp_path, bad.name, pickle.dumps((None, None, {"x": 1})))
    now[0] = 61.0
    assert learned.update([]) == [] and learned.loaded == good
    assert "lemon scores" in learned.skipped[bad] or "lemon score" in learned.skipped[bad]
    assert learned.thermal.model.kind == "good"


def test_installing_a_model_that_fails_keeps_the_models_in_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = save(ModelSet(ThermalModel(None, "good", {}), None, {("c", "n1"): (1.0, 5.0)},
                         {}), tmp_path, now=START)
    now = [0.0]
    learned = LearnedDetectors(tmp_path, check_every_s=60, clock=lambda: now[0])
    newer = save(ModelSet(ThermalModel(None, "new", {}), AnomalyModel({}, {}, {}),
                          {("c", "n2"): (2.0, 6.0)}, {}), tmp_path, now=START + 60)

    def broken(scores: object) -> None:
        learned.lemon._score[("c", "half")] = [9.0, 0.0]  # changed, then fails
        raise RuntimeError("boom")

    monkeypatch.setattr(learned.lemon, "seed", broken)
    now[0] = 61.0
    learned.update([])
    assert learned.loaded == good and learned.thermal.model.kind == "good"
    assert learned.anomaly.model is None
    assert learned.lemon._score == {("c", "n1"): [1.0, 5.0]}
    assert "cannot be used (RuntimeError: boom)" in learned.skipped[newer]


@pytest.mark.skipif(os.name != "posix", reason="file modes and owners are POSIX")
def test_a_file_or_directory_others_can_write_is_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "models"
    good = save(model_set("good"), d, now=START)
    newer = save(model_set("newer"), d, now=START + 60)
    newer.chmod(0o666)
    learned = LearnedDetectors(d)
    assert learned.loaded == good
    why = learned.skipped[newer]
    assert "writable by group or others (mode 666)" in why and "pickle" in why \
        and f"chmod go-w {newer}" in why
    d.chmod(0o777)
    with pytest.raises(ModelFileError, match=f"the model directory {d} is writable"):
        load(good)
    d.chmod(0o755)
    os.chown(good, 12345, 12345)
    assert os.stat(good).st_uid == 12345
    with pytest.raises(ModelFileError, match="owned by uid 12345, not by this user"):
        load(good)


@pytest.mark.skipif(os.name != "posix", reason="file modes and owners are POSIX")
def test_a_refused_file_fixed_as_the_warning_says_is_loaded_at_the_next_check(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "models"
    good = save(model_set("good"), d, now=START)
    newer = save(model_set("newer"), d, now=START + 60)
    newer.chmod(0o664)
    learned = LearnedDetectors(d)
    assert learned.loaded == good and newer in learned.skipped
    assert not learned.reload()  # unchanged: not tried (nor said) again
    newer.chmod(0o644)  # `chmod go-w`: neither its size nor its mtime changes
    with caplog.at_level(logging.INFO, logger="fleetwatch.models.learned"):
        assert learned.reload()
    assert learned.loaded == newer and learned.thermal.model.kind == "newer"
    assert newer not in learned.skipped
    assert f"loaded model {newer.name}" in caplog.text
    # The directory others could write: every file refused; fixed, the newest loads.
    d.chmod(0o775)
    later = save(model_set("later"), d, now=START + 120)
    assert not learned.reload() and later in learned.skipped
    d.chmod(0o755)
    assert learned.reload() and learned.loaded == later


def test_a_relative_model_dir_is_named_absolute(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    save(model_set("good"), "fleetwatch-models", now=START)
    learned = LearnedDetectors("fleetwatch-models")
    assert learned.directory == tmp_path / "fleetwatch-models"
    assert learned.loaded is not None and learned.loaded.is_absolute()


def test_concurrent_writers_in_one_second_each_keep_their_own_file(tmp_path: Path) -> None:
    paths: dict[int, Path] = {}
    errors: list[BaseException] = []
    go = threading.Barrier(6)

    def write(who: int) -> None:
        go.wait()
        try:
            paths[who] = save(model_set(f"w{who}", {"who": who}), tmp_path, now=START)
        except BaseException as exc:  # noqa: BLE001 - the test reports any
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(paths.values())) == 6
    for who, path in paths.items():
        assert read_metadata(path)["who"] == who and load(path).thermal.kind == f"w{who}"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths.values())


def test_a_file_named_in_the_future_is_skipped_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import time

    good = save(model_set("good"), tmp_path, now=time.time())
    ahead = save(model_set("ahead"), tmp_path, now=time.time() + 2 * 86400)
    near = save(model_set("near"), tmp_path, now=time.time() + 3600)  # a clock a bit ahead
    learned = LearnedDetectors(tmp_path)
    assert learned.loaded == near
    near.unlink()
    learned = LearnedDetectors(tmp_path)
    assert learned.loaded == good
    assert "more than a day after now" in learned.skipped[ahead]
    assert f"model file skipped: {ahead} is named for a time" in caplog.text


def test_the_load_line_says_what_the_file_cannot_score(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fleetwatch.models.learned")
    save(ModelSet(ThermalModel(None, "t", {}), AnomalyModel({}, {}, {}), {}, {}), tmp_path,
         now=START)
    LearnedDetectors(tmp_path)
    assert "fleet anomaly: no model of any phase of work, not scoring" in caplog.text


def test_a_deleted_model_file_falls_back_as_a_restart_would_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from fleetwatch.pipeline.model_metrics import ModelCollector

    d = tmp_path / "models"
    old = save(model_set("old"), d, now=START)
    new = save(model_set("new"), d, now=START + 60)
    learned = LearnedDetectors(d)
    assert learned.loaded == new
    caplog.set_level(logging.INFO, "fleetwatch.models.learned")
    new.unlink()
    assert learned.reload() and learned.loaded == old
    assert learned.thermal.model.kind == "old"
    assert f"model file {new.name}, in use, is gone from {d}: using {old.name} instead" \
        in caplog.text
    caplog.clear()
    old.unlink()
    assert not learned.reload()
    assert learned.loaded is None and learned.thermal.model is None
    assert f"model file {old.name}, in use, is gone from {d} and no other file there loads " \
        "(0 skipped): running the rules alone" in caplog.text
    registry = CollectorRegistry()
    registry.register(ModelCollector([learned]))
    assert 'fleetwatch_model_loaded{file=""} 0.0' in generate_latest(registry).decode()
    caplog.clear()
    assert not learned.reload() and caplog.text == ""  # said once


def test_the_load_line_gives_the_training_range_as_utc_times(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fleetwatch.models.learned")
    save(model_set("m", {"range": [1795615200.0, 1795788000.0]}), tmp_path, now=START)
    LearnedDetectors(tmp_path)
    assert "trained on 1 GPUs, 2026-11-25T14:00Z to 2026-11-27T14:00Z;" in caplog.text


def test_a_newer_model_file_that_does_not_load_is_on_the_metrics_with_the_ones_age(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A nightly training that keeps writing unusable files leaves the processor on an
    ever older model: the skipped files and the time of the one in use are scraped
    (``FleetwatchModelFileSkipped`` and ``FleetwatchModelStale`` read them), not only
    logged."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from fleetwatch.pipeline.model_metrics import ModelCollector

    good = save(model_set("good"), tmp_path, now=START)
    cut = save(model_set("cut"), tmp_path, now=START + 86400)
    cut.write_bytes(good.read_bytes()[:200])       # a copy cut short
    learned = LearnedDetectors(tmp_path)
    assert learned.loaded == good and f"model file skipped: {cut} is damaged" in caplog.text
    registry = CollectorRegistry()
    registry.register(ModelCollector([learned]))
    text = generate_latest(registry).decode()
    assert "fleetwatch_model_files_skipped 1.0" in text
    stamps = [s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == "fleetwatch_model_file_timestamp_seconds"]
    assert stamps == [START]                        # the good file's, the one in use
    cut.unlink()                                    # the bad file removed: none skipped
    learned.reload()
    assert "fleetwatch_model_files_skipped 0.0" in generate_latest(registry).decode()
