from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.models.rules import GpuTemperatureLimit
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.sinks import Notifier
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_alerts import frame


def test_cli_silence_mutes_a_running_processors_notifications_and_ack_is_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    store = SqliteStore(db)
    notifier = Notifier([], silences=store.silences, acks=store.acks, background=False,
                        reload_s=0)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)], notify=notifier.send)
    assert main(["silence", "--store", db, "add", "node=n1", "rule=~gpu_.*", "--for", "2h",
                 "--by", "ops", "--comment", "fan swap"]) == 0
    silence_id = capsys.readouterr().out.strip()
    now = time.time()
    hot = [frame(now, [95])]
    (notice,) = notifier.send(processor.alerts.observe(hot, processor.detectors[0].update(hot)))
    assert notice.muted_by == f"silence:{silence_id}" and not notice.notify
    assert main(["silence", "--store", db, "list"]) == 0
    assert "node=n1,rule=~gpu_.*" in capsys.readouterr().out
    assert main(["silence", "--store", db, "expire", silence_id]) == 0
    capsys.readouterr()
    assert main(["silence", "--store", db, "list"]) == 0
    assert capsys.readouterr().out == ""                      # no longer in force
    assert main(["silence", "--store", db, "list", "--all"]) == 0
    assert silence_id in capsys.readouterr().out


