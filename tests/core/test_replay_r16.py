"""Replay of real recordings: a missed scrape or a lost GPU is no second agent (D1), gzip
and stdin input (D3), DCGM fields the catalogue does not use (D5), reading as a stream (D2)."""

from __future__ import annotations

import gzip
import io
import json
import random
import sys
from pathlib import Path

import pytest

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.recorded import ReplayError, frames, read_files
from fleetwatch.replay import replay
from fleetwatch.wiring import detectors

HEADER = "timestamp,node,gpu,metric,value\n"
T0 = 1_696_000_000


def healthy(path: Path, ticks: int = 240, skip: tuple[int, int] | None = None,
            xid79: tuple[int, int] | None = None, metric: str = "gpu_temp_c") -> Path:
    """8 GPUs, 15 s samples; ``skip`` (tick, gpu) misses one sample; ``xid79`` (tick, gpu):
    that GPU reports XID 79 then sends nothing more."""
    rnd = random.Random(2)
    rows = [HEADER.strip()]
    for k in range(ticks):
        for g in range(8):
            if skip == (k, g) or xid79 and g == xid79[1] and k > xid79[0]:
                continue
            rows.append(f"{T0 + 15 * k},node-m,{g},{metric},{60 + rnd.gauss(0, .4):.1f}")
            rows.append(f"{T0 + 15 * k},node-m,{g},gpu_power_w,{650 + rnd.gauss(0, 8):.1f}")
            if xid79 and (k, g) == xid79:
                rows.append(f"{T0 + 15 * k},node-m,{g},xid,79")
    path.write_text("\n".join(rows) + "\n")
    return path


def run(paths: list, **kw) -> tuple[list[dict], object]:
    out = io.StringIO()
    summary = replay(paths, detectors(DetectorsConfig()), out, keep_firing_s=300, **kw)
    return [json.loads(line) for line in out.getvalue().splitlines()], summary


def fired(changes: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in changes:
        if c["state"] == "firing":
            out.setdefault(c["rule"], c["updated_ts"])
    return out


# D1 -------------------------------------------------------------------------------------

def test_one_missed_sample_is_no_node_name_conflict(tmp_path: Path) -> None:
    changes, _ = run([healthy(tmp_path / "miss.csv", skip=(120, 2))])
    assert [c["rule"] for c in changes] == []


def test_a_frame_lists_every_gpu_of_its_node_even_one_without_a_sample(tmp_path: Path) -> None:
    batches = frames(read_files([healthy(tmp_path / "miss.csv", ticks=4, skip=(2, 2))]))
    assert [[g.index for g in b[0].gpus] for b in batches] == [list(range(8))] * 4
    missed = batches[2][0].gpus[2]
    assert missed.metrics == {} and missed.state == "ok"


def test_a_gpu_off_the_bus_is_lost_at_the_next_tick_and_no_name_conflict(tmp_path: Path) -> None:
    changes, summary = run([healthy(tmp_path / "x.csv", xid79=(100, 5))])
    first = fired(changes)
    assert first["gpu_xid_critical"] == T0 + 15 * 100
    assert first["gpu_lost"] == T0 + 15 * 101   # as the live agent reports it, not 45 s later
    assert "node_name_conflict" not in first


def _frame(ts: float, uuids: list[str]) -> Frame:
    gpus = tuple(GpuReading(i, u, "", {"gpu_temp_c": 60.0}) for i, u in enumerate(uuids))
    return Frame("c", "r", "n1", ts, gpus, HostReading({}))


def test_two_live_agents_under_one_name_still_conflict() -> None:
    det = NodeSilence(DetectorsConfig())
    a, b = ["GPU-a0", "GPU-a1"], ["GPU-b0", "GPU-b1"]
    found = [f.rule for k in range(6)
             for f in det.update([_frame(T0 + 5 * k, a if k % 2 else b)])]
    assert "node_name_conflict" in found


# D3 -------------------------------------------------------------------------------------

def test_gzip_is_read_by_its_magic_bytes_whatever_its_name(tmp_path: Path) -> None:
    plain = healthy(tmp_path / "a.csv", ticks=20)
    zipped = tmp_path / "a.bin"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    assert frames(read_files([zipped])) == frames(read_files([plain]))


def test_dash_reads_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = healthy(tmp_path / "a.csv", ticks=20)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(plain.read_bytes())))
    assert frames(read_files(["-"])) == frames(read_files([plain]))


