"""replay of dcgm-exporter data in the long CSV: DCGM_FI_DEV_XID_ERRORS rows are XID
events (a change to a non-zero code), as in the AcmeTrace layout; a memory temperature
of 0 (GDDR boards have no sensor) is absent, as the agent reads it (hw #5, #6)."""

from __future__ import annotations

import io
from pathlib import Path

from fleetwatch.collectors.nvml.metrics import ZERO_IS_ABSENT
from fleetwatch.config import DetectorsConfig
from fleetwatch.recorded import frames, read_files
from fleetwatch.replay import replay
from fleetwatch.wiring import detectors

HEADER = "timestamp,node,gpu,metric,value,model\n"
T0 = 1_764_150_000


def long_csv(path: Path, xid: list[int], mem_temp: float = 0.0, shuffle: bool = False) -> Path:
    """dcgm-exporter scrapes of an L40S (15 s apart) as a Prometheus range query exports them."""
    rows = []
    for k, code in enumerate(xid):
        ts = T0 + 15 * k
        rows += [f"{ts},l40s,0,DCGM_FI_DEV_GPU_TEMP,{40 + k},NVIDIA L40S",
                 f"{ts},l40s,1,DCGM_FI_DEV_GPU_TEMP,41,NVIDIA L40S",
                 f"{ts},l40s,0,DCGM_FI_DEV_MEMORY_TEMP,{mem_temp:g},NVIDIA L40S",
                 f"{ts},l40s,0,DCGM_FI_DEV_XID_ERRORS,{code},NVIDIA L40S"]
    if shuffle:
        rows.reverse()  # rows may come in any order
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def xids_of(path: Path) -> list[tuple[int, int, tuple[int, ...]]]:
    return [(int(f.ts - T0) // 15, g.index, g.xids) for batch in frames(read_files([path]))
            for f in batch for g in f.gpus if g.xids]


def test_xid_errors_rows_are_events_where_the_code_changes_to_a_non_zero_one(
        tmp_path: Path) -> None:
    path = long_csv(tmp_path / "l40s.csv", [0, 0, 48, 48, 48, 0, 79, 79, 13])
    assert xids_of(path) == [(2, 0, (48,)), (6, 0, (79,)), (8, 0, (13,))]
    reading = read_files([path])
    assert reading.xid_channel and reading.bad_rows == 0
    assert any("DCGM_FI_DEV_XID_ERRORS read as XID events" in n for n in reading.notes)


def test_the_change_is_found_in_time_order_whatever_the_row_order(tmp_path: Path) -> None:
    path = long_csv(tmp_path / "l40s.csv", [0, 48, 48, 48], shuffle=True)
    assert xids_of(path) == [(1, 0, (48,))]


def test_the_same_codes_in_the_acmetrace_layout_give_the_same_events(tmp_path: Path) -> None:
    codes = [0, 0, 48, 48, 48, 0, 79, 79, 13]
    acme = tmp_path / "DCGM_FI_DEV_XID_ERRORS.csv"
    acme.write_text("Time,l40s-gpu0\n" + "".join(f"{T0 + 15 * k},{c}\n"
                                                  for k, c in enumerate(codes)))
    assert xids_of(acme) == xids_of(long_csv(tmp_path / "l.csv", codes))


def test_a_bad_xid_errors_value_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + f"{T0},l40s,0,DCGM_FI_DEV_XID_ERRORS,48.5,x\n"
                    f"{T0},l40s,,DCGM_FI_DEV_XID_ERRORS,48,x\n")
    reading = read_files([path], skip_bad=True)
    assert reading.bad_rows == 2
    assert reading.bad_examples == [
        f"{path} line 2: column value: XID '48.5' is not a whole number 0..65535 (the "
        "driver's XID code)",
        f"{path} line 3: an xid row needs a GPU index in column gpu"]


def test_the_xid_rule_fires_on_a_long_csv_of_dcgm_exporter_data(tmp_path: Path) -> None:
    out = io.StringIO()
    summary = replay([long_csv(tmp_path / "l40s.csv", [0] * 20 + [48] * 20)],
                     detectors(DetectorsConfig()), out)
    assert summary.coverage["gpu_xid_critical"] == 1.0
    assert "gpu_xid_critical" in out.getvalue() and "XID 48" in out.getvalue()


def test_memory_temperature_0_is_absent_as_the_agent_reads_it(tmp_path: Path) -> None:
    assert "gpu_mem_temp_c" in ZERO_IS_ABSENT  # the agent's rule, imported, not copied
    path = long_csv(tmp_path / "l40s.csv", [0] * 10)
    reading = read_files([path])
    first = frames(reading)[0][0].gpus[0]
    assert "gpu_mem_temp_c" not in first.metrics and first.metrics["gpu_temp_c"] == 40
    assert any(n.startswith("10 samples of gpu_mem_temp_c equal to 0 read as absent")
               for n in reading.notes)
    summary = replay([path], detectors(DetectorsConfig()), io.StringIO())
    for rule in ("gpu_mem_temp_high", "gpu_mem_temp_critical"):
        assert summary.coverage[rule] == 0.0, rule
        assert summary.unjudged[rule] == "lacked gpu_mem_temp_c"
    assert "gpu_mem_temp_c" not in summary.metrics


def test_a_real_memory_temperature_is_kept(tmp_path: Path) -> None:
    reading = read_files([long_csv(tmp_path / "h100.csv", [0] * 3, mem_temp=44)])
    assert frames(reading)[0][0].gpus[0].metrics["gpu_mem_temp_c"] == 44
    assert not any("read as absent" in n for n in reading.notes)


def test_the_readmes_examples_of_dcgm_fields_passed_over_are_not_read() -> None:
    """The README names DCGM fields replay passes over: none may be one it reads."""
    import re

    from fleetwatch.catalogue import DCGM_ALIASES, catalogue

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    said = re.search(r"defines but fleetwatch does not use \(([^:]*):", readme)
    assert said is not None
    named = re.findall(r"`(DCGM_FI_\w+)`", said[1])
    read = {m.dcgm for m in catalogue().metrics if m.dcgm} | set(DCGM_ALIASES)
    assert named and not set(named) & read