def test_cli_ack_needs_an_open_alert_and_a_name(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    store = SqliteStore(db)
    processor = Processor(store, [GpuTemperatureLimit(85, for_s=0)])
    processor.process([frame(100, [95])])
    (alert,) = store.alerts()
    assert main(["ack", alert.id, "--by", "oncall", "--store", db]) == 0
    assert [a.by for a in store.acks()] == ["oncall"]
    # No such open alert: the store says no (it may have resolved), an operational refusal.
    assert main(["ack", "nope", "--by", "oncall", "--store", db]) == 1
    assert "no open alert 'nope'" in capsys.readouterr().err
    assert main(["ack", alert.id, "--by", "", "--store", db]) == 2


def test_a_second_ack_says_whose_it_replaces(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    store = SqliteStore(db)
    Processor(store, [GpuTemperatureLimit(85, for_s=0)]).process([frame(100, [95])])
    (alert,) = store.alerts()
    assert main(["ack", alert.id, "--by", "alice", "--comment", "fan swap", "--store", db]) == 0
    assert capsys.readouterr().out == f"acknowledged {alert.id} as alice\n"
    assert main(["ack", alert.id, "--by", "bob", "--store", db]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"acknowledged {alert.id} as bob (replacing alice's acknowledgement of ")
    assert out.rstrip().endswith("UTC: fan swap)")
    assert [a.by for a in store.acks()] == ["bob"]


@pytest.mark.parametrize("argv, code, why", [
    (["add", "colour=red"], 2, "LABEL=VALUE"),
    (["add", "node=n1", "--for", "0s"], 2, "must be above 0"),
    (["expire", "nosuch"], 1, "no silence 'nosuch'"),
])
def test_cli_silence_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                            code: int, why: str) -> None:
    db = tmp_path / "f.db"
    SqliteStore(db).close()
    assert main(["silence", "--store", str(db), *argv]) == code
    assert why in capsys.readouterr().err


COMMANDS = [["ack", "SOMEID", "--by", "me"], ["silence", "add", "node=node-001", "--by", "me"],
            ["silence", "list"], ["silence", "expire", "abc"], ["alerts"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_store_that_is_not_there_is_refused_not_created(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in --store made an empty store, and `alerts` on it then said "no open alerts"."""
    typo = tmp_path / "typo.db"
    assert main([*argv, "--store", str(typo)]) == 1
    err = capsys.readouterr().err
    assert f"no store at {typo}" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []                      # nothing created
    assert main(["alerts", "--store", str(typo)]) == 1         # and no all-clear after it


@pytest.mark.parametrize("argv", [*COMMANDS, ["report", "--month", "2026-10"]], ids=" ".join)
def test_the_default_store_missing_points_at_the_one_up_wrote(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("FLEETWATCH_CONFIG", "FLEETWATCH_STORE_PATH", "FLEETWATCH_STORE_KIND"):
        monkeypatch.delenv(name, raising=False)
    SqliteStore(tmp_path / "fleetwatch-sim.db").close()  # what `fleetwatch up` leaves here
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "no store at fleetwatch.db" in err
    assert "fleetwatch up writes fleetwatch-sim.db here: pass --store fleetwatch-sim.db" in err
    assert "run `fleetwatch up`" not in err  # said to someone who just did
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_silence_add_says_what_it_silenced_and_until_when(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleetwatch.alert_view import utc

    db = str(tmp_path / "fleet.db")
    SqliteStore(db).close()
    assert main(["silence", "add", "node=node-001", "rule=~gpu_.*", "--for", "2h", "--by", "me",
                 "--store", db]) == 0
    out, err = capsys.readouterr()
    silence_id = out.strip()                   # alone on stdout, for ID=$(...) in a script
    (s,) = SqliteStore(db, read_only=True).silences()
    assert s.id == silence_id and s.end_ts - s.start_ts == 7200
    assert (f"silenced node=node-001,rule=~gpu_.* from {utc(s.start_ts)} until "
            f"{utc(s.end_ts)} UTC (2 h 00 min) by me") in err


@pytest.mark.parametrize("matcher", ["node=", "node!=", 'node=""', "node= ", "node=~", "rack!~"])
def test_an_empty_matcher_value_is_refused(matcher: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`node=$NODE` with $NODE unset: a silence of nothing, or (!=) of nearly everything."""
    db = tmp_path / "f.db"
    SqliteStore(db).close()
    assert main(["silence", "add", matcher, "--store", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"silence matcher {matcher!r} has an empty value" in err and "=~^$" in err
    assert SqliteStore(db, read_only=True).silences() == []
    assert main(["silence", "add", "rack=~^$", "--store", str(db)]) == 0  # said explicitly


def test_expiring_twice_or_an_unknown_silence_says_so(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "f.db")
    SqliteStore(db).close()
    assert main(["silence", "add", "node=n1", "--store", db]) == 0
    silence_id = capsys.readouterr().out.strip()
    assert main(["silence", "expire", silence_id, "--store", db]) == 0
    assert "already" not in capsys.readouterr().err
    (ended,) = SqliteStore(db, read_only=True).silences()
    assert main(["silence", "expire", silence_id, "--store", db]) == 0
    out, err = capsys.readouterr()
    assert f"{silence_id} had already ended at " in err and "nothing changed" in err
    assert silence_id in out
    assert SqliteStore(db, read_only=True).silences() == [ended]  # not moved again
    assert main(["silence", "expire", "nosuch", "--store", db]) == 1
    assert "no silence 'nosuch'" in capsys.readouterr().err


def test_silence_takes_store_before_or_after_its_action(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    db, other = str(tmp_path / "up.db"), str(tmp_path / "other.db")
    SqliteStore(db).close()
    assert main(["silence", "add", "node=x", "--store", db]) == 0
    silence_id = capsys.readouterr().out.strip()
    assert main(["silence", "list", "--store", db]) == 0
    assert silence_id in capsys.readouterr().out
    assert main(["silence", "--store", db, "list"]) == 0
    assert silence_id in capsys.readouterr().out
    # Both: the one after the action, nearer to it, is the one meant.
    assert main(["silence", "--store", other, "list", "--store", db]) == 0
    assert silence_id in capsys.readouterr().out


def test_a_silence_made_now_is_in_force_now_and_kept_to_the_ms(tmp_path: Path) -> None:
    """Times are cut to the ms (every backend keeps those exactly), downwards: a start
    rounded up would begin a fraction of a ms after the alerts of this instant."""
    from fleetwatch.silencing import add_silence

    store = SqliteStore(tmp_path / "f.db")
    s = add_silence(store, ["node=n1"], 60.0, start_ts=1_795_000_000.0006)
    assert (s.start_ts, s.end_ts) == (1_795_000_000.0, 1_795_000_060.0)
    assert store.silences(1_795_000_000.0006) == [s]
