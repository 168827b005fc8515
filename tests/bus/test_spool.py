"""The on-disk spool and the spooling producer, against a fake broker (no server needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from fleetwatch.collectors.spool import Spool, SpoolRecord
from fleetwatch.collectors.spooling import SpoolingProducer
from fleetwatch.pipeline.bus import BusError


def recs(start: int, n: int, size: int = 40) -> list[SpoolRecord]:
    return [SpoolRecord("t", str(i).encode().ljust(size, b"."), f"k{i % 3}".encode(),
                        (("h", str(i).encode()),)) for i in range(start, start + n)]


def ids(records: Sequence[SpoolRecord]) -> list[int]:
    return [int(r.value.rstrip(b".")) for r in records]


def test_fifo_order_and_fields(tmp_path: Path) -> None:
    s = Spool(tmp_path, 1 << 20, segment_bytes=1024)
    s.append(recs(0, 100))
    assert len(s) == 100
    first = s.peek(1)[0]
    assert first == SpoolRecord("t", b"0".ljust(40, b"."), b"k0", (("h", b"0"),))
    s.remove(30)
    assert ids(s.peek(1000)) == list(range(30, 100))
    s.append(recs(100, 5))
    s.remove(70)
    assert ids(s.peek(1000)) == list(range(100, 105))
    s.remove(5)
    assert len(s) == 0 and s.peek(10) == []
    # Delivered segments are deleted, not kept around.
    assert list(tmp_path.glob("*.seg")) == []


def test_survives_restart(tmp_path: Path) -> None:
    s = Spool(tmp_path, 1 << 20, segment_bytes=1024)
    s.append(recs(0, 50))
    s.remove(17)
    s.close()
    s = Spool(tmp_path, 1 << 20, segment_bytes=1024)
    assert ids(s.peek(1000)) == list(range(17, 50))
    s.append(recs(50, 10))
    s.close()
    s = Spool(tmp_path, 1 << 20, segment_bytes=1024)
    assert ids(s.peek(1000)) == list(range(17, 60))


def _last_segment(path: Path) -> Path:
    return sorted(path.glob("*.seg"))[-1]


@pytest.mark.parametrize("tail", [
    "half_record", "zero_filled", "bad_crc", "header_only"])
def test_torn_last_record_is_dropped(tmp_path: Path, tail: str) -> None:
    s = Spool(tmp_path, 1 << 20)
    s.append(recs(0, 5))
    s.close()
    seg = _last_segment(tmp_path)
    blob = recs(5, 1)[0].pack()
    with open(seg, "ab") as f:
        if tail == "half_record":
            f.write(blob[: len(blob) // 2])
        elif tail == "zero_filled":
            f.write(b"\0" * 4096)
        elif tail == "bad_crc":
            f.write(blob[:-1] + bytes([blob[-1] ^ 0xFF]))
        else:
            f.write(blob[:8])
    s = Spool(tmp_path, 1 << 20)
    assert s.torn == 1
    assert ids(s.peek(100)) == list(range(5))
    s.append(recs(5, 2))
    s.close()
    assert ids(Spool(tmp_path, 1 << 20).peek(100)) == list(range(7))


def test_garbage_checkpoint_replays_rather_than_breaks(tmp_path: Path) -> None:
    s = Spool(tmp_path, 1 << 20)
    s.append(recs(0, 3))
    s.remove(1)
    s.close()
    (tmp_path / "head").write_text("{not json")
    assert ids(Spool(tmp_path, 1 << 20).peek(10)) == [0, 1, 2]


def test_full_spool_drops_oldest_and_counts(tmp_path: Path) -> None:
    s = Spool(tmp_path, 4096, segment_bytes=512)
    s.append(recs(0, 300))
    kept = ids(s.peek(1000))
    assert s.dropped + len(kept) == 300
    assert s.dropped > 0
    # Whatever is kept is the newest frames, without holes.
    assert kept == list(range(300 - len(kept), 300))
    assert s.bytes <= 4096
    assert sum(p.stat().st_size for p in tmp_path.glob("*.seg")) <= 4096
    s.close()
    s = Spool(tmp_path, 4096, segment_bytes=512)
    assert ids(s.peek(1000)) == kept


class FakeBroker:
    """A Producer whose broker can be switched off; it forgets what it holds on error."""

    def __init__(self) -> None:
        self.down = False
        self.delivered: list[SpoolRecord] = []
        self._held: list[SpoolRecord] = []

    def send(self, topic: str, value: bytes, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        if self.down:
            self._held.clear()
            raise BusError("broker away")
        self._held.append(SpoolRecord(topic, value, key, tuple(headers)))

    def flush(self, timeout_s: float | None = None) -> None:
        if self.down:
            self._held.clear()
            raise BusError("not acknowledged")
        self.delivered += self._held
        self._held.clear()

    def close(self) -> None:
        pass


def spooling(broker: FakeBroker, path: Path, events: list[tuple[str, int]] | None = None,
             max_bytes: int = 1 << 20) -> SpoolingProducer:
    return SpoolingProducer(broker, path, max_bytes, on_event=(
        (lambda name, n: events.append((name, n))) if events is not None else None),
        retry_min_s=0.0, retry_max_s=0.0, segment_bytes=1024)


def test_outage_keeps_every_frame_in_order(tmp_path: Path) -> None:
    broker = FakeBroker()
    events: list[tuple[str, int]] = []
    p = spooling(broker, tmp_path, events)
    for i, r in enumerate(recs(0, 60)):
        broker.down = 20 <= i < 40
        p.send(r.topic, r.value, r.key, r.headers)
        if i % 7 == 0:
            p.flush()
    p.flush()
    assert ids(broker.delivered) == list(range(60))
    assert broker.delivered[5] == recs(5, 1)[0]
    assert p.backlog == 0
    assert p.spooled > 0 and p.replayed == p.spooled
    assert p.sent + p.replayed == 60
    assert p.dropped == 0
    totals: dict[str, int] = {}
    for name, n in events:
        totals[name] = totals.get(name, 0) + n
    assert totals == {"sent": p.sent, "spooled": p.spooled, "replayed": p.replayed}


def test_restarted_producer_replays_what_was_spooled(tmp_path: Path) -> None:
    broker = FakeBroker()
    broker.down = True
    p = spooling(broker, tmp_path)
    for r in recs(0, 25):
        p.send(r.topic, r.value, r.key, r.headers)
    p.close()
    assert broker.delivered == [] and p.spooled == 25
    # A new process on the same spool directory, broker back.
    broker.down = False
    p = spooling(broker, tmp_path)
    assert p.backlog == 25
    for r in recs(25, 5):
        p.send(r.topic, r.value, r.key, r.headers)
    p.flush()
    assert ids(broker.delivered) == list(range(30))


def test_full_spool_counts_dropped_frames(tmp_path: Path) -> None:
    broker = FakeBroker()
    broker.down = True
    events: list[tuple[str, int]] = []
    p = spooling(broker, tmp_path, events, max_bytes=4096)
    for r in recs(0, 300):
        p.send(r.topic, r.value, r.key, r.headers)
    assert p.dropped > 0 and p.dropped + p.backlog == 300
    assert sum(n for name, n in events if name == "dropped") == p.dropped
    broker.down = False
    p.flush()
    assert ids(broker.delivered) == list(range(300 - len(broker.delivered), 300))


def test_unacknowledged_frames_are_spooled_not_lost(tmp_path: Path) -> None:
    broker = FakeBroker()
    p = spooling(broker, tmp_path)
    for r in recs(0, 3):
        p.send(r.topic, r.value, r.key, r.headers)  # accepted, not yet acknowledged
    broker.down = True
    p.flush()  # the acknowledgement fails: the three go to disk
    assert p.backlog == 3 and p.sent == 0
    broker.down = False
    p.flush()
    assert ids(broker.delivered) == [0, 1, 2]


FILE_LIMIT_RUN = """
import resource, sys
from pathlib import Path
from fleetwatch.collectors.spooling import SpoolingProducer
from tests.bus.test_spool import FakeBroker, ids, recs

