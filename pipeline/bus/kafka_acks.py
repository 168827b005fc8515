"""What a producer's acknowledgements prove (``pipeline.bus.kafka``): an acknowledged
message is delivered only if it went to a partition that the topic still has.

A kafka-python producer keeps its topic metadata across a broker restart: the batches it
holds, and those it makes before its metadata is refreshed, keep the partitions of the
topic as it was. A broker that came back empty (Tansu's memory storage, a disk lost, a
topic deleted and made again) then gets writes for a topic or partitions it does not
have. Kafka refuses them (``UNKNOWN_TOPIC_OR_PARTITION``); Tansu acknowledges them and
keeps nothing that any reader can see, even once the topic is made again. Two signs give
such acknowledgements away, and ``AckLedger`` watches for both:

* an offset that is not above the last one acknowledged for that partition: the
  partition's log started again, so the broker lost it after this client's metadata
  was taken (offsets only grow in a log; this client waits for each acknowledgement
  before it sends the next batch);
* a partition written since the last good flush that the topic, as the client now
  knows it, does not have.

Either one means the messages since the last good flush may be lost: the producer drops
its client and raises ``BusError``, so that the agent's spool sends them again through a
fresh client, after its topics were checked and with fresh metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class AckLedger:
    """The partitions one producer client wrote to, and the last offset acknowledged in each."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], int] = {}
        self._since_flush: set[tuple[str, int]] = set()
        self.lost: str | None = None  # why acknowledged messages may be lost; None: none

    def acked(self, topic: str, partition: int, offset: int) -> None:
        """One acknowledgement (``offset`` -1: none was given, as with ``acks=0``)."""
        tp = (topic, partition)
        self._since_flush.add(tp)
        if offset < 0:
            return
        last = self._last.get(tp)
        if last is not None and offset <= last and self.lost is None:
            self.lost = (f"{topic}/{partition} acknowledged offset {offset}, not above the "
                         f"{last} it acknowledged before: the broker lost that partition's "
                         "log (restarted empty, or the topic was deleted and made again)")
        self._last[tp] = offset

    def written(self) -> dict[str, set[int]]:
        """The partitions written since the last good flush, by topic."""
        out: dict[str, set[int]] = {}
        for topic, partition in self._since_flush:
            out.setdefault(topic, set()).add(partition)
        return out

    def check(self, partitions_of: Callable[[str], Iterable[int] | None]) -> str | None:
        """Why the messages since the last good flush may be lost, or None (then they are
        delivered, and the next flush starts afresh). ``partitions_of``: the topic's
        partitions as the client now knows them (None: it does not know the topic)."""
        if self.lost is not None:
            return self.lost
        for topic, partitions in sorted(self.written().items()):
            known = partitions_of(topic)
            have = set(known) if known is not None else set()
            missing = sorted(partitions - have)
            if missing:
                return (f"{topic}/{missing[0]} acknowledged, but topic {topic} now has "
                        f"{len(have) or 'no'} partitions: the broker lost it and it was "
                        "made again (restarted empty, or deleted), so those writes are lost")
        self._since_flush.clear()
        return None