def test_other_binary_input_is_refused_with_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "a.csv.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(256)))
    with pytest.raises(ReplayError, match=r"a.csv.zst: binary, not CSV text .*zstd"):
        read_files([path])


# D5 -------------------------------------------------------------------------------------

def test_new_and_unused_dcgm_fields_are_read_or_counted_not_bad_rows(tmp_path: Path) -> None:
    rows = [HEADER.strip()]
    for k in range(3):
        ts = T0 + 15 * k
        rows += [f"{ts},n1,0,DCGM_FI_DEV_GPU_TEMP,60",
                 f"{ts},n1,0,DCGM_FI_DEV_CLOCKS_EVENT_REASONS,8",
                 f"{ts},n1,0,DCGM_FI_DEV_POWER_MGMT_LIMIT,700",
                 f"{ts},n1,0,DCGM_FI_PROF_NVLINK_TX_BYTES,12345"]
    path = tmp_path / "dcgm.csv"
    path.write_text("\n".join(rows) + "\n")
    reading = read_files([path])
    assert reading.bad_rows == 0
    metrics = frames(reading)[0][0].gpus[0].metrics
    assert metrics == {"gpu_temp_c": 60.0, "gpu_throttle_reasons": 8.0, "gpu_power_limit_w": 700.0}
    assert any("DCGM fields fleetwatch does not use, passed over: DCGM_FI_PROF_NVLINK_TX_BYTES (3)"
               in n for n in reading.notes)


def test_a_misspelt_metric_of_our_own_is_still_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + f"{T0},n1,0,gpu_tmp_c,60\n")
    with pytest.raises(ReplayError, match="unknown metric 'gpu_tmp_c'"):
        read_files([path])


# D2 -------------------------------------------------------------------------------------

def long_recording(path: Path, hours: float = 2.0, jitter: float = 0.0, shuffle_s: int = 0,
                   seed: int = 5) -> Path:
    """2 nodes x 4 GPUs every 15 s; node b's GPU 1 misses samples now and then, GPU 3 of
    node a reports XID 79 (as XID_ERRORS, 0 before) at +40 min and stops; ``jitter``: each
    series' own time offset (DCGM field timestamps); ``shuffle_s``: rows moved by up to
    that many seconds from their place in the file."""
    rnd = random.Random(seed)
    rows: list[tuple[float, str]] = []
    for k in range(int(hours * 240)):
        for node in ("a", "b"):
            for g in range(4):
                ts = T0 + 15 * k + (jitter * (g + 1) / 4 if jitter else 0)
                if node == "b" and g == 1 and rnd.random() < 0.05:
                    continue
                if node == "a" and g == 3 and k > 160:
                    continue
                for metric, v in (("gpu_temp_c", 60 + g + rnd.gauss(0, .3)),
                                  ("gpu_power_w", 600 + rnd.gauss(0, 5))):
                    rows.append((ts, f"{ts},{node},{g},{metric},{v:.1f}"))
                if node == "a" and g == 3 and k % 4 == 0:
                    rows.append((ts, f"{ts},a,3,DCGM_FI_DEV_XID_ERRORS,{79 if k >= 160 else 0}"))
    if shuffle_s:
        rows.sort(key=lambda r: r[0] + rnd.uniform(-shuffle_s, shuffle_s))
    path.write_text(HEADER + "\n".join(r for _, r in rows) + "\n")
    return path


