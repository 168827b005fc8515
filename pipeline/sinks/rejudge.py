"""The open alerts whose muting a batch changes though they did not change themselves,
and an incident's page with its later findings joined in: a mixin of the ``Notifier``
(``pipeline.sinks``), which holds the open alerts, what was forwarded of each and the
stream's time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from fleetwatch.pipeline.alert_keys import Key, revision
from fleetwatch.pipeline.inhibition import PEER_RULES, RACK_DOWN_RULE, same_incident
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.covers import Covers, joined
from fleetwatch.pipeline.sinks.mutes import Mutes
from fleetwatch.pipeline.sinks.news import RECOVERY_HOLD_S, News, Sent
from fleetwatch.pipeline.store.base import Alert


class Rejudging:
    """Open alerts notified again as their muting changes: an inhibiting alert resolved
    (``_uncovered``), a warm room that no longer explains a GPU (``_unexplained``), a
    silence or an acknowledgement added or ended (``_rejudged``)."""

    _open: dict[Key, Alert]
    _sent: dict[str, Sent]
    _news: News
    _mutes: Mutes
    _now: float

    def _joined(self, notices: list[Notice], covers: Covers) -> list[Notice]:
        """One GPU incident, one page (``inhibition.same_incident``): a page is notified with
        the later findings of its incident in it (``incident_joined``), and when such a
        finding fires, muted by the page, the page is notified again with it: the one
        notification the on-call has is updated, no second one opens."""
        out, again = [], {}
        for n in notices:
            a = n.alert
            if a.state == "firing":
                n = replace(n, alert=self._join(a, covers))
                page = n.muted_by.removeprefix("inhibited:")
                again.update((p.id, p) for p in covers.of_gpu(a)
                             if p.id == page and same_incident(p, a))
            out.append(n)
        shown = {n.alert.id for n in out}
        for p in again.values():
            seen = self._sent.get(p.id)
            if p.id not in shown and seen is not None:
                out.append(Notice(self._join(p, covers), seen[1]))
        return out

    def _join(self, a: Alert, covers: Covers) -> Alert:
        """``a`` with the later findings of its incident that it mutes joined in."""
        return joined(a, covers, self._mutes.silences, self._mutes.acks, self._now)

    def _uncovered(self, changes: Sequence[Alert], covers: Covers) -> list[Notice]:
        """Open alerts that an alert resolved in this batch was inhibiting: notified now, as
        Alertmanager does once the source of an inhibition goes, rather than at their own
        next change (a latched XID has none until it resolves)."""
        gone = {f"inhibited:{a.id}" for a in changes if a.state == "resolved"}
        if not gone:
            return []
        # Under a rack-down alert (its power, its switch): its nodes come back seconds apart
        # after it resolves, so each is held a while rather than paged firing at recovery.
        racks = {f"inhibited:{a.id}" for a in changes
                 if a.state == "resolved" and a.rule == RACK_DOWN_RULE}
        under = {a.id for a in self._open.values()
                 if (self._sent.get(a.id) or ("", ""))[1] in racks}
        out = self._remuted({a.id for a in changes}, covers, lambda muted_by: muted_by in gone)
        held = self._news.hold([n for n in out if n.alert.id in under],
                               self._now + RECOVERY_HOLD_S)
        return [*(n for n in out if n.alert.id not in under), *held]

    def _unexplained(self, changes: Sequence[Alert], covers: Covers,
                     done: Sequence[Notice]) -> list[Notice]:
        """Open alerts of a GPU that a warm room was inhibiting, now that it reads hotter
        than its peers (a peer alert opened): notified now, as their room no longer
        explains them."""
        hot = {(a.cluster, a.node, a.device) for a in changes
               if a.rule in PEER_RULES and a.state != "resolved"}
        if not hot:
            return []
        skip = {a.id for a in changes} | {n.alert.id for n in done}
        skip |= {a.id for a in self._open.values() if (a.cluster, a.node, a.device) not in hot}
        return self._remuted(skip, covers, lambda muted_by: muted_by.startswith("inhibited:"))

    def _rejudged(self, changes: Sequence[Alert], done: Sequence[Notice],
                  covers: Covers) -> list[Notice]:
        """Open alerts not in this batch whose muting changed since they were forwarded (a
        silence or an acknowledgement added, a silence ended)."""
        skip = {a.id for a in changes} | {n.alert.id for n in done}
        return self._remuted(skip, covers, lambda muted_by: True)

    def _remuted(self, skip: set[str], covers: Covers,
                 was: Callable[[str], bool]) -> list[Notice]:
        """Open alerts forwarded before (not in ``skip``), muted then as ``was`` accepts,
        whose muting is different now: their notices, and the new muting recorded."""
        out = []
        for a in list(self._open.values()):
            seen = self._sent.get(a.id)
            if a.id in skip or seen is None or not was(seen[1]):
                continue
            n = self._news.notice(
                a, self._mutes.mute(a, covers.of(a), self._now), seen)
            if n.muted_by != seen[1]:
                self._sent[a.id] = (a.state, n.muted_by, revision(a), a.severity)
                out.append(n)
        return out
