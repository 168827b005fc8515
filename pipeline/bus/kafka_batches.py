"""A record batch kafka-python cannot decode (``pipeline.bus.kafka``): where it is, and past
which offset the consumer resumes.

A batch compressed with a codec whose library is missing, or one that fails its CRC or
decompression, makes kafka-python's fetcher raise from inside its record generator. The
generator is then finished but still held as the partition's next records, so every
later ``poll`` spins on it without returning (kafka-python 3.0: ``Fetcher._append``
takes 0 records from it again and again). Nothing of the batch can be delivered, so the
consumer seeks past it: that also makes the fetcher drop the dead generator (its offset
no longer matches the position). The partition and the batch are found in the
exception's traceback: the fetcher's ``PartitionRecords._unpack_records`` frame holds
both, and the batch's header (its last offset) is readable without decompressing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

from kafka import TopicPartition


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A batch that cannot be decoded: its partition, first offset, and the offset after it."""

    tp: TopicPartition
    first: int
    next_offset: int
    reason: str


def _frames(tb: TracebackType | None) -> list[dict[str, object]]:
    out = []
    while tb is not None:
        out.append(tb.tb_frame.f_locals)
        tb = tb.tb_next
    return out


def _batch_end(batch: object) -> int | None:
    """The offset after ``batch``, from its header only. A v2 batch names its last offset;
    a legacy (v0/v1) compressed wrapper's own offset is that of its last inner message."""
    for name in ("next_offset", "base_offset"):
        value = getattr(batch, name, None)
        if isinstance(value, int):
            return value if name == "next_offset" else value + 1
    return None


def undecodable(exc: BaseException) -> Undecodable | None:
    """The batch ``exc`` was raised while decoding, or None when it was not raised there
    (a network or broker error). Its first offset is the partition's first not returned."""
    for scope in reversed(_frames(exc.__traceback__)):
        owner = scope.get("self")
        tp = getattr(owner, "topic_partition", None)
        if not isinstance(tp, TopicPartition) or "batch" not in scope:
            continue
        batch = scope["batch"]
        first = getattr(owner, "next_fetch_offset", None)
        if not isinstance(first, int):
            continue
        end = _batch_end(batch)
        # Never stay in place: a batch whose header cannot be read is passed one offset at
        # a time (each step refetches it and fails again, but moves on).
        target = max(end if end is not None else first + 1, first + 1)
        name = type(exc).__name__
        text = str(exc)  # kafka-python's errors name their type already
        return Undecodable(tp, first, target,
                           text if text.startswith(name) else f"{name}: {text}")
    return None
