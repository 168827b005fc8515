"""Whether an alert change is news to a receiver (the ``Notifier``'s judgement, pure of
I/O): what each receiver was told (state, revision, severity) so that an alert un-muted
again unchanged (its cover or its silence ended) is not paged twice, as Alertmanager's
notification log has it; and the firing alerts un-muted while their subject is clear
again (held by ``keep_firing_s``), paged only if their finding comes back first; and those
un-muted as their rack's alert resolved (its power back), held ``RECOVERY_HOLD_S``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from fleetwatch.pipeline.alert_keys import revision
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.store.base import Alert

# How long a node's alert un-muted as its rack's alert resolves (``rack_silent``: the
# rack's power back) waits, on the stream's clock, before it is paged: the rack resolves
# once enough of its nodes send again, and the others follow within seconds to a boot's
# minute. Paged then if it still fires (that node stayed down); never posted if it
# resolved meanwhile (it was never posted firing).
RECOVERY_HOLD_S = 60.0

# What was forwarded of an alert: (state, muted_by, revision, severity).
Sent = tuple[str, str, float | None, str]


def told(a: Alert) -> tuple[str, float | None, str]:
    """What makes a change of an alert news to a receiver told of it before."""
    return a.state, revision(a), a.severity


class News:
    """What receivers heard of the open alerts, and which of them were un-muted quietly."""

    def __init__(self) -> None:
        # alert id -> (state, revision, severity) a receiver was told (notified unmuted and
        # not reported undelivered, or adopted unmuted): un-muted again unchanged (its
        # cover or its silence ended), it is not paged again.
        self._heard: dict[str, tuple[str, float | None, str]] = {}
        # The firing alerts whose subject the lifecycle judges clear (held by keep_firing_s:
        # ``AlertBook.clearing``), as the processor last said; and those un-muted while
        # clear, so not paged: paged if their finding comes back before they resolve.
        self._clearing: frozenset[str] = frozenset()
        self._quiet_clear: set[str] = set()
        # Alert id -> the stream time until which it is held (un-muted as its rack's alert
        # resolved, never paged: ``hold``).
        self._held: dict[str, float] = {}

    def hold(self, notices: Iterable[Notice], until: float) -> list[Notice]:
        """``notices`` of alerts un-muted as their rack's alert resolved: those that would
        page firing are held until ``until`` (recorded, not paged: ``heard``)."""
        out = []
        for n in notices:
            if n.notify and n.alert.state == "firing":
                self._held[n.alert.id] = until
                n = Notice(n.alert, n.muted_by, heard=True)
            out.append(n)
        return out

    def held_over(self, until: Mapping[str, float]) -> None:
        """Alerts a processor before held (``hold``; taken over un-muted): held until
        ``until`` each, no receiver told of them."""
        for alert_id, end in until.items():
            self._held[alert_id] = end
            self._heard.pop(alert_id, None)

    def clearing(self, ids: Collection[str]) -> None:
        """The firing alerts whose subject is clear again, as the processor says now."""
        self._clearing = frozenset(ids)

    def heard(self, a: Alert) -> None:
        """A receiver was told of ``a`` as it is (adopted un-muted)."""
        self._heard[a.id] = told(a)

    def notified(self, notices: Iterable[Notice]) -> None:
        """These notices are handed to the sinks: a resolved alert is no one's news any
        more; one notified is heard as it is."""
        for n in notices:
            if n.alert.state == "resolved":
                self._heard.pop(n.alert.id, None)
                self._quiet_clear.discard(n.alert.id)
                self._held.pop(n.alert.id, None)
            elif n.notify:
                self._heard[n.alert.id] = told(n.alert)

    def not_told(self, notices: Iterable[Notice]) -> None:
        """A lane gave these up or had them refused: a receiver was not told of them."""
        for n in notices:
            if self._heard.get(n.alert.id) == told(n.alert):
                del self._heard[n.alert.id]

    def forget(self, alert_id: str) -> None:
        """The alert moved to another processor: a later change of it is news here."""
        self._heard.pop(alert_id, None)
        self._held.pop(alert_id, None)

    def notice(self, a: Alert, muted_by: str, seen: Sent | None) -> Notice:
        """The notice of ``a`` muted so; ``heard`` where its muting ended (an inhibition,
        a silence: ``seen`` is what was forwarded last) and either a receiver was told it
        in this state, revision and severity before (one unchanged alert is one page, as
        Alertmanager's notification log has it), or it fires only as ``keep_firing_s``
        holds it, its subject clear again (a node rebooted within its silence): that one
        is paged if its finding comes back before it resolves (``back``). A resolved one
        never told firing (held, or its cover resolved in the same batch) is no news."""
        if (a.state == "resolved" and not muted_by and a.id not in self._heard
                and (a.id in self._held or seen is not None
                     and seen[1].startswith("inhibited:"))):
            return Notice(a, muted_by, heard=True)
        if muted_by or seen is None or not seen[1] or seen[1].startswith("ack:"):
            return Notice(a, muted_by)
        if self._heard.get(a.id) == told(a):
            return Notice(a, muted_by, heard=True)
        if a.state == "firing" and a.id in self._clearing:
            self._quiet_clear.add(a.id)
            return Notice(a, muted_by, heard=True)
        return Notice(a, muted_by)

    def back(self, done: Sequence[Notice], open_alerts: Iterable[Alert],
             sent: Mapping[str, Sent], now: float = float("-inf")) -> list[Notice]:
        """Alerts un-muted while clear (not paged) whose finding came back, and held ones
        (``hold``) whose hold is over at ``now``, un-muted still (``sent``: what was
        forwarded of each): paged now, once."""
        if not self._quiet_clear and not self._held:
            return []
        by_id = {a.id: a for a in open_alerts}
        out, shown = [], {n.alert.id for n in done}
        paged = {n.alert.id for n in done if n.notify}
        for alert_id, until in list(self._held.items()):
            a = by_id.get(alert_id)
            if a is None or a.state != "firing" or alert_id in paged:
                del self._held[alert_id]  # resolved, let go, or changed: notified as such
            elif now >= until:
                del self._held[alert_id]
                seen = sent.get(alert_id)
                if seen is not None and not seen[1]:  # still un-muted: its page is due
                    out.append(Notice(a))
        for alert_id in list(self._quiet_clear):
            a = by_id.get(alert_id)
            if a is None or a.state != "firing":
                self._quiet_clear.discard(alert_id)
                continue
            if alert_id in self._clearing or alert_id in shown:
                continue
            self._quiet_clear.discard(alert_id)
            seen = sent.get(alert_id)
            if seen is not None and not seen[1]:  # still un-muted: its page is due
                out.append(Notice(a))
        return out
