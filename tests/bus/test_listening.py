"""``KafkaConsumer.listening``: a poll that brings nothing means nothing was sent only
while the brokers answer. kafka-python keeps a broker that hangs or is cut off
"connected", and its group coordinator, until a request times out; so only a fetch
response or a heartbeat's answer, lately, counts. Over a fake kafka-python and clock."""

from __future__ import annotations

from typing import Any

from fleetwatch.pipeline.bus.kafka_consumer import KafkaConsumer


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Heartbeat:
    last_receive = -float("inf")


class Coordinator:
    def __init__(self) -> None:
        self.heartbeat = Heartbeat()

    def coordinator(self) -> str:
        return "coordinator-1"

    def stable(self) -> bool:
        return True


class Client:
    def connected(self, node: str) -> bool:
        return True  # a broker that hangs: its socket stays open


class Fetcher:
    def __init__(self) -> None:
        self.responses = 0

    def _handle_fetch_response(self, *args: Any) -> None:
        self.responses += 1

    def respond(self) -> None:  # as kafka-python calls the callback it read at send time
        self._handle_fetch_response("node", {}, 0.0, object())


class FakeKafka:
    def __init__(self) -> None:
        self._coordinator, self._client, self._fetcher = Coordinator(), Client(), Fetcher()


def consumer(clock: Clock, window_s: float = 2.0) -> tuple[KafkaConsumer, FakeKafka]:
    c = object.__new__(KafkaConsumer)  # without a broker: the state listening reads
    fake = FakeKafka()
    c._consumer = fake
    c._clock = clock
    c._answered = -float("inf")
    c.answer_window_s = window_s
    c._watch_answers()
    return c, fake


def test_a_broker_that_stops_answering_is_not_listened_to_past_the_window() -> None:
    clock = Clock()
    c, fake = consumer(clock)
    fake._fetcher.respond()
    assert fake._fetcher.responses == 1  # the fetcher's own handling still runs
    assert c.listening() and c.unheard_s() == 0.0
    clock.t += 1.5
    assert c.listening() and c.unheard_s() == 1.5
    clock.t += 1.0          # the broker hangs: connected, coordinator kept, no answer
    assert not c.listening()
    assert c.unheard_s() == 2.5
    fake._fetcher.respond()  # it answers again
    assert c.listening() and c.unheard_s() == 0.0


def test_a_heartbeat_answer_counts_as_contact() -> None:
    clock = Clock()
    c, fake = consumer(clock)
    assert not c.listening()  # never answered yet
    fake._coordinator.heartbeat.last_receive = clock.t - 0.5
    assert c.listening() and c.unheard_s() == 0.5


def test_no_coordinator_is_not_listening_however_recent_the_answer() -> None:
    clock = Clock()
    c, fake = consumer(clock)
    fake._fetcher.respond()
    fake._coordinator.coordinator = lambda: None  # type: ignore[method-assign]
    assert not c.listening()

