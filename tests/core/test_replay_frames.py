"""Replay of the agent's own frames as JSON lines: the real H100 recording, a node built
from it with one GPU hung among working peers, and lines that are not frames."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from tests.conftest import REAL_DATA

RECORDING = REAL_DATA / "recorded" / "h100_phases.jsonl.gz"


def recorded() -> list[dict]:
    with gzip.open(RECORDING, "rt") as f:
        return [json.loads(line) for line in f]


def test_the_real_h100_recording_replays_as_it_was_read(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(RECORDING)]) == 0
    out, err = capsys.readouterr()
    assert out == ""  # one GPU through idle, copy, matrix products, a hung kernel: no alert
    assert "replayed 200 frames of 1 GPUs" in err
    assert "200 NIC and InfiniBand port readings passed over" in err
    assert "thermal limits: NVML's own" in err


def test_a_node_of_eight_with_one_real_hung_kernel_among_working_peers_is_stuck(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Seven GPUs doing the recorded matrix products, one the recorded hung kernel, in one
    job: gpu_stuck on that one, after job_hang_s (a kernel spinning on a few SMs)."""
    frames = recorded()
    gemm = [f for f in frames if f["_phase"] == "gemm"]
    spin = [f for f in frames if f["_phase"] == "spin"]
    lines = []
    for k in range(40):
        working, hung = gemm[k]["gpus"][0], spin[k]["gpus"][0]
        gpus = [{**(hung if i == 7 else working), "index": i, "job": "llm"} for i in range(8)]
        lines.append(json.dumps({"ts": 1.8e9 + k, "node": "n1", "cluster": "c", "rack": "r",
                                 "gpus": gpus, "host": gemm[k]["host"]}))
    path = tmp_path / "node.jsonl"
    path.write_text("\n".join(lines) + "\n")
    config = tmp_path / "fleetwatch.toml"
    config.write_text("[detectors]\njob_hang_s = 30.0\n")
    assert main(["--config", str(config), "replay", str(path)]) == 0
    fired = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    firing = [(c["rule"], c["labels"]["device"]) for c in fired
              if c["state"] == "firing" and not c.get("open_at_end")]
    assert firing == [("gpu_stuck", "gpu7")]
    [first] = [c for c in fired if c["rule"] == "gpu_stuck" and c["state"] == "firing"
               and not c.get("open_at_end")]
    assert "spinning on a few SMs (6% activity)" in first["message"]
    assert first["fired_ts"] - first["started_ts"] == pytest.approx(30.0, abs=1.0)


@pytest.mark.parametrize("line, why", [
    ('[1, 2]', "a JSON list, not a frame"),
    ('{"node": "n1", "gpus": []}', "ts: None is not epoch seconds"),
    ('{"ts": 1.8e9, "node": "", "gpus": []}', "node: missing or empty"),
    ('{"ts": 1.8e9, "node": "n1", "gpus": [{"index": 0, "metrics": {"gpu_tmp_c": 40}}]}',
     "GPU 0: unknown metric 'gpu_tmp_c'"),
    ('{"ts": 1.8e9, "node": "n1", "gpus": [{"index": 0, "metrics": {"gpu_temp_c": 900}}]}',
     "gpu_temp_c = 900 is outside its possible range"),
    ('{"ts": 1.8e9, "node": "n1", "gpus": [{"index": 0, "metrics": {"gpu_temp_c": "40"}}]}',
     "GPU 0: value '40' of gpu_temp_c is not a number"),
    ('{"ts": 1.8e9, "node": "n1", "gpus": [{"index": -1, "metrics": {}}]}',
     "gpus: index -1 is not a GPU index 0..1023"),
    ('{"ts": 1.8e9, "node": "n1", "gpus": [], "host": {"metrics": {"gpu_temp_c": 40}}}',
     "host: gpu_temp_c is a gpu metric"),
])
def test_a_line_that_is_not_a_frame_names_file_line_and_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, why: str) -> None:
    good = json.dumps({"ts": 1.8e9 - 10, "node": "n1",
                       "gpus": [{"index": 0, "metrics": {"gpu_temp_c": 40}}]})
    path = tmp_path / "frames.jsonl"
    path.write_text(f"{good}\n{line}\n")
    assert main(["replay", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"frames.jsonl line 2: {why}" in err
    # --skip-bad replays the good frame and counts the bad one.
    assert main(["replay", "--skip-bad", str(path)]) == 0
    err = capsys.readouterr().err
    assert "replayed 1 frames" in err and "1 bad" in err


def test_frames_as_agent_once_json_prints_them_one_after_another(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`fleetwatch agent --once --json >> node.json`, run now and then: pretty-printed frames
    one after another replay like one-line ones; a broken one is named by its line."""
    path = tmp_path / "node.json"
    with path.open("w") as f:
        for k in range(3):
            assert main(["agent", "--fake-gpus", "2", "--once", "--json"]) == 0
            frame = json.loads(capsys.readouterr().out)
            frame["ts"] = 1.8e9 + 15 * k
            f.write(json.dumps(frame, indent=2) + "\n")
    assert main(["replay", str(path)]) == 0
    assert "replayed 3 frames of 2 GPUs" in capsys.readouterr().err
    lines = path.read_text().splitlines()
    assert lines[4] == '      "index": 0,'
    lines[4] = '      "index" 0,'  # a key without its colon, on the file's 5th line
    path.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(path)]) == 1
    assert "node.json line 5: not JSON: Expecting ':' delimiter" in capsys.readouterr().err
