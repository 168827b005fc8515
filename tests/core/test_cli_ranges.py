"""Every number on the command line is checked against its declared range, with a clear error.

0, negative, 1e400 (infinite), nan and huge values for each numeric flag: the
command exits 2 naming the flag, with no traceback, and creates no file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main

BAD = ("0", "-1", "1e400", "nan", "1e12")
# (command and the arguments that make it otherwise valid, flag, values it must refuse)
CASES: list[tuple[tuple[str, ...], str, tuple[str, ...]]] = [
    (("up", "--simulate"), "--interval", BAD),
    (("up", "--simulate"), "--speed", BAD + ("0.5",)),
    (("up", "--simulate"), "--backfill", ("-1", "1e400", "nan", "1e12")),  # 0: start now
    (("up", "--simulate"), "--port", BAD + ("99999", "8050.5", "x")),
    (("up", "--simulate"), "--nodes", BAD + ("1e6", "1000000")),
    (("up", "--simulate"), "--gpus", BAD + ("200",)),
    (("up", "--simulate"), "--seed", ("-1", "1e400", "nan", "1e30")),  # 0 is a seed
    (("simulate",), "--days", BAD + ("367",)),
    (("simulate",), "--duration", BAD + ("400d",)),
    (("simulate",), "--interval", BAD + ("0.5",)),
    (("simulate",), "--end", BAD + ("1.7e12",)),  # epoch milliseconds by mistake
    (("simulate",), "--nodes", BAD),
    (("simulate",), "--gpus", BAD + ("65",)),
    (("agent", "--once"), "--interval", BAD),
    (("agent", "--once"), "--fake-gpus", BAD),
    (("process",), "--workers", BAD + ("1000",)),
    (("dashboard",), "--port", BAD + ("99999",)),
]


@pytest.mark.parametrize(("command", "flag", "value"), [
    (command, flag, value) for command, flag, values in CASES for value in values])
def test_out_of_range_number_is_a_usage_error(command: tuple[str, ...], flag: str, value: str,
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLEETWATCH_CONFIG", raising=False)
    try:
        code = main([*command, f"{flag}={value}"])
    except SystemExit as exc:  # argparse's own refusal of a value that is no number at all
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert flag in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing created, nothing written


def test_simulate_span_shorter_than_one_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--duration", "10s", "--interval", "15s"]) == 2
    assert "holds no sample" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
