"""DCGM's ratios a hair above 1 (NVIDIA/DCGM#152): one rule in every layout (read as 1,
counted and said; further above, a bad row), and an AcmeTrace file's scale decided by
the bulk of its values, not by one cell."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.recorded import read_files
from fleetwatch.recorded_values import RATIO_OVERSHOOT, _value
from fleetwatch.replay import ReplayError

T0 = 1_780_000_000


def _acme(tmp_path: Path, values: list[float]) -> Path:
    rows = "".join(f"{T0 + i},{v}\n" for i, v in enumerate(values))
    path = tmp_path / "SM_ACTIVE.csv"
    path.write_text("Time,10.1.2.3-0\n" + rows)
    return path


def _sm(reading: object) -> list[float]:
    return [per[0]["gpu_sm_active_ratio"] for _, per in sorted(reading.samples.items())]


def test_a_ratio_just_above_1_is_read_as_1_and_far_above_is_refused() -> None:
    seen: dict[str, int] = {}
    assert _value("1.0001", "gpu_sm_active_ratio", seen=seen) == 1.0
    assert seen == {"gpu_sm_active_ratio": 1}
    with pytest.raises(ValueError, match="outside its possible range"):
        _value(str(1 + 2 * RATIO_OVERSHOOT), "gpu_sm_active_ratio")
    with pytest.raises(ValueError, match="outside its possible range"):
        _value("100.5", "gpu_util_pct")  # not a ratio: no slack


def test_one_overshoot_cell_does_not_rescale_an_acmetrace_file(tmp_path: Path) -> None:
    values = [0.2 + 0.6 * (i % 7) / 6 for i in range(1600)]
    values[800] = 1.0001
    reading = read_files([_acme(tmp_path, values)])
    got = _sm(reading)
    assert got[800] == 1.0 and got[0] == pytest.approx(0.2) and max(got) == 1.0
    notes = " | ".join(reading.notes)
    assert "SM_ACTIVE.csv: ratios read as 0..1 (0 of 1,600 values above 1.05" in notes
    assert "1 sample of gpu_sm_active_ratio a little above 1 (up to 1.05) read as 1" in notes


def test_a_percent_acmetrace_file_is_still_read_as_percent(tmp_path: Path) -> None:
    values = [0.5] * 900 + [40.0] * 100   # mostly idle, a tenth busy: percent
    reading = read_files([_acme(tmp_path, values)])
    assert _sm(reading)[-1] == pytest.approx(0.4)
    assert any("ratios read as percent (100 of 1,000 values above 1.05" in n
               for n in reading.notes)


def test_the_long_layout_reads_the_same_overshoot_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    path.write_text("timestamp,node,gpu,metric,value\n"
                    f"{T0},n1,0,gpu_sm_active_ratio,0.5\n{T0 + 1},n1,0,gpu_sm_active_ratio,"
                    f"1.0001\n")
    reading = read_files([path])
    assert _sm(reading) == [0.5, 1.0]
    assert any("1 sample of gpu_sm_active_ratio a little above 1" in n for n in reading.notes)
    path.write_text("timestamp,node,gpu,metric,value\n"
                    f"{T0},n1,0,gpu_sm_active_ratio,1.2\n")
    with pytest.raises(ReplayError, match="outside its possible range"):
        read_files([path])
