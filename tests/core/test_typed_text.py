"""Text operators type (`ack --by/--comment`, `silence add`) is printed in other operators'
terminals: control characters are refused at input, and escaped where an older store has
them (r21 security review)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.silence_matchers import parse_matcher
from fleetwatch.pipeline.store.base import Acknowledgement, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_alerts_cli import alert, store  # noqa: F401 - the fixture

CLEAR = "fixed\x1b[2J\x1b[H\x1b[32mALL CLEAR\x1b[0m\rX"


def alert_id(store: Path, capsys: pytest.CaptureFixture[str]) -> str:  # noqa: F811
    assert main(["alerts", "--store", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    return [line.split()[-1] for line in out[1:] if not line.startswith("    ")][0]


@pytest.mark.parametrize("args", [["--by", "mallory\x1b]0;pwned\x07"], ["--by", "bob",
                                                                        "--comment", CLEAR]])
def test_ack_refuses_control_characters(store: Path, args: list[str],  # noqa: F811
                                        capsys: pytest.CaptureFixture[str]) -> None:
    an_id = alert_id(store, capsys)
    assert main(["ack", an_id, *args, "--store", str(store)]) != 0
    err = capsys.readouterr().err
    assert "control character" in err and "\x1b" not in err
    s = SqliteStore(store)
    assert s.acks() == []
    s.close()


@pytest.mark.parametrize("args", [["node=n1", "--by", "ops\x1b[8m"],
                                  ["node=n1", "--comment", "maint\x1b[2J"],
                                  ["node=n1\x1b[2J"]])
def test_silence_add_refuses_control_characters(store: Path, args: list[str],  # noqa: F811
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["silence", "add", *args, "--for", "1h", "--store", str(store)]) != 0
    err = capsys.readouterr().err
    assert "control character" in err and "\x1b" not in err
    s = SqliteStore(store)
    assert s.silences() == []
    s.close()


def test_an_older_stores_raw_text_is_printed_escaped(store: Path,  # noqa: F811
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    an_id = alert_id(store, capsys)
    s = SqliteStore(store)
    s.write_acks([Acknowledgement(an_id, time.time(), "mallory\x1b]0;pwned\x07", CLEAR)])
    s.write_silences([Silence("s-1", (parse_matcher("node=n1"),), time.time() - 5,
                              time.time() + 3600, "ops\x1b[8m", "maint\x1b[2J")])
    s.close()
    assert main(["alerts", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "acknowledged by mallory\\x1b]0;pwned\\x07: fixed\\x1b[2J" in out
    assert main(["silence", "list", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "ops\\x1b[8m  maint\\x1b[2J" in out


def test_a_tab_is_kept_as_a_space_and_a_refusal_escapes_once(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert main(["silence", "add", "node=n1", "--comment", "maint\tnight", "--for", "1h",
                 "--store", str(store)]) == 0
    s = SqliteStore(store)
    assert [x.comment for x in s.silences()] == ["maint night"]
    s.close()
    capsys.readouterr()
    assert main(["silence", "add", "node=n1", "--by", "bob\x1b[31m", "--for", "1h",
                 "--store", str(store)]) != 0
    err = capsys.readouterr().err
    assert "'bob\\x1b[31m' holds the control character '\\x1b'" in err, err