def streamed(path: Path) -> tuple[list[list[Frame]], object]:
    got: list[list[Frame]] = []
    reading = read_files([path], emit=got.extend)
    return got, reading


@pytest.mark.parametrize("jitter,shuffle_s", [(0.0, 0), (0.0, 200), (0.6, 0)])
def test_a_stream_gives_the_frames_of_a_whole_read(tmp_path: Path, jitter: float,
                                                   shuffle_s: int) -> None:
    path = long_recording(tmp_path / "r.csv", jitter=jitter, shuffle_s=shuffle_s)
    whole = read_files([path])
    got, reading = streamed(path)
    assert got == frames(whole)
    assert reading.late == 0
    lost = [(b[0].ts, g.index) for b in got for f in b if f.node == "a" for g in f.gpus
            if g.state == "lost"]
    assert lost[0] == (T0 + 15 * 161 + jitter / 4, 3)   # at once after its XID 79


def test_a_row_behind_the_window_is_counted_and_said(tmp_path: Path) -> None:
    path = long_recording(tmp_path / "r.csv", hours=1.0)
    text = path.read_text() + f"{T0 + 60},b,0,gpu_temp_c,61\n"   # an hour late
    path.write_text(text)
    got, reading = streamed(path)
    assert reading.late == 1
    assert any(n.startswith("1 row came more than 600 s (recorded time) behind the newest "
                            "time read") and "r.csv line " in n and "sort it by time first" in n
               for n in reading.notes)
    assert got[4][1].gpus[0].metrics["gpu_temp_c"] != 61.0   # the late value did not land


def test_frames_come_out_while_the_file_is_read_and_memory_stays_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetwatch import recorded_stream

    data = long_recording(tmp_path / "r.csv", hours=6.0).read_bytes()
    raw = io.BytesIO(data)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw))
    read_at: list[int] = []
    held: list[int] = []

    class Watched(recorded_stream.Stream):
        def _seal(self, upto: float) -> None:
            held.append(len({ts for ts, _ in self.out.samples}))
            super()._seal(upto)

    monkeypatch.setattr(recorded_stream, "Stream", Watched)
    read_files(["-"], emit=lambda batches: read_at.append(len(data) if raw.closed
                                                          else raw.tell()))
    assert read_at[0] < len(data) / 4           # the first frames before a quarter was read
    assert len(held) > 20 and max(held) <= 2 * 600 / 15 + 2   # two windows of ticks at most


# D4 -------------------------------------------------------------------------------------

def climbing(path: Path, step: int) -> Path:
    """8 GPUs at 650 W and 60 °C (read noise 0.4 °C) every ``step`` s for 90 min; GPU 3's
    heat path degrades from +30 min: 1.4 °C/min for 20 minutes, then it holds."""
    rnd = random.Random(1)
    rows = [HEADER.strip()]
    for k in range(90 * 60 // step):
        t = step * k
        for g in range(8):
            temp = 60 + g % 2 + rnd.gauss(0, 0.4)
            if g == 3:
                temp += 1.4 * min(max(t - 1800, 0), 1200) / 60
            rows.append(f"{T0 + t},n1,{g},gpu_temp_c,{temp:.1f}")
            rows.append(f"{T0 + t},n1,{g},gpu_power_w,{650 + rnd.gauss(0, 3):.1f}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("step", [5, 15])
def test_the_peer_alerts_rise_is_the_climb_not_one_samples_noise(tmp_path: Path,
                                                                  step: int) -> None:
    changes, _ = run([climbing(tmp_path / "c.csv", step)])
    rises = [(c["rule"], c["state"], c["evidence"]["excess_rise_c_per_min"]) for c in changes
             if c["rule"].startswith("gpu_hot_vs_peers") and c["state"] == "firing"
             and T0 + 1800 + 120 <= c["updated_ts"] <= T0 + 3000]
    assert rises and all(0.7 <= r <= 2.2 for _, _, r in rises), rises   # the climb: 1.4 °C/min
