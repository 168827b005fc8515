"""A cluster that forbids this client to create topics: the check passes where the topic
exists (made with the cluster's tools), and fails, saying what to do, where it does not.
kafka-python's admin client is replaced by one that answers as such a broker does."""

from __future__ import annotations

from typing import Any

import kafka.errors as kerr
import pytest

from fleetwatch.pipeline.bus import BusError, topics


class ForbiddingAdmin:
    existing: dict[str, int] = {}

    def __init__(self, **_: Any) -> None:
        self.created: list[str] = []

    def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{"node_id": 1}]}

    def create_topics(self, new: dict[str, Any], **_: Any) -> None:
        raise kerr.TopicAuthorizationFailedError("not authorized")

    def create_partitions(self, *_: Any, **__: Any) -> None:
        raise AssertionError("a forbidden check must not try to grow a topic")

    def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        return [{"partitions": [{}] * self.existing[n]} for n in names if n in self.existing]

    def close(self) -> None:
        pass


@pytest.fixture
def forbidding(monkeypatch: pytest.MonkeyPatch) -> type[ForbiddingAdmin]:
    monkeypatch.setattr(topics, "_AdminClient", ForbiddingAdmin)
    monkeypatch.setattr(ForbiddingAdmin, "existing", {"made": 6, "short": 4})
    return ForbiddingAdmin


def test_an_existing_topic_passes_where_creating_is_forbidden(forbidding: type) -> None:
    assert topics.ensure_topic("b:9092", "made", 6) == 6
    assert topics.ensure_topic("b:9092", "short", 6) == 4
    assert topics.topic_partitions["short"] == (4, 6)


def test_a_missing_topic_fails_saying_who_must_make_it(forbidding: type) -> None:
    with pytest.raises(BusError) as err:
        topics.ensure_topic("b:9092", "missing", 6)
    assert str(err.value) == ("topic 'missing' does not exist on b:9092 and this client may "
                              "not create it: create it with your Kafka tools, or let a "
                              "processor create it")