broker = FakeBroker()
broker.down = True
p = SpoolingProducer(broker, Path(sys.argv[1]), 1 << 20, retry_min_s=0.0, retry_max_s=0.0,
                     segment_bytes=1 << 20)
# As `ulimit -f` (or systemd's LimitFSIZE) does: no file of this process past 3000 bytes.
resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
for r in recs(0, 200):
    p.send(r.topic, r.value, r.key, r.headers)
assert p.write_errors > 0, "the file size limit was never met"
broker.down = False
p.flush()
got = ids(broker.delivered)
print(len(got), p.dropped, p.write_errors, p.backlog)
assert got == sorted(got) and len(set(got)) == len(got), got
assert len(got) + p.dropped == 200 and p.dropped == p.write_errors and p.backlog == 0
"""


def test_a_spool_that_meets_a_file_size_limit_loses_only_the_frames_it_could_not_write(
        tmp_path: Path) -> None:
    """A write refused half way (EFBIG under `ulimit -f`; ENOSPC alike) left bytes in the
    writer that no flush could write and counted the frame as spooled: every later read of
    the spool failed, and the agent never sent again, even once the broker was back. Now
    the frames of a failed write are lost (counted), the rest are replayed in order."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", FILE_LIMIT_RUN, str(tmp_path / "spool")],
                            capture_output=True, text=True, timeout=60, cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    delivered, dropped, errors, backlog = map(int, result.stdout.split())
    assert delivered > 100 and 0 < dropped == errors < 20 and backlog == 0
