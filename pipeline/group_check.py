"""Do the members of one consumer group run with the settings they must share?

Each member of a processors' group judges and notifies the nodes of its own
partitions: a member with other ``[detectors]`` settings judges them by other
rules, one with other alert sinks (no webhook, another Alertmanager, another
alert topic) or alert settings notifies them elsewhere or not at all, one with
another store writes them elsewhere. Nothing else in the group would notice.

So each member hands the group a fingerprint of those settings (short hashes,
one per part: never a URL or a secret itself) with its host and pid, in its
join request (``MemberSettings.encode``: the Kafka consumer's assignor carries
it as its subscription's user data). The group's leader, which sees every
member's, hands back to each member the group's summary (``summarize``: each
distinct fingerprint with the members that run it), and each member compares
it with its own on every assignment (``GroupCheck.assigned``) and logs one
WARNING per part that differs, naming the other members. Members of an older
release send no fingerprint: counted, never taken as different.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# The parts compared, and what each covers, for the warning.
PARTS: dict[str, str] = {
    "detectors": "[detectors] settings (thresholds, durations, enabled rules)",
    "alert_sinks": "alert settings (alerts.webhook_url, alerts.alertmanager_url, "
                   "bus.alert_topic, alerts.keep_firing_s, alerts.instance, alerts.clusters, "
                   "alerts.xid_remedy_label)",
    "store": "store (store.kind and where it is)",
}
# Members named per fingerprint in the summary (the rest are counted).
MAX_NAMED = 10
# A warning said again at most this often while the difference stays the same.
REPEAT_S = 600.0
_VERSION = 1


@dataclass(frozen=True)
class MemberSettings:
    """One member's fingerprint: ``parts`` maps each of ``PARTS`` to a short hash."""

    member: str                     # "host pid N", for people
    parts: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps({"v": _VERSION, "member": self.member, "parts": dict(self.parts)},
                          sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes | None) -> MemberSettings | None:
        """None for a member of an older release (no data) or data not ours."""
        if not data:
            return None
        try:
            raw = json.loads(bytes(data).decode())
            parts = raw["parts"]
            if raw.get("v") != _VERSION or not isinstance(parts, dict):
                return None
            return MemberSettings(str(raw["member"]), {str(k): str(v) for k, v in parts.items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def summarize(datas: Sequence[bytes | None]) -> bytes:
    """What the leader hands every member: each distinct fingerprint with its members
    (``MAX_NAMED`` named, all counted), and how many members sent none."""
    groups: dict[str, dict[str, object]] = {}
    older = 0
    for data in datas:
        ms = MemberSettings.decode(data)
        if ms is None:
            older += 1
            continue
        key = json.dumps(dict(ms.parts), sort_keys=True)
        entry = groups.setdefault(key, {"parts": dict(ms.parts), "members": [], "count": 0})
        entry["count"] = int(entry["count"]) + 1  # type: ignore[call-overload]
        named = entry["members"]
        assert isinstance(named, list)
        if len(named) < MAX_NAMED:
            named.append(ms.member)
    return json.dumps({"v": _VERSION, "older": older,
                       "settings": sorted(groups.values(), key=lambda e: str(e["parts"]))},
                      sort_keys=True).encode()


@dataclass(frozen=True)
class Difference:
    part: str
    members: tuple[str, ...]   # the other members that differ (named ones)
    count: int                 # how many differ in all
    theirs: str
    ours: str


def differences(mine: MemberSettings, summary: bytes | None) -> tuple[list[Difference], int]:
    """The parts in which other members differ from ``mine``, and how many members sent
    no fingerprint; ([], 0) for a summary that is not ours (an older leader)."""
    try:
        raw = json.loads(bytes(summary or b"").decode())
        entries = raw["settings"]
        older = int(raw.get("older", 0))
    except (ValueError, KeyError, TypeError, AttributeError):
        return [], 0
    out: list[Difference] = []
    for part in PARTS:
        ours = mine.parts.get(part, "")
        names: list[str] = []
        count, theirs = 0, set()
        for e in entries:
            value = str(e.get("parts", {}).get(part, ""))
            if value and ours and value != ours:
                names += [str(m) for m in e.get("members", [])]
                count += int(e.get("count", 0))
                theirs.add(value)
        if count:
            out.append(Difference(part, tuple(names[:MAX_NAMED]), count,
                                  ", ".join(sorted(theirs)), ours))
    return out, older


def warning(group: str, me: str, d: Difference) -> str:
    more = f" and {d.count - len(d.members)} more" if d.count > len(d.members) else ""
    return (f"consumer group {group}: {d.count} other member(s) ({', '.join(d.members)}{more}) "
            f"run with different {PARTS[d.part]} than this member ({me}): {d.part} hash "
            f"{d.theirs} there, {d.ours} here. Each member judges, notifies and stores the "
            "nodes of its own partitions, so those nodes' alerts depend on which member owns "
            "them. Give every member the same settings (`fleetwatch config` on each host; a "
            "FLEETWATCH_* variable missing from one host's environment file?)")


class GroupCheck:
    """Compares the group's summary with this member's settings on each assignment; logs a
    WARNING per differing part (again only after ``REPEAT_S`` while unchanged), and keeps
    the differing parts for /metrics (``differing``)."""

    def __init__(self, group: str, mine: MemberSettings,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.group = group
        self.mine = mine
        self._clock = clock
        self._said: dict[tuple[str, str, tuple[str, ...]], float] = {}
        # part -> members that differ in it, as of the last assignment.
        self.differing: dict[str, int] = dict.fromkeys(PARTS, 0)
        self.older = 0

    def assigned(self, summary: bytes | None) -> list[str]:
        """The warnings said for this assignment's summary (and an INFO line for members
        of an older release, which could not be compared: a 0 in ``differing`` is then
        no proof of agreement)."""
        found, self.older = differences(self.mine, summary)
        if self.older:
            log.info("consumer group %s: %d member(s) of an older release could not be "
                     "compared (they send no settings fingerprint); upgrade them to have "
                     "their settings checked", self.group, self.older)
        self.differing = dict.fromkeys(PARTS, 0)
        said: list[str] = []
        now = self._clock()
        for d in found:
            self.differing[d.part] = d.count
            key = (d.part, d.theirs, d.members)
            if now - self._said.get(key, -REPEAT_S * 2) < REPEAT_S:
                continue
            self._said[key] = now
            line = warning(self.group, self.mine.member, d)
            log.warning("%s", line)
            said.append(line)
        return said
