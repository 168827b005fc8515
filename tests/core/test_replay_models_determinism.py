"""``fleetwatch replay --models`` (and ``--store``) on the recording's own time: the same
file with the same model folder and store gives the same lines, however fast the machine
replays it and whatever the date. The learned detectors look for a newer model file every
``check_every_s`` of the data's time (live: of the wall's), and a node's lemon score is
rebuilt from the store's events up to the frame's time, not up to now: the wall's "now"
counted events the recording had not reached yet, or none, by the date of the replay."""

from __future__ import annotations

import io
import itertools
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleetwatch.cli import main
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import Finding, lemon
from fleetwatch.models.artifact import ModelSet, save
from fleetwatch.models.learned import LearnedDetectors
from fleetwatch.models.lemon import LemonScore
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.replay import replay
from fleetwatch.wiring import detectors

T0 = 1_780_000_000
DAY = 86400


def frozen() -> Callable[[], float]:
    """A machine so fast that no wall time passes during the replay."""
    return lambda: 0.0


def racing() -> Callable[[], float]:
    """A machine so loaded that 10 s of wall time pass between any two looks."""
    ticks = itertools.count()
    return lambda: 10.0 * next(ticks)


def steady(path: Path, ticks: int = 40, step: int = 15) -> Path:
    lines = ["timestamp,node,gpu,metric,value"]
    lines += [f"{T0 + step * t},n1,{g},gpu_temp_c,{60 + g}" for t in range(ticks)
              for g in range(2)]
    path.write_text("\n".join(lines) + "\n")
    return path


class TrainingEnds:
    """``fleetwatch train`` finishing while the replay runs: its model file appears in the
    folder when the data reaches ``at``."""

    name = "training_ends"
    rules: dict[str, tuple[str, ...]] = {}

    def __init__(self, folder: Path, at: float) -> None:
        self.folder, self.at, self.done = folder, at, False

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        if not self.done and max(f.ts for f in frames) >= self.at:
            save(ModelSet(metadata={"gpus": 0}), self.folder, now=T0)
            self.done = True
        return []


def with_models(tmp_path: Path, wall: Callable[[], float]) -> tuple[str, list[str]]:
    folder = tmp_path / "models"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    learned = LearnedDetectors(folder, check_every_s=60.0, clock=wall)  # as live wires it
    out = io.StringIO()
    summary = replay([steady(tmp_path / "steady.csv")],
                     [TrainingEnds(folder, T0 + 150), learned], out)
    return out.getvalue(), summary.lines()


def test_the_model_folder_is_looked_at_on_the_datas_time(tmp_path: Path) -> None:
    fast = with_models(tmp_path, frozen())
    loaded = with_models(tmp_path, racing())
    assert fast == loaded
    # The file that appeared at 150 s of the data's 585 is found at most 60 s after.
    assert any("model file" in line and "fleetwatch-model-" in line for line in fast[1])


def test_a_learned_detector_follows_the_clock_it_is_given(tmp_path: Path) -> None:
    now = [0.0]
    learned = LearnedDetectors(tmp_path / "models", check_every_s=60.0)
    learned.use_clock(lambda: now[0])
    save(ModelSet(metadata={"gpus": 0}), tmp_path / "models", now=T0)
    now[0] = T0
    learned.update([])
    assert learned.loaded is not None and learned.lemon.clock() == T0


def xids(path: Path, days: int = 3, step: int = 300) -> Path:
    """n1, 2 GPUs, every 5 minutes for ``days``, an XID 48 every 6 hours, GPU by GPU:
    a lemon node by its second day."""
    lines = ["timestamp,node,gpu,metric,value"]
    for t in range(0, days * DAY, step):
        lines += [f"{T0 + t},n1,{g},gpu_temp_c,{60 + g}" for g in range(2)]
        if t % (6 * 3600) == 0:
            lines.append(f"{T0 + t},n1,{(t // (6 * 3600)) % 2},xid,48")
    path.write_text("\n".join(lines) + "\n")
    return path


def lemon_lines(path: Path, db: Path, scored: bool = True) -> list[dict]:
    store = SqliteStore(db)
    out = io.StringIO()
    try:
        learned = [LearnedDetectors(db.parent / "no-models", lemon=LemonScore())]  # --models
        replay([path], [*detectors(DetectorsConfig()), *(learned if scored else [])],
               out, store=store)
    finally:
        store.close()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_lemon_score_is_rebuilt_up_to_the_frames_time_not_the_walls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that holds a first replay of the file (its XIDs): replayed again with
    ``--models`` on the day after the recording or two months later, the lemon score is
    rebuilt from the events before the node's first frame (none), not from what the
    recording holds of its future (all of it, the day after)."""
    path = xids(tmp_path / "xids.csv")
    lemon_lines(path, tmp_path / "first.db", scored=False)
    runs = []
    for wall in (T0 + 4 * DAY, T0 + 60 * DAY):
        db = tmp_path / f"again-{wall}.db"
        shutil.copy(tmp_path / "first.db", db)
        monkeypatch.setattr(lemon, "time", SimpleNamespace(time=lambda w=wall: float(w)))
        runs.append(lemon_lines(path, db))
    assert runs[0] == runs[1]
    fired = [d for d in runs[0] if d["rule"] == "lemon_node" and d["state"] == "firing"]
    # It fires once its trouble has built up over a day, not at the recording's start.
    assert fired and all(d["started_ts"] >= T0 + DAY for d in fired)
    assert fired[0]["value"] == pytest.approx(14.28, abs=0.01)  # its own day's XIDs only


def test_the_cli_with_models_and_store_prints_the_same_bytes_whatever_the_date(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = xids(tmp_path / "xids.csv")
    lemon_lines(path, tmp_path / "first.db", scored=False)
    save(ModelSet(metadata={"gpus": 0}), tmp_path / "models", now=T0)
    monkeypatch.setenv("FLEETWATCH_MODELS_DIR", str(tmp_path / "models"))
    outputs = []
    for wall in (T0 + 4 * DAY, T0 + 60 * DAY):
        db = tmp_path / f"again-{wall}.db"
        shutil.copy(tmp_path / "first.db", db)
        monkeypatch.setattr(lemon, "time", SimpleNamespace(time=lambda w=wall: float(w)))
        assert main(["replay", "--models", "--store", str(db), str(path)]) == 0
        outputs.append(capsys.readouterr())
    assert outputs[0].out == outputs[1].out
    assert '"rule": "lemon_node"' in outputs[0].out
    assert "learned detectors: thermal_health, fleet_anomaly not run: the model file" in \
        outputs[0].err
