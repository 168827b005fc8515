"""A partition assigned back to a member that had it: another member may have owned it
meanwhile (this one was thrown out of its group while the brokers were away) and opened
an alert for one of its nodes. The member loads it, so that it resolves it (the r19
Kafka run: a node_silent raised by a member that held the partition 17 s stayed FIRING
for ever, through every later rebalance)."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import pytest

from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.bus import Message
from fleetwatch.pipeline.ownership import Ownership
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.core.test_processor_hardening import frame

TOPIC = "frames"
T = time.time() - 600


def silent(node: str, ts: float) -> Alert:
    return Alert(id=f"node_silent/c1/{node}/host/{int(ts * 1000)}", rule="node_silent",
                 severity="critical", cluster="c1", rack="r1", node=node, device="host",
                 state="firing", started_ts=ts, updated_ts=ts, value=133.0,
                 message=f"{node} has sent nothing for 133 s", fired_ts=ts)


def test_an_alert_opened_by_another_member_meanwhile_is_taken_over_and_resolved(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    book, loaded = AlertBook(requirements={"node_silent": ()}), []
    own = Ownership(store, book, on_loaded=[loaded.append])
    part = (TOPIC, 2)
    msg = Message(b"", b"node-2", TOPIC, 2, 0)
    own.assigned([part])
    own.build([frame("node-2", T)], [msg])
    assert book.open == []
    # Thrown out of the group: everything revoked. Another member owns the partition
    # for a while and opens an alert; then the partition comes back to this member.
    own.revoked([part])
    store.write_alerts([silent("node-2", T + 130)])
    own.assigned([part])
    frames = [frame("node-2", T + 140)]
    own.build(frames, [msg])
    assert [(a.node, a.rule, a.state) for a in book.open] == [
        ("node-2", "node_silent", "firing")]
    assert [a.id for batch in loaded for a in batch] == [silent("node-2", T + 130).id]
    # The node sends: the alert resolves here.
    changes = book.observe(frames, [])
    assert [(a.rule, a.state) for a in changes] == [("node_silent", "resolved")]
    # Loaded once: a later rebalance with nothing new loads nothing again.
    book.apply(changes)
    store.write_alerts(changes)
    own.revoked([part])
    own.assigned([part])
    own.build([frame("node-2", T + 150)], [msg])
    assert book.open == [] and len(loaded) == 1
    store.close()


def test_an_alert_the_book_holds_is_not_loaded_over_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    book, loaded = AlertBook(requirements={"node_silent": ()}), []
    own = Ownership(store, book, on_loaded=[loaded.append])
    part = (TOPIC, 0)
    msg = Message(b"", b"n", TOPIC, 0, 0)
    own.assigned([part])
    own.build([frame("n", T)], [msg])
    mine = silent("n", T + 100)
    book.load([mine])
    store.write_alerts([mine])
    own.revoked([part])
    own.assigned([part])
    own.build([frame("n", T + 110)], [msg])
    assert [a.id for a in book.open] == [mine.id] and loaded == []
    store.close()


def test_a_member_thrown_out_without_a_revocation_takes_the_alert_over_too(
        tmp_path: Path) -> None:
    """kafka-python does not always call the revocation first (seen after a broker came
    back empty: "partitions assigned: ...; moved away: none")."""
    store = SqliteStore(tmp_path / "store.db")
    book, loaded = AlertBook(requirements={"node_silent": ()}), []
    own = Ownership(store, book, on_loaded=[loaded.append])
    part, msg = (TOPIC, 2), Message(b"", b"node-2", TOPIC, 2, 0)
    own.assigned([part])
    own.build([frame("node-2", T)], [msg])
    store.write_alerts([silent("node-2", T + 130)])
    own.assigned([part])
    own.build([frame("node-2", T + 140)], [msg])
    assert [a.node for a in book.open] == ["node-2"] and len(loaded) == 1
    store.close()


def test_only_the_clusters_own_alert_is_taken_over_and_the_log_names_its_cluster(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """node-2 of c1 and of c2 share a partition (frames are keyed by name); another member
    opened an alert for c2's only: the log names c2/node-2."""
    store = SqliteStore(tmp_path / "store.db")
    book = AlertBook(requirements={"node_silent": ()})
    own = Ownership(store, book)
    part, msg = (TOPIC, 2), Message(b"", b"node-2", TOPIC, 2, 0)
    other = dataclasses.replace(frame("node-2", T), cluster="c2")
    own.assigned([part])
    own.build([frame("node-2", T), other], [msg, msg])
    own.revoked([part])
    theirs = dataclasses.replace(silent("node-2", T + 130), cluster="c2",
                                 id=f"node_silent/c2/node-2/host/{int((T + 130) * 1000)}")
    store.write_alerts([theirs])
    own.assigned([part])
    with caplog.at_level(logging.INFO, logger="fleetwatch.pipeline.ownership"):
        own.build([frame("node-2", T + 140)], [msg])
    assert [(a.cluster, a.node) for a in book.open] == [("c2", "node-2")]
    assert "taken over: node_silent c2/node-2" in caplog.text
    store.close()
