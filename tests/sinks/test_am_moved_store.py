"""A store that moved derives a new instance name (hunt2 #2): ``silence expire`` must end
the copy the old name made in Alertmanager too, not only the new one's, since silence ids
are unique; a silence still running in the store is left to whichever instance has it."""

from __future__ import annotations

import time

from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.am_silences import AlertmanagerSilences, owner_tag, plan
from fleetwatch.pipeline.store.base import Silence
from tests.servers import Server
from tests.sinks.test_am_shared import _have, _mine, _wanted

OLD, NEW, OTHER = owner_tag("sqlite-old"), owner_tag("sqlite-new"), owner_tag("site-b")


def test_an_ended_silence_is_expired_under_every_fleetwatch_instance() -> None:
    w = _wanted("s1")
    have = [_have("o1", "silence s1", w.matchers, OLD),        # the old name's copy
            _have("n1", "silence s1", w.matchers, NEW),        # this instance's
            _have("b1", "silence s2", w.matchers, OTHER),      # another silence: kept
            _have("h1", "silence s1", w.matchers, "alice")]    # a person's: never touched
    todo = plan([], have, _mine, NEW, ended=["silence s1"])
    assert sorted(todo.expire) == ["n1", "o1"]
    # Not ended here (another deployment's, or still running): the old copy is left.
    assert plan([], have, _mine, NEW).expire == ["n1"]
    assert plan([w], have, _mine, NEW, ended=["silence s1"]).expire == []


def test_expire_after_a_move_ends_the_old_names_copy_in_alertmanager(am: Server) -> None:
    url = f"http://{am.address}"
    node = f"node-moved-{time.time_ns()}"
    now = time.time()
    running = Silence(f"mv-{node}", (("node", "=", node),), now - 1, now + 7200, "tester",
                      "maint")
    before = AlertmanagerSink(url, resend_s=60.0, instance="sqlite-old")
    before.mutes([running], {})                       # up on the store's old path
    after = AlertmanagerSink(url, resend_s=60.0, instance="sqlite-new")
    after.mutes([running], {})                        # up again on the moved store
    api = AlertmanagerSilences(url, 5)

    def live() -> dict[str, str]:
        return {s["createdBy"]: s["status"]["state"] for s in api.list()
                if node in s["comment"]}

    assert live() == {OLD: "active", NEW: "active"}
    ended = Silence(running.id, running.matchers, running.start_ts, time.time(),
                    running.created_by, running.comment)
    after.mutes([ended], {})                          # `silence expire` on the moved store
    assert live() == {OLD: "expired", NEW: "expired"}
