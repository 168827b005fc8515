"""The learned detectors: trained on a store's history, scored on new frames."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.collectors.sim import Fault, FleetSim, SimParams
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.models.anomaly import HOLD_S, FleetAnomaly
from fleetwatch.models.artifact import FORMAT, ModelFileError, ModelSet, load, newest, save
from fleetwatch.models.learned import LearnedDetectors
from fleetwatch.models.lemon import LemonScore
from fleetwatch.models.thermal_health import ThermalHealth
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.recording import RecordingStore
from fleetwatch.simulate import simulate
from fleetwatch.train import train

START = 1_763_800_000.0
DAY = 86400.0
PARAMS = SimParams(nodes=4, gpus=4, nodes_per_rack=2, seed=11, interval_s=30.0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model file trained on a day of a healthy simulated fleet."""
    tmp = tmp_path_factory.mktemp("learned")
    store = SqliteStore(tmp / "history.db")
    simulate(store, PARAMS, START, DAY)
    path, meta = train(store, START, START + DAY, tmp / "models")
    store.close()
    assert meta["gpus"] == 16
    assert set(meta["thermal_heldout_mae_c"]) == {"huber", "gradient_boosting"}
    return path


def run(sim: FleetSim, seconds: float, detectors: list) -> tuple[list, float]:
    """Findings of ``detectors`` over ``seconds`` of ``sim``, and the hottest die seen."""
    findings, hottest = [], 0.0
    batch: list[Frame] = []
    end = sim.ts + seconds
    while sim.ts < end:
        sim.step()
        batch.extend(sim.frames())
        if len(batch) >= 40:
            hottest = max(hottest, max(g.metrics["gpu_temp_c"] for f in batch for g in f.gpus))
            for d in detectors:
                findings.extend(d.update(batch))
            batch = []
    return findings, hottest


def test_thermal_health_catches_a_sub_limit_cooling_fault_and_nothing_else(
        trained: Path) -> None:
    models = load(trained)
    health = ThermalHealth(models.thermal)
    # The same fleet, a day later: node-002 GPU 1's cooling degrades by a quarter.
    # It stays far below any fixed limit (85 °C) the whole time.
    fault = Fault("cooling", "node-002", 1, start_s=2 * 3600, duration_s=8 * 3600, severity=1.25)
    sim = FleetSim(PARAMS, START + DAY, [fault])
    findings, hottest = run(sim, 12 * 3600, [health])
    assert hottest < 85.0
    hits = [f for f in findings if (f.node, f.gpu) == ("node-002", 1)]
    others = {(f.node, f.gpu) for f in findings} - {("node-002", 1)}
    assert hits, "the degrading GPU was not flagged"
    assert not others, f"healthy GPUs flagged: {others}"
    onset = START + DAY + 2 * 3600
    first = min(f.ts for f in hits)
    assert onset < first < onset + 2 * 3600
    assert hits[0].evidence["excess_c"] >= 5.0
    assert max(f.ts for f in hits) < onset + 8 * 3600 + 2 * 3600  # and it ends


def test_a_healthy_day_raises_no_learned_finding(trained: Path) -> None:
    models = load(trained)
    detectors = [ThermalHealth(models.thermal), FleetAnomaly(models.anomaly)]
    sim = FleetSim(PARAMS, START + 2 * DAY)
    findings, _ = run(sim, 12 * 3600, detectors)
    assert findings == []


