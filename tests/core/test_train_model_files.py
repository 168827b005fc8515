"""``fleetwatch train`` and the model directory: a bad --out before any fitting, and what
a processor will make of the file written."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.models.artifact import ModelSet, save
from fleetwatch.train_files import written_warnings

START = 1_763_800_000.0


def test_an_out_that_cannot_be_made_is_one_line_before_reading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetwatch.train

    called: list[object] = []
    monkeypatch.setattr(fleetwatch.train, "train", lambda *a, **k: called.append(a))
    afile = tmp_path / "h.db"
    afile.write_bytes(b"")
    assert main(["train", "--store", str(afile), "--duration", "1h",
                 "--out", str(afile / "sub")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fleetwatch train: cannot write model files in {afile / 'sub'} "
                          "(Not a directory)") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and called == []


def meta(missing: list[str]) -> dict:
    return {"anomaly_phases_missing": missing}


def test_a_file_with_fewer_phases_than_the_one_in_use_is_warned_of(tmp_path: Path) -> None:
    old = save(ModelSet(None, None, {}, meta([])), tmp_path, now=START)
    new = save(ModelSet(None, None, {}, meta(["light", "medium"])), tmp_path, now=START + 60)
    [warning] = written_warnings(new, meta(["light", "medium"]))
    assert f"no fleet anomaly model of light, medium work, which {old.name}" in warning
    assert written_warnings(new, meta([])) == []


def test_a_file_named_after_the_new_one_is_warned_of(tmp_path: Path) -> None:
    ahead = save(ModelSet(None, None, {}, meta([])), tmp_path, now=START + 365 * 86400)
    new = save(ModelSet(None, None, {}, meta([])), tmp_path, now=START)
    [warning] = written_warnings(new, meta([]))
    assert f"are named after this one and load ({ahead.name})" in warning \
        and "will not load this one" in warning


def test_a_newer_named_file_a_processor_would_skip_is_not_said_to_shadow(
        tmp_path: Path) -> None:
    import time

    new = save(ModelSet(None, None, {}, meta([])), tmp_path, now=time.time() - 3600)
    future = save(ModelSet(None, None, {}, meta([])), tmp_path, now=time.time() + 365 * 86400)
    cut = save(ModelSet(None, None, {}, meta([])), tmp_path, now=time.time() - 60)
    cut.write_bytes(cut.read_bytes()[:-20])  # damaged: skipped
    assert future.exists() and written_warnings(new, meta([])) == []
