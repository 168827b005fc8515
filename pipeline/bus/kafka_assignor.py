"""The consumer group's partition assignor, carrying each member's settings fingerprint.

kafka-python's range assignor, under the same protocol name ("range"), so members of an
older release join the same group and are assigned as before. Each member's join request
carries ``member_data`` (``group_check.MemberSettings``) as its subscription's user data;
the leader puts ``summarize`` of every member's into each member's assignment, and each
member hands what it gets to ``on_group`` (``group_check.GroupCheck.assigned``), from
inside ``poll``. An older leader sends nothing: ``on_group`` gets ``b""``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kafka.coordinator.assignors.abstract import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.coordinator.assignors.range import RangePartitionAssignor

from fleetwatch.pipeline.group_check import summarize

log = logging.getLogger("fleetwatch.pipeline.bus.kafka")

OnGroup = Callable[[bytes], object]


class SettingsRange(RangePartitionAssignor):  # type: ignore[misc]
    """A range assignor instance (kafka-python takes instances as well as classes)."""

    def __init__(self, member_data: bytes, on_group: OnGroup | None) -> None:
        self._data = member_data
        self._on_group = on_group

    def metadata(self, topics: Any) -> ConsumerProtocolSubscription:
        return ConsumerProtocolSubscription(self.version, list(topics), self._data)

    def assign(self, cluster: Any, members: Any) -> dict[str, ConsumerProtocolAssignment]:
        out = RangePartitionAssignor.assign(cluster, members)
        try:
            summary = summarize([getattr(m.metadata, "user_data", None) for m in members])
        except Exception:  # a bug here must not stop the group from forming
            log.exception("cannot summarize the group's settings; members are not compared")
            summary = b""
        return {member: ConsumerProtocolAssignment(a.version, a.assigned_partitions, summary)
                for member, a in out.items()}

    def on_assignment(self, assignment: Any, generation: int) -> None:
        if self._on_group is None:
            return
        try:
            self._on_group(bytes(getattr(assignment, "user_data", b"") or b""))
        except Exception:  # never let the comparison break consuming
            log.exception("cannot compare this member's settings with its group's")
