"""The sampling loop on its own clock: a stuck producer never delays a sample."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from fleetwatch.codec import decode
from fleetwatch.collectors.agent import Agent
from fleetwatch.collectors.sender import Sender
from fleetwatch.frame import Frame, HostReading


class Counting:
    """A FrameSource: one small frame per tick, numbered; optionally slow once."""

    def __init__(self, slow_tick: int = -1, slow_s: float = 0.0) -> None:
        self.n = 0
        self.slow_tick, self.slow_s = slow_tick, slow_s

    def frames(self, ts: float) -> list[Frame]:
        self.n += 1
        if self.n == self.slow_tick:
            time.sleep(self.slow_s)
        return [Frame("c", "r", "node", ts, (), HostReading({"host_load1": 1.0}), seq=self.n)]

    def close(self) -> None:
        pass


class StuckBroker:
    """A Producer whose every flush blocks, as kafka-python's does while the broker is away."""

    def __init__(self, block_s: float) -> None:
        self.block_s = block_s
        self.got: list[bytes] = []

    def send(self, topic: str, value: bytes, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        self.got.append(value)

    def flush(self, timeout_s: float | None = None) -> None:
        time.sleep(self.block_s)

    def close(self) -> None:
        pass


def test_a_blocking_producer_does_not_delay_sampling() -> None:
    # Ticks of 0.2 s: a whole tick missed takes a 0.2 s stall, which a loaded runner's
    # thread does not see (one of 0.05 s it did).
    broker = StuckBroker(block_s=2.0)
    sender = Sender(broker).start()
    source = Counting()
    agent = Agent(source, None, "t", sender=sender)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(0.2, stop))
    thread.start()
    time.sleep(4.0)
    stop.set()
    thread.join(5)
    # 4 s at 0.2 s is 20 ticks; a loop that waited for the flush would manage about 2.
    assert source.n >= 15 and agent.missed_ticks == 0
    sender.close(timeout_s=5)
    assert [decode(v).seq for v in broker.got] == list(range(1, source.n + 1))


def test_a_slow_tick_is_caught_up_or_counted_as_missed() -> None:
    # Tick 3 takes 3.5 intervals: it ends half-way through the third slot after its own,
    # so two slots passed whole (counted as missed) and the third is taken at once.
    # Intervals of 0.4 s: 0.2 s either side of a slot's edge for a loaded runner's delays.
    source = Counting(slow_tick=3, slow_s=1.4)
    agent = Agent(source, None, "t")
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(0.4, stop))
    thread.start()
    time.sleep(4.0)
    stop.set()
    thread.join(5)
    assert agent.missed_ticks == 2
    assert source.n + agent.missed_ticks >= 9
