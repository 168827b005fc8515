"""A person edits a fleetwatch silence in Alertmanager (hunt2 #3): its edit form keeps
fleetwatch's createdBy and comment, so the next pass sets it back to the store's copy,
which is the source. That is now said, naming the silence, what changed and how to change
it with fleetwatch; fleetwatch's own changes (an extension in the store) are not."""

from __future__ import annotations

import logging
import time

import pytest

from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.am_silences import AlertmanagerSilences, edit_said, ts
from fleetwatch.pipeline.sinks.base import iso
from fleetwatch.pipeline.store.base import Silence
from tests.servers import Server
from tests.sinks.test_am_shared import _have, _wanted


def test_what_a_person_changed_is_said_in_words() -> None:
    w = _wanted("s1")
    have = _have("a1", "silence s1", w.matchers, "x")
    assert edit_said(have, w) == ""
    have["endsAt"] = iso(w.end_ts + 86_400)
    have["matchers"].append({"name": "device", "value": "gpu0", "isRegex": False,
                             "isEqual": True})
    assert edit_said(have, w) == (f"ends {iso(w.end_ts + 86_400)} instead of "
                                  f"{iso(w.end_ts)}; matchers added: device=gpu0")


@pytest.mark.parametrize("edit", ["extend", "narrow"])
def test_an_edit_in_alertmanager_is_set_back_and_said(
        am: Server, caplog: pytest.LogCaptureFixture, edit: str) -> None:
    url = f"http://{am.address}"
    node = f"node-edit-{time.time_ns()}"
    now = time.time()
    silence = Silence(f"ed-{node}", (("node", "=", node),), now - 1, now + 3600, "tester",
                      "maint")
    sink = AlertmanagerSink(url, resend_s=0.0, instance="site-a")
    api = AlertmanagerSilences(url, 5)

    def live() -> list[dict]:
        return [s for s in api.list() if node in s["comment"]
                and s["status"]["state"] == "active"]

    with caplog.at_level(logging.WARNING, "fleetwatch"):
        sink.mutes([silence], {})
        longer = Silence(silence.id, silence.matchers, silence.start_ts, now + 7200,
                         silence.created_by, silence.comment)
        sink.mutes([longer], {})                   # fleetwatch's own change: not said
        assert not [r for r in caplog.records if "was changed there" in r.getMessage()]
        (mine,) = live()
        body = {k: mine[k] for k in ("id", "matchers", "startsAt", "endsAt", "createdBy",
                                     "comment")}
        if edit == "extend":                       # as Alertmanager's Edit form sends it
            body["endsAt"] = iso(now + 7200 + 86_400)
        else:
            body["matchers"] = [*body["matchers"], {"name": "device", "value": "gpu0",
                                                    "isRegex": False, "isEqual": True}]
        api.put(body)
        sink.mutes([longer], {})                   # the next pass
    said = [r.getMessage() for r in caplog.records if "was changed there" in r.getMessage()]
    assert len(said) == 1, said
    assert f"(fleetwatch silence {silence.id})" in said[0]
    assert ("ends " if edit == "extend" else "matchers added: device=gpu0") in said[0]
    assert "fleetwatch's copy is the source and wins" in said[0]
    assert f"`fleetwatch silence expire {silence.id}`" in said[0]
    (back,) = live()                               # the store's copy, as it was
    assert abs(ts(back["endsAt"]) - (now + 7200)) < 2
    assert {m["name"] for m in back["matchers"]} == {"node", "scope"}