def test_model_file_metadata_and_refusals(trained: Path, tmp_path: Path) -> None:
    meta = json.loads(trained.read_bytes().split(b"\n", 1)[0])
    assert meta["format"] == FORMAT and meta["gpus"] == 16 and meta["window_min"] == 10
    assert meta["range"] == [START, START + DAY]
    first, last = meta["data_range"]  # the history the store held: here the whole day
    assert START <= first < START + 300 and START + DAY - 300 < last <= START + DAY + 60
    assert meta["features"]["thermal"][0] == "power_w"
    head, body = trained.read_bytes().split(b"\n", 1)
    other = tmp_path / "fleetwatch-model-20990101T000000.fwm"
    other.write_bytes(json.dumps({**meta, "sklearn": "0.1"}).encode() + b"\n" + body)
    with pytest.raises(ModelFileError, match=r"scikit-learn 0.1.*run `fleetwatch train` again"):
        load(other)
    other.write_bytes(json.dumps({**meta, "format": 99}).encode() + b"\n" + body)
    with pytest.raises(ModelFileError, match="format 99"):
        load(other)
    other.write_bytes(head + b"\n" + body[: len(body) // 2])
    with pytest.raises(ModelFileError, match="damaged"):
        load(other)
    other.write_bytes(b"\x80\x04garbage")
    with pytest.raises(ModelFileError, match="not a fleetwatch model file"):
        load(other)


def test_processor_side_follows_the_newest_model_without_restart(
        trained: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    caplog.set_level(logging.INFO)
    learned = LearnedDetectors(tmp_path / "models", check_every_s=60, clock=lambda: now[0])
    assert learned.thermal.model is None
    sim = FleetSim(PARAMS, START + DAY)
    sim.step()
    assert learned.update(sim.frames()) == []
    learned.update(sim.frames())
    assert sum("running the rules alone" in r.message for r in caplog.records) == 1
    models = load(trained)
    save(models, tmp_path / "models")
    learned.update(sim.frames())
    assert learned.thermal.model is None  # not checked again before a minute has passed
    now[0] = 61.0
    learned.update(sim.frames())
    assert learned.thermal.model is not None and learned.loaded == newest(tmp_path / "models")


def test_lemon_scores_accumulate_decay_and_rank() -> None:
    lemon = LemonScore(half_life_d=1.0, threshold=7.0)

    def frame(node: str, ts: float, xids: tuple[int, ...] = (), state: str = "ok") -> Frame:
        gpu = GpuReading(0, "GPU-x", "H100", {} if state == "lost" else {"gpu_temp_c": 50.0},
                         None, state, xids)  # type: ignore[arg-type]
        return Frame("c", "r", node, ts, (gpu,), HostReading())

    t = START
    assert lemon.update([frame("bad", t, (79,)), frame("good", t, (13,))]) == []
    # Two XID 48 in one frame, after the first incident: one more incident.
    found = lemon.update([frame("bad", t + 1000, (48, 48)),
                          frame("bad", t + 1060, (), "lost")])
    # Past the threshold within 20 minutes: one bad episode, not yet a repeat offender
    # (lemon.MIN_SPAN_S).
    assert found == []
    # the loss follows the GPU's XID 79: one incident, counted by its XID
    assert lemon.score("c", "bad", t + 1060) == pytest.approx(5 + 3, rel=1e-2)
    ranking = lemon.ranking(t + 1060)
    assert [n for _, n, _ in ranking] == ["bad"]  # an application XID (13) scores nothing
    # One day later the trouble has halved; the lost GPU stays lost (no new points).
    assert lemon.score("c", "bad", t + 1060 + DAY) == pytest.approx(4, rel=1e-2)
    assert lemon.update([frame("bad", t + 1060 + DAY, (), "lost")]) == []
    # A GPU that falls off the bus (XID 79) and is then lost is one incident, not two.
    once = LemonScore(half_life_d=1.0, threshold=10.0)
    assert once.update([frame("n", t, (79,)), frame("n", t + 15, (), "lost")]) == []
    assert once.score("c", "n", t + 15) == pytest.approx(5.0, rel=1e-3)


def test_anomaly_flags_a_gpu_unlike_its_phase(trained: Path) -> None:
    models = load(trained)
    anomaly = FleetAnomaly(models.anomaly)
    # The same detector in a processor: its alert holds between windows, never flapping.
    store = RecordingStore()
    processor = Processor(store, [FleetAnomaly(models.anomaly)])
    # Jobs held in one phase of work, so that window after window is scored.
    sim = FleetSim(dataclasses.replace(PARAMS, steady_load=True), START + DAY)
    findings: list = []
    for _ in range(int(12 * 3600 / PARAMS.interval_s)):
        sim.step()
        frames = sim.frames()
        bent = []
        for f in frames:
            if f.node == "node-000":  # GPU 2 reads 30 °C hotter than it is, whatever it does
                gpus = tuple(GpuReading(g.index, g.uuid, g.model, {
                    **g.metrics, "gpu_temp_c": g.metrics["gpu_temp_c"] + 30.0}, g.job)
                    if g.index == 2 else g for g in f.gpus)
                f = Frame(f.cluster, f.rack, f.node, f.ts, gpus, f.host, f.seq)
            bent.append(f)
        findings.extend(anomaly.update(bent))
        processor.process(bent)
    assert {(f.node, f.gpu) for f in findings} == {("node-000", 2)}
    assert len(findings) >= 3  # flagged window after window
    fired = {a.id for a in store.changes if a.fired_ts is not None}
    # One alert per run of findings closer than HOLD_S, not one per window.
    runs = 1 + sum(b.ts - a.ts > HOLD_S for a, b in zip(findings, findings[1:]))
    assert len(fired) == runs < len(findings) / 2, (len(fired), runs, len(findings))
    assert np.isfinite(findings[0].value)


def test_anomaly_ignores_impossible_readings_and_restarts_its_window_after_them(
        trained: Path) -> None:
    # A sensor stuck at 0 °C, then at 127 °C, is the sensor rule's business: the
    # fleet anomaly model scores no window with such a reading in it, during or after.
    models = load(trained)
    anomaly = FleetAnomaly(models.anomaly)
    sim = FleetSim(dataclasses.replace(PARAMS, steady_load=True), START + DAY)
    findings: list = []
    for k in range(int(4 * 3600 / PARAMS.interval_s)):
        sim.step()
        stuck = 0.0 if 120 <= k < 180 else 127.0 if 180 <= k < 200 else None
        frames = []
        for f in sim.frames():
            if f.node == "node-000" and stuck is not None:
                gpus = tuple(GpuReading(g.index, g.uuid, g.model, {
                    **g.metrics, "gpu_temp_c": stuck}, g.job) if g.index == 2 else g
                    for g in f.gpus)
                f = Frame(f.cluster, f.rack, f.node, f.ts, gpus, f.host, f.seq)
            frames.append(f)
        findings.extend(anomaly.update(frames))
    assert findings == []


def test_train_on_an_empty_store_says_what_to_do(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "empty.db")
    with pytest.raises(ValueError, match="holds no GPU samples"):
        train(store, START, START + DAY, tmp_path / "models")
    assert not (tmp_path / "models").exists() or not list((tmp_path / "models").iterdir())


def test_a_model_set_round_trips(tmp_path: Path) -> None:
    path = save(ModelSet(metadata={"gpus": 0}), tmp_path)
    again = load(path)
    assert again.thermal is None and again.metadata["gpus"] == 0


def test_the_thermal_health_score_is_stored_and_on_metrics(trained: Path, tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from fleetwatch.pipeline.model_metrics import ModelCollector
    from fleetwatch.pipeline.processor import Processor

    models_dir = tmp_path / "models"
    models_dir.mkdir()
    (models_dir / trained.name).write_bytes(trained.read_bytes())
    learned = LearnedDetectors(models_dir)
    store = SqliteStore(tmp_path / "live.db")
    processor = Processor(store, [learned])
    sim = FleetSim(PARAMS, START + DAY)
    for _ in range(40):
        sim.step()
        processor.process(sim.frames())
    scores = store.latest("gpu_thermal_health_score", int(START * 1000))
    assert len(scores) == 16 and all(abs(v) < 50 for _, _, v in scores)
    registry = CollectorRegistry()
    registry.register(ModelCollector([learned]))
    text = generate_latest(registry).decode()
    assert 'fleetwatch_gpu_thermal_health_score{cluster="sim",gpu="1",node="node-002"}' in text
    assert f'fleetwatch_model_loaded{{file="{trained.name}"}} 1.0' in text
    store.close()


def test_train_on_a_new_install_says_so_and_exits_0(tmp_path: Path, capsys) -> None:
    """Deploy finding 8 (r22): the nightly training of a new install failed (exit 1, a
    failed unit, a Job retried and Failed) for want of history. Now: 0, and why nothing
    was trained; the model file in use is kept."""
    from fleetwatch.cli import main
    from fleetwatch.frame import Frame, GpuReading

    db = tmp_path / "new.db"
    store = SqliteStore(db)
    store.write([Frame("c1", "r1", "n1", START + 60 * m, (GpuReading(
        0, "GPU-1", "H100", {"gpu_temp_c": 50.0, "gpu_power_w": 300.0}),))
        for m in range(40)])
    store.close()
    out = tmp_path / "models"
    out.mkdir()
    (out / "keep.txt").write_text("the model in use")
    code = main(["train", "--store", str(db), "--duration", "24h", "--end",
                 str(START + DAY), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert re.search(r"fleetwatch train: not enough history yet \(0\.\d h of GPU samples in "
                     r"the 24 h asked for: \d\d samples with temperature and power, 200 "
                     r"needed", err), err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
