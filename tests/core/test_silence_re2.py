"""Silence regexes in Alertmanager's dialect (oncall2 #2): fleetwatch mirrors its silences
into Alertmanager, whose matchers are Go's RE2, anchored at both ends. A regex RE2 does not
have (lookaround, backreferences, atomic groups, possessive quantifiers, conditionals) is
refused by `fleetwatch silence add`, naming the construct, instead of muting here and not
there; fleetwatch's own matching is anchored as Alertmanager's is."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.pipeline.silence_matchers import matches, not_re2, parse_matcher
from fleetwatch.pipeline.store.base import Alert, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore

REFUSED = [("rule=~(?!gpu_temp).*", "a negative lookahead (?!...)"),
           ("rule=~gpu(?=_temp).*", "a lookahead (?=...)"),
           ("node=~.*(?<=-b)", "a lookbehind (?<=...)"),
           ("node!~.*(?<!-b)", "a negative lookbehind (?<!...)"),
           (r"node=~(node)-\1", r"a backreference (\1)"),
           ("node=~(?P<n>a)(?P=n)", "a named backreference (?P=...)"),
           ("rule=~(?>gpu_).*", "an atomic group (?>...)"),
           ("rule=~gpu_.*+", "a possessive quantifier (*+)"),
           ("node=~node-\\d++", "a possessive quantifier (++)"),
           ("rule=~(g)?(?(1)pu_.*|node.*)", "a conditional (?(...)...)")]


@pytest.mark.parametrize(("text", "construct"), REFUSED)
def test_a_regex_alertmanager_cannot_parse_is_refused_naming_the_construct(
        text: str, construct: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_matcher(text)
    assert str(err.value).startswith(f"silence matcher {text!r}: {construct}, which "
                                     "Alertmanager's regular expressions (Go's RE2) do not have")


@pytest.mark.parametrize("regex", ["gpu_.*", "gpu_temp_(high|critical)", r"node-\d+",
                                   "(?i)GPU_.*", r"[+*]+", r"\++", r"a\*+", "x|y",
                                   "(?P<n>node)-a", "[]a]+", "node-{2,3}"])
def test_re2_regexes_are_kept(regex: str) -> None:
    assert not_re2(regex) == ""
    assert parse_matcher(f"node=~{regex}") == ("node", "=~", regex)


def test_silence_add_refuses_it_as_a_usage_error_and_stores_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "fleet.db")
    SqliteStore(db).close()
    assert main(["silence", "--store", db, "add", "rule=~(?!gpu_temp).*", "node=node-b",
                 "--for", "10m"]) == 2          # as for a bad regex or matcher
    err = capsys.readouterr().err
    assert "a negative lookahead (?!...), which Alertmanager's regular expressions" in err
    assert "rule!~gpu_temp.*" in err                 # what to write instead
    assert SqliteStore(db).silences() == []


def _alert(rule: str, node: str) -> Alert:
    now = time.time()
    return Alert(f"{rule}/c/{node}/gpu0/1", rule, "critical", "c", "r1", node, "gpu0",
                 "firing", now, now, 91.0, "hot", fired_ts=now)


@pytest.mark.parametrize(("matcher", "rule", "hit"), [
    ("rule=~gpu", "gpu_temp_high", False),           # anchored: not a search
    ("rule=~temp", "gpu_temp_high", False),
    ("rule=~gpu_temp_high|xid", "gpu_temp_high", True),   # ^(?:a|b)$, not ^a|b$
    ("rule=~gpu_temp_high|xid", "gpu_temp_high_x", False),
    ("rule=~xid|gpu_temp", "gpu_temp_high", False),
    ("rule!~gpu_.*", "gpu_temp_high", False),
    ("rule!~gpu", "gpu_temp_high", True),
    ("node=~node-a", "gpu_temp_high", True),
])
def test_fleetwatch_matches_a_regex_anchored_at_both_ends_as_alertmanager_does(
        matcher: str, rule: str, hit: bool) -> None:
    s = Silence("s1", (parse_matcher(matcher),), 0.0, 1e12)
    assert matches(s, _alert(rule, "node-a")) is hit


def test_a_silence_stored_before_they_were_refused_is_said_to_be_fleetwatchs_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The upgrade tester's silence `device=~gpu(?!0)3`, made by a release that took it: it
    still mutes fleetwatch's own sinks, but Alertmanager cannot take it and keeps paging;
    `silence list` and `alerts` say so, and what to do."""
    db = str(tmp_path / "fleet.db")
    store = SqliteStore(db)
    now = time.time()
    old = Silence("9906a5145c7f", (("device", "=~", "gpu(?!0)3"),), now - 60, now + 3600,
                  "ops", "")
    store.write_silences([old])
    store.write_alerts([Alert("gpu_temp_high/c/node-a/gpu3/1", "gpu_temp_high", "critical",
                              "c", "r1", "node-a", "gpu3", "firing", now, now, 91.0, "hot",
                              fired_ts=now)])
    store.close()
    assert main(["silence", "--store", db, "list"]) == 0
    out = capsys.readouterr().out
    assert ("not in Alertmanager: device=~gpu(?!0)3 has a negative lookahead (?!...), which "
            "Alertmanager's regular expressions (Go's RE2) do not have") in out
    assert "`fleetwatch silence expire 9906a5145c7f`, then add it again without that" in out
    assert main(["alerts", "--store", db]) == 0
    out = capsys.readouterr().out
    assert "notifications: silenced by 9906a5145c7f" in out
    assert "but not in Alertmanager, which still pages it: device=~gpu(?!0)3 has" in out
