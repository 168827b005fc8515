"""Every duration flag wants its unit: `--for 2` made a two-second silence to someone who
meant two hours, and `alerts --since 24` looked back 24 seconds."""

from __future__ import annotations

import argparse

import pytest

from fleetwatch.cli_args import parser

# (the arguments before the flag, the flag, what the parsed value lands in)
DURATION_FLAGS = [
    (["up"], "--interval", "interval"),
    (["up"], "--backfill", "backfill"),
    (["simulate"], "--duration", "duration"),
    (["simulate"], "--interval", "interval"),
    (["agent"], "--interval", "interval"),
    (["train"], "--duration", "duration"),
    (["silence", "add", "node=n1"], "--for", "duration"),
    (["alerts"], "--since", "since"),
]


def test_every_duration_flag_is_listed_here() -> None:
    """A new flag of the duration type joins the table above, and so these checks."""
    from fleetwatch.cli_types import duration, look_back

    found = set()

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in p._actions:
            if action.type in (duration, look_back):
                found.add((path, action.option_strings[-1]))
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(parser(), ())
    assert found == {(tuple(a for a in argv if "=" not in a), flag)
                     for argv, flag, _ in DURATION_FLAGS}


@pytest.mark.parametrize("argv, flag, dest", DURATION_FLAGS)
@pytest.mark.parametrize("bare", ["2", "24", "0.5", "-3"])
def test_a_bare_number_is_refused_with_a_unit_asked_for(
        argv: list[str], flag: str, dest: str, bare: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args([*argv, f"{flag}={bare}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and f"{bare!r} has no unit: write {bare}s for seconds, or e.g. 30m" in err


@pytest.mark.parametrize("argv, flag, dest", DURATION_FLAGS)
@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200),
                                           ("1d", 86400), ("1.5h", 5400)])
def test_a_duration_with_its_unit_is_read(argv: list[str], flag: str, dest: str, text: str,
                                          seconds: float) -> None:
    assert getattr(parser().parse_args([*argv, flag, text]), dest) == seconds


def test_zero_needs_no_unit() -> None:
    """0 is 0 in every unit: `up --backfill 0` starts the simulation now."""
    assert parser().parse_args(["up", "--backfill", "0"]).backfill == 0.0


@pytest.mark.parametrize("text", ["soon", "", "h", "1e400", "nan"])
def test_no_duration_at_all_says_how_to_write_one(text: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["silence", "add", "node=n1", "--for", text])
    assert "is not a duration; write e.g. 90s, 15m, 2h or 7d" in capsys.readouterr().err


def test_evaluate_interval_is_a_duration_like_every_other_interval(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--interval 5s` copied from `up` or `simulate` works in `evaluate` too."""
    assert parser().parse_args(["evaluate", "--interval", "5s"]).interval == 5.0
    for text, said in (("5", "has no unit: write 5s"), ("10m", "must be between 1s and 300s")):
        with pytest.raises(SystemExit):
            parser().parse_args(["evaluate", "--interval", text])
        assert said in capsys.readouterr().err


@pytest.mark.parametrize(("text", "seconds"), [("3h30m", 12600.0), ("1d12h", 129600.0),
                                                ("1m30s", 90.0), ("210m", 12600.0)])
def test_a_duration_of_several_units_is_one_duration(text: str, seconds: float) -> None:
    assert parser().parse_args(["simulate", "--duration", text]).duration == seconds
    fault = parser().parse_args(
        ["simulate", "--fault", f"node_silent:node-002@{text}+{text}"]).fault[0]
    assert (fault.start_s, fault.duration_s) == (seconds, seconds)


@pytest.mark.parametrize(("spec", "said"), [
    ("node_silent:node-002@3h30+1h",
     "fault 'node_silent:node-002@3h30+1h': START '3h30' is not a duration; write e.g. 90s, "
     "15m, 2h or 7d, or 3h30m: '30' is not a number followed by s, m, h or d"),
    ("node_silent:node-002@1h+2hh",
     "DURATION '2hh' is not a duration; write e.g. 90s, 15m, 2h or 7d, or 3h30m: 'h' is not"),
    ("node_silent:node-002@30m3h", "START '30m3h' is not a duration; write e.g. 90s, 15m, 2h "
     "or 7d, or 3h30m: its units go from the largest down, each once"),
])
def test_a_bad_fault_duration_is_named(spec: str, said: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["simulate", "--fault", spec])
    assert said in capsys.readouterr().err.replace("\n", " ")


@pytest.mark.parametrize(("text", "meant"), [("2hours", "2h"), ("30 min", "30m"),
                                             ("1day", "1d"), ("90secs", "90s"),
                                             ("2hrs30mins", "2h30m")])
def test_a_unit_spelt_out_is_answered_with_its_letter(text: str, meant: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["silence", "add", "node=n1", "--for", text])
    err = capsys.readouterr().err
    assert f"write {meant}" in err and "'ours'" not in err
