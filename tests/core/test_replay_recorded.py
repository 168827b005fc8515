"""Replay of a real recorded temperature series (NAB's machine temperature, tests/data), read
as a new user would: one GPU's ``gpu_temp_c`` in the long CSV layout."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fleetwatch.cli import main

SERIES = "recorded/nab_machine_temperature_system_failure.csv"
# NAB's labelled anomaly window (labels/combined_windows.json) around the failure in which
# the reading falls from about 40 to 2 within an hour.
WINDOW = ("2013-12-15 17:50:00", "2013-12-17 17:00:00")


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def long_csv(real_data: Path, out: Path, start: str, end: str) -> Path:
    with (real_data / SERIES).open(newline="") as f, out.open("w") as w:
        w.write("timestamp,node,gpu,metric,value\n")
        for row in csv.DictReader(f):
            if start <= row["timestamp"] < end:
                w.write(f"{row['timestamp'].replace(' ', 'T')},machine-1,0,gpu_temp_c,"
                        f"{row['value']}\n")
    return out


def replay(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    assert main(["replay", str(path)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def fired(changes: list[dict]) -> list[dict]:
    return [c for c in changes if c["state"] == "firing" and c["fired_ts"] == c["updated_ts"]]


def test_a_reading_that_falls_to_2_is_an_alert_inside_the_labelled_window(
        real_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = long_csv(real_data, tmp_path / "machine.csv", "2013-12-14", "2013-12-18")
    low = [c for c in fired(replay(data, capsys))
           if c["rule"] == "gpu_temp_sensor_invalid" and c["value"] < 5]
    assert low, "the fall to 2 °C raised no alert"
    assert all(epoch(WINDOW[0]) <= c["fired_ts"] <= epoch(WINDOW[1]) for c in low)
    assert "reads 4 °C" in low[0]["message"] and low[0]["action"]


def test_keep_firing_turns_a_series_crossing_its_limits_into_fewer_pages(
        real_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampled every 5 minutes, the machine runs at 80 to 104 and crosses the GPU limits at
    one sample and back at the next; each crossing was a new alert."""
    data = long_csv(real_data, tmp_path / "machine.csv", "2013-12-14", "2013-12-18")
    kept = fired(replay(data, capsys))                       # alerts.keep_firing_s = 300
    monkeypatch.setenv("FLEETWATCH_ALERTS_KEEP_FIRING_S", "0")
    monkeypatch.setenv("FLEETWATCH_DETECTORS_THERMAL_KEEP_FIRING_S", "0")
    every = fired(replay(data, capsys))
    rules = {c["rule"] for c in every}
    assert rules == {c["rule"] for c in kept}               # the same rules, fewer times
    assert len(kept) * 3 < len(every) * 2, (len(kept), len(every))
    for rule in rules:
        assert sum(c["rule"] == rule for c in kept) < sum(c["rule"] == rule for c in every)


def test_the_series_in_its_published_layout_replays_as_its_long_form(
        real_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NAB's own layout (timestamp,value), given what it measures, as a new user would try it
    (the four days around the failure, as above)."""
    long = replay(long_csv(real_data, tmp_path / "machine.csv", "2013-12-14", "2013-12-18"), capsys)
    lines = (real_data / SERIES).read_text().splitlines()
    days = [ln for ln in lines[1:] if "2013-12-14" <= ln < "2013-12-18"]
    published = tmp_path / "machine_temperature_system_failure.csv"
    published.write_text("\n".join([lines[0], *days]) + "\n")
    assert main(["replay", "--metric", "gpu_temp_c", "--node", "machine-1", str(published)]) == 0
    direct = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert direct == long and fired(direct)


def test_the_summary_of_one_series_claims_no_rule_it_cannot_judge(
        real_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One machine's temperature, read as one GPU: its limits are judged; the peer and rack
    rules have no peer, the error-counter and XID rules nothing to read. The summary said
    "judged 100%" of each."""
    lines = (real_data / SERIES).read_text().splitlines()
    day = tmp_path / "machine.csv"
    day.write_text("\n".join([lines[0], *(ln for ln in lines[1:] if ln.startswith("2013-12-15"))])
                   + "\n")
    assert main(["replay", "--metric", "gpu_temp_c", str(day)]) == 0
    said = {line.split(":")[0].strip(): line for line in capsys.readouterr().err.splitlines()
            if line.startswith("  ")}
    assert said["gpu_temp_high"].endswith("judged 100% of GPU samples")
    for rule in ("gpu_hot_vs_peers", "node_cooling", "rack_cooling"):
        assert f"{rule}: not judged: no peers (" in said[rule], said[rule]
    for rule in ("gpu_ecc_dbe", "gpu_nvlink_errors", "gpu_pcie_replay", "gpu_retired_pages",
                 "gpu_xid_critical"):
        assert f"{rule}: not judged: lacked " in said[rule], said[rule]


# NAB's four labelled windows of this series (labels/combined_windows.json).
WINDOWS = [("2013-12-10 06:25:00", "2013-12-12 05:35:00"), WINDOW,
           ("2014-01-27 14:20:00", "2014-01-29 13:30:00"),
           ("2014-02-07 14:55:00", "2014-02-09 14:05:00")]


def test_the_series_converted_from_fahrenheit_as_the_readme_says(
        real_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NAB gives no unit; the values (2 to 108) say °F. Converted as the README shows, the
    79 days raise no alert outside NAB's failure windows, and the README says what they do
    raise: 4 alerts, gpu_temp_sensor_invalid, 2 in the second window and 2 in the fourth."""
    converted = tmp_path / "machine_c.csv"
    with (real_data / SERIES).open(newline="") as f, converted.open("w") as w:
        w.write("timestamp,gpu_temp_c\n")
        for row in csv.DictReader(f):
            w.write(f"{row['timestamp']},{(float(row['value']) - 32) * 5 / 9:.2f}\n")
    assert main(["replay", "--skip-bad", str(converted)]) == 0
    changes = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    got = [(c["rule"], [i for i, (a, b) in enumerate(WINDOWS, 1)
                        if epoch(a) <= c["fired_ts"] <= epoch(b)]) for c in fired(changes)]
    assert got == [("gpu_temp_sensor_invalid", [2])] * 2 + [("gpu_temp_sensor_invalid", [4])] * 2
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "($2-32)*5/9" in readme
    assert ("4 alerts, all `gpu_temp_sensor_invalid` (a reading under 5 °C), 2 in NAB's second "
            "labelled window and 2 in its fourth") in " ".join(readme.split())
