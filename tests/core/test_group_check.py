"""Members of one consumer group compare the settings they must share (``group_check``).

Pure logic: what the leader hands back (``summarize``) and what each member then says.
The real exchange through Tansu: tests/integration/test_group_settings.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fleetwatch.config import load
from fleetwatch.pipeline.group_check import GroupCheck, MemberSettings, differences, summarize
from fleetwatch.wiring import member_settings, settings_parts

BASE = {"FLEETWATCH_ALERTS_WEBHOOK_URL": "http://hooks.example:9000/fw?token=s3cretTOKEN",
        "FLEETWATCH_STORE_KIND": "sqlite", "FLEETWATCH_STORE_PATH": "/var/lib/fw/fw.db",
        "FLEETWATCH_BUS_KIND": "kafka"}


def parts(**env: str) -> dict[str, str]:
    return settings_parts(load(None, {**BASE, **env}))


def test_each_part_changes_only_with_its_own_settings_and_never_shows_a_secret() -> None:
    base = parts()
    assert parts() == base
    no_hook = parts(FLEETWATCH_ALERTS_WEBHOOK_URL="")
    assert no_hook["alert_sinks"] != base["alert_sinks"]
    assert no_hook["detectors"] == base["detectors"] and no_hook["store"] == base["store"]
    for env in ({"FLEETWATCH_ALERTS_ALERTMANAGER_URL": "http://am:9093"},
                {"FLEETWATCH_BUS_ALERT_TOPIC": "other.alerts"},
                {"FLEETWATCH_ALERTS_KEEP_FIRING_S": "30"},
                {"FLEETWATCH_ALERTS_CLUSTERS": "a"}):
        assert parts(**env)["alert_sinks"] != base["alert_sinks"], env
    hotter = parts(FLEETWATCH_DETECTORS_PEER_MARGIN_C="2")
    assert hotter["detectors"] != base["detectors"]
    assert hotter["alert_sinks"] == base["alert_sinks"]
    assert parts(FLEETWATCH_STORE_PATH="/tmp/other.db")["store"] != base["store"]
    data = member_settings(load(None, BASE)).encode()
    assert b"s3cret" not in data and b"hooks.example" not in data


def member(name: str, **env: str) -> MemberSettings:
    return MemberSettings(name, parts(**env))


def test_the_member_without_the_webhook_is_named_by_every_member() -> None:
    a, b = member("host-a pid 1"), member("host-b pid 2")
    odd = member("host-c pid 3", FLEETWATCH_ALERTS_WEBHOOK_URL="")
    summary = summarize([a.encode(), b.encode(), odd.encode(), b""])
    found, older = differences(a, summary)
    assert older == 1  # a member of an older release: counted, not taken as different
    assert [(d.part, d.members, d.count) for d in found] == [
        ("alert_sinks", ("host-c pid 3",), 1)]
    found, _ = differences(odd, summary)
    assert [(d.part, sorted(d.members), d.count) for d in found] == [
        ("alert_sinks", ["host-a pid 1", "host-b pid 2"], 2)]
    assert differences(a, summarize([a.encode(), b.encode()])) == ([], 0)


def test_a_warning_names_the_part_and_the_member_once_per_repeat(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    a = member("host-a pid 1")
    odd = member("host-d pid 4", FLEETWATCH_DETECTORS_HIGH_MARGIN_C="10")
    check = GroupCheck("proc", a, clock=lambda: now[0])
    summary = summarize([a.encode(), odd.encode()])
    with caplog.at_level(logging.WARNING):
        (line,) = check.assigned(summary)
        assert check.assigned(summary) == []      # the next rebalance: said already
        now[0] += 601
        assert len(check.assigned(summary)) == 1  # still so ten minutes later: again
    assert "consumer group proc: 1 other member(s) (host-d pid 4)" in line
    assert "[detectors] settings" in line and "(host-a pid 1)" in line
    assert caplog.records[0].levelno == logging.WARNING
    assert check.differing == {"detectors": 1, "alert_sinks": 0, "store": 0}
    assert check.assigned(summarize([a.encode()])) == []
    assert check.differing["detectors"] == 0


def test_data_that_is_not_ours_compares_nothing() -> None:
    a = member("host-a pid 1")
    assert differences(a, b"") == ([], 0)
    assert differences(a, b"\x00\x01garbage") == ([], 0)
    assert MemberSettings.decode(b"{\"v\": 9}") is None
    assert differences(a, summarize([b"junk", a.encode()])) == ([], 1)


def test_a_store_difference_is_not_blamed_on_the_alert_settings() -> None:
    """``alerts.instance`` unset is derived from the store: only the store part differs."""
    base, moved = parts(), parts(FLEETWATCH_STORE_PATH="/var/lib/fw/other.db")
    assert moved["store"] != base["store"]
    assert moved["alert_sinks"] == base["alert_sinks"]
    assert parts(FLEETWATCH_ALERTS_INSTANCE="prod-a")["alert_sinks"] != base["alert_sinks"]
    a, b = member("host-a pid 1"), member("host-b pid 2", FLEETWATCH_STORE_PATH="/x.db")
    found, _ = differences(a, summarize([a.encode(), b.encode()]))
    assert [d.part for d in found] == ["store"]


def test_members_of_an_older_release_are_said_and_counted_as_unchecked(
        caplog: pytest.LogCaptureFixture) -> None:
    a = member("host-a pid 1")
    check = GroupCheck("proc", a)
    with caplog.at_level(logging.INFO, logger="fleetwatch.pipeline.group_check"):
        assert check.assigned(summarize([a.encode(), b""])) == []
    assert check.older == 1 and check.differing["store"] == 0
    assert any("1 member(s) of an older release could not be compared" in r.getMessage()
               for r in caplog.records)


def test_unchecked_members_are_on_metrics(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from fleetwatch.pipeline.health import ProcessorCollector
    from fleetwatch.pipeline.processor import Processor
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    a = member("host-a pid 1")
    check = GroupCheck("proc", a)
    check.assigned(summarize([a.encode(), b"", b""]))
    registry = CollectorRegistry()
    class Consumer:
        def lag(self) -> int:
            return 0

    registry.register(ProcessorCollector(Processor(SqliteStore(tmp_path / "s.db")),
                                         Consumer(), check=check))  # type: ignore[arg-type]
    assert registry.get_sample_value("fleetwatch_processor_group_members_unchecked") == 2
