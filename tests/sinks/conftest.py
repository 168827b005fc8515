from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.bus import Producer
from fleetwatch.pipeline.bus.memory import MemoryBus
from fleetwatch.pipeline.processor import Processor
from fleetwatch.retry import Backoff
from tests.servers import Server, alertmanager


@pytest.fixture(scope="session")
def am(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real Alertmanager on 127.0.0.1, shared by the session."""
    server = alertmanager(tmp_path_factory.mktemp("am")).start()
    yield server
    server.stop()


class Receiver:
    """A real local HTTP server that records the JSON bodies POSTed to it; answers each
    request with the next of ``answers``, then with ``code`` (200; 0: hang until
    ``release`` is set, then answer ``code`` or 200)."""

    def __init__(self, answers: list[int] | None = None) -> None:
        self.bodies: list[object] = []
        self.times: list[float] = []  # when each body was received (time.monotonic)
        self.answers = list(answers or [])
        self.code = 200
        self.release = threading.Event()
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.requests += 1
                code = owner.answers.pop(0) if owner.answers else owner.code
                if code == 0:
                    owner.release.wait(30)
                    code = owner.code or 200
                if code == 200:
                    owner.bodies.append(json.loads(body))
                    owner.times.append(time.monotonic())
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b"busy" if code != 200 else b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def frame(ts: float, temps: list[float], node: str = "n1", rack: str = "r1") -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "m", {"gpu_temp_c": t}) for i, t in enumerate(temps))
    return Frame("c", rack, node, ts, gpus)


def tmp_store(tmp_path: Path):  # noqa: ANN201
    from fleetwatch.pipeline.store.sqlite import SqliteStore

    return SqliteStore(tmp_path / "fleet.db")


def fast() -> Backoff:
    """A retry backoff short enough for tests."""
    return Backoff(0.01, 0.05)


def until(check: Callable[[], object], timeout_s: float = 15.0) -> bool:
    """Wait for a condition another thread makes true (not a timing: a deadline)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def on_memory_bus(processor: Processor, topic: str, group: str = "g"
                  ) -> tuple[MemoryBus, Producer, threading.Event, threading.Thread]:
    """``processor`` started in a thread on an in-process bus's ``topic`` (batches of 10):
    the bus, a producer to it, the event that stops it and its thread."""
    bus = MemoryBus()
    consumer = bus.consumer(topic, group)
    stop = threading.Event()
    worker = threading.Thread(target=processor.run, args=(consumer, stop, 10, 3600.0))
    producer = bus.producer()
    worker.start()
    return bus, producer, stop, worker
