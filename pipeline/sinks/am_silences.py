"""fleetwatch's silences and acknowledgements, mirrored as Alertmanager silences.

fleetwatch keeps re-sending an alert it already posted to Alertmanager while it
fires, muted or not (else Alertmanager would expire it and page "resolved"), so
its muting must reach Alertmanager as silences of its own:

* a fleetwatch silence → an Alertmanager silence with the same matchers (``rule`` is
  ``alertname`` there; the other labels have the same names and values), plus
  ``scope=~"gpu|node|rack"`` so that it mutes only fleetwatch's alerts (and is never
  refused for matching everything), from its start to its end;
* an acknowledgement of a firing alert → a silence of exactly that alert (an equality
  matcher per label but an XID alert's ``remedy``, so that the ack holds when the alert
  escalates, as it does for fleetwatch's own sinks: ``alertmanager.ack_labels``), valid
  ``ACK_VALID_RESENDS`` resend intervals ahead and renewed by the processor that owns the
  alert, so one that nobody renews (the owner died, the
  alert resolved meanwhile) lapses by itself, as the alert does; the owner expires it
  as soon as the alert resolves, so that its "resolved" is not muted.

Each is made by ``createdBy`` ``fleetwatch/INSTANCE`` (``owner_tag``: the deployment,
``alerts.instance`` or derived from its store, so that setups sharing one Alertmanager tell
their silences apart), its comment starting ``fleetwatch silence ID`` or ``fleetwatch ack
ALERT_ID`` (the key) then `` by WHO[: WHY]``. With ``alerts.clusters`` set, a silence that
names no cluster gets a ``cluster`` matcher for those clusters, so that it does not mute a
node of the same name in another cluster posting to that Alertmanager.

Ownership (``key_of``): fleetwatch changes or expires only a silence that is exactly of
the shape it makes, since ``createdBy`` is free text a person may type too (a shared
"fleetwatch" account in amtool):

* ``createdBy`` is this deployment's ``fleetwatch/INSTANCE``, or ``fleetwatch`` (made by a
  release before the tag: see below), and the comment is ``fleetwatch silence ID`` or
  ``fleetwatch ack ALERT_ID``, the key followed by `` by `` or nothing;
* every matcher names a label fleetwatch posts (``alertname`` and ``LABELS``' others,
  ``scope``);
* a silence's has the ``scope=~"gpu|node|rack"`` matcher fleetwatch adds; an ack's are all
  equality matchers, with ``scope`` one of gpu, node, rack and ``alertname`` the rule
  that starts ALERT_ID.

A silence of the previous release (``createdBy`` ``fleetwatch``, no deployment named) is
taken over, re-tagged as this deployment's, by the one whose store has that silence (or,
for an ack, that owns its alert); no deployment expires one it does not have, which may be
another's: so one a store no longer has stays in Alertmanager until its end.

Any other silence is a person's and left alone, whatever its comment says. The rule
reads only the silence itself: every processor decides the same, with no state kept.

Reconciling is stateless: list Alertmanager's silences, create the missing ones,
expire those fleetwatch no longer has, renew or replace those that differ, and of two
with one key (two processors, a restart mid-way) keep the one with the smallest id, as
every processor chooses. ``plan`` is that decision, pure; ``AlertmanagerSilences`` the
three HTTP calls (``GET /api/v2/silences``, ``POST /api/v2/silences``, ``DELETE
/api/v2/silence/{id}``).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleetwatch.pipeline.silence_matchers import LABELS
from fleetwatch.pipeline.sinks.base import SinkError, iso
from fleetwatch.pipeline.sinks.http import (
    ANSWER_LIMIT,
    AUTH_STATUSES,
    SILENCES_LIMIT,
    ServerURL,
    post_json,
    request,
    unauthorized,
)
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.settings import INSTANCE_NAME

__all__ = ["ACK_VALID_RESENDS", "CREATED_BY", "AlertmanagerSilences", "Plan", "Wanted",
           "ack_wanted", "check_instance", "key_of", "owner_tag", "plan", "silence_wanted",
           "wanted_of", "unseen_clusters", "clusters_warning", "edit_said"]

# The createdBy of the silences of releases before the deployment's tag, and its prefix.
CREATED_BY = "fleetwatch"
# An ack's silence is valid this many resend intervals ahead, like a firing alert's endsAt,
# and renewed at each re-send of the alert (in place: same id).
ACK_VALID_RESENDS = 4
# Only fleetwatch's alerts carry this label (see ``alertmanager.am_labels``).
FLEETWATCH_ONLY = ("scope", "gpu|node|rack", True, True)
_KEY = re.compile(r"^fleetwatch (silence|ack) (\S+)(?: by |$)")
# The labels fleetwatch posts to Alertmanager (``alertmanager.am_labels``).
_NAMES = frozenset({"alertname", *(n for n in LABELS if n != "rule"), "scope"})
_SCOPES = frozenset(FLEETWATCH_ONLY[1].split("|"))

# (name, value, isRegex, isEqual), as in Alertmanager's matcher.
Matcher = tuple[str, str, bool, bool]
_OPS = {"=": (False, True), "!=": (False, False), "=~": (True, True), "!~": (True, False)}


@dataclass(frozen=True)
class Wanted:
    """One Alertmanager silence fleetwatch should have. An existing one with the same key
    and matchers whose end is within [``min_end_ts``, ``max_end_ts``] is kept as it is."""

    key: str                       # "silence ID" or "ack ALERT_ID"
    matchers: tuple[Matcher, ...]  # sorted
    start_ts: float
    end_ts: float
    min_end_ts: float
    max_end_ts: float
    comment: str

    def body(self, now: float, silence_id: str = "", start_ts: float | None = None,
             created_by: str = CREATED_BY) -> dict[str, Any]:
        start = max(self.start_ts, now) if start_ts is None else start_ts
        out: dict[str, Any] = {
            "matchers": [{"name": n, "value": v, "isRegex": r, "isEqual": e}
                         for n, v, r, e in self.matchers],
            "startsAt": iso(start), "endsAt": iso(self.end_ts),
            "createdBy": created_by, "comment": self.comment}
        if silence_id:
            out["id"] = silence_id
        return out


@dataclass(frozen=True)
class Plan:
    create: list[Wanted]
    update: list[tuple[dict[str, Any], Wanted]]  # (the existing silence, what it should be)
    expire: list[str]                             # Alertmanager silence ids


def check_instance(instance: str) -> str:
    """``instance`` if it can name a deployment in ``createdBy``, else ValueError."""
    if not INSTANCE_NAME.match(instance):
        raise ValueError(f"alerts.instance = {instance!r}; must be 1 to 64 letters, digits, "
                         "'.', '_' or '-', starting with a letter or digit (e.g. the "
                         "deployment's name, \"prod-east\")")
    return instance


def owner_tag(instance: str) -> str:
    """The ``createdBy`` of the silences of the deployment named ``instance``."""
    return f"{CREATED_BY}/{check_instance(instance)}"


def _cluster_matcher(clusters: Iterable[str]) -> Matcher:
    names = sorted(set(clusters))
    if len(names) == 1:
        return ("cluster", names[0], False, True)
    return ("cluster", "|".join(re.escape(n) for n in names), True, True)


def unseen_clusters(configured: Iterable[str], seen: Iterable[str]) -> tuple[str, ...]:
    """The ``alerts.clusters`` entries no frame or alert has carried: compared exactly, case
    included, as Alertmanager compares the ``cluster`` matcher with the label."""
    known = set(seen)
    return tuple(sorted({c for c in configured if c not in known}))


def clusters_warning(configured: Iterable[str], seen: Iterable[str]) -> str:
    """The warning for ``unseen_clusters`` ("" when every one was seen)."""
    missing = unseen_clusters(configured, seen)
    if not missing:
        return ""
    known = sorted(set(seen))
    return (f"alerts.clusters names {', '.join(map(repr, missing))}, which no frame or alert "
            f"in the store carries (clusters seen: "
            f"{', '.join(map(repr, known)) if known else 'none yet'}). Mirrored silences "
            "match the cluster label exactly, case included, as Alertmanager does: they "
            f"mute nothing in {', '.join(map(repr, missing))} there while `fleetwatch "
            "alerts` shows them silenced. Correct alerts.clusters (or the agents' "
            "node.cluster) if that is not a cluster still to come")


def _said_by(who: str, why: str) -> str:
    return f" by {who or 'unknown'}" + (f": {why}" if why else "")


def silence_wanted(s: Silence, now: float, clusters: Iterable[str] = ()) -> Wanted | None:
    """The mirror of a fleetwatch silence; None once it has ended (or was expired before
    its start: it ends where it starts). ``clusters``: those of this deployment
    (``alerts.clusters``), matched when the silence names no cluster."""
    if s.end_ts <= max(now, s.start_ts):
        return None
    matchers = [("alertname" if name == "rule" else name, value, *_OPS[op])
                for name, op, value in s.matchers]
    clusters = tuple(clusters)
    if clusters and not any(name == "cluster" for name, _, _ in s.matchers):
        matchers.append(_cluster_matcher(clusters))
    return Wanted(f"silence {s.id}", tuple(sorted({*matchers, FLEETWATCH_ONLY})),
                  s.start_ts, s.end_ts, s.end_ts - 1.0, s.end_ts + 1.0,
                  f"fleetwatch silence {s.id}{_said_by(s.created_by, s.comment)}")


def ack_wanted(alert_labels: Mapping[str, str], alert_id: str, ack: Acknowledgement,
               now: float, resend_s: float) -> Wanted:
    """The silence of one acknowledged alert (its labels as posted to Alertmanager)."""
    valid = ACK_VALID_RESENDS * resend_s
    return Wanted(f"ack {alert_id}",
                  tuple(sorted((k, v, False, True) for k, v in alert_labels.items())),
                  now, now + valid, now + valid - resend_s / 2, now + valid + resend_s,
                  f"fleetwatch ack {alert_id}{_said_by(ack.by, ack.comment)}")


def key_of(silence: Mapping[str, Any], owner: str = CREATED_BY) -> str:
    """The key of a live silence this deployment (``createdBy`` ``owner``) or the previous
    release (``createdBy`` ``fleetwatch``) made, else ""."""
    if silence.get("createdBy") not in (owner, CREATED_BY):
        return ""
    if (silence.get("status") or {}).get("state") == "expired":
        return ""
    m = _KEY.match(silence.get("comment") or "")
    if not m:
        return ""
    try:
        matchers = _matchers(silence)
    except (KeyError, TypeError):
        return ""
    if not matchers or any(name not in _NAMES for name, *_ in matchers):
        return ""
    if m[1] == "silence":
        return f"silence {m[2]}" if FLEETWATCH_ONLY in matchers else ""
    by_name = {name: (value, regex, equal) for name, value, regex, equal in matchers}
    if len(by_name) != len(matchers) or any(regex or not equal
                                            for _, regex, equal in by_name.values()):
        return ""
    scope, rule = by_name.get("scope", ("",))[0], by_name.get("alertname", ("",))[0]
    if scope not in _SCOPES or not rule or not m[2].startswith(rule + "/"):
        return ""
    return f"ack {m[2]}"


def _matchers(silence: Mapping[str, Any]) -> tuple[Matcher, ...]:
    return tuple(sorted((m["name"], m["value"], bool(m.get("isRegex")),
                         bool(m.get("isEqual", True))) for m in silence.get("matchers", ())))


_OP_OF = {flags: op for op, flags in _OPS.items()}


def _shown(m: Matcher) -> str:
    name, value, regex, equal = m
    return f"{name}{_OP_OF[(regex, equal)]}{value}"


def edit_said(have: Mapping[str, Any], w: Wanted) -> str:
    """What differs in Alertmanager's copy ``have`` from fleetwatch's ``w`` (a person's
    edit there keeps fleetwatch's createdBy and comment), in words; "" if nothing."""
    said = []
    end = ts(have["endsAt"])
    if not w.min_end_ts <= end <= w.max_end_ts:
        said.append(f"ends {iso(end)} instead of {iso(w.end_ts)}")
    got, want = set(_matchers(have)), set(w.matchers)
    if got - want:
        said.append("matchers added: " + ", ".join(map(_shown, sorted(got - want))))
    if want - got:
        said.append("matchers removed: " + ", ".join(map(_shown, sorted(want - got))))
    return "; ".join(said)


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def plan(wanted: Iterable[Wanted], have: Iterable[Mapping[str, Any]],
         mine: Callable[[str], bool], owner: str = CREATED_BY,
         ended: Iterable[str] = ()) -> Plan:
    """What to do so that Alertmanager's silences of this deployment (``createdBy``
    ``owner``) are ``wanted``. ``have``: Alertmanager's silences (any; those not this
    deployment's or expired are left alone); ``mine(key)``: may this processor change the
    silences of this key (an ack's are its alert owner's). One of the previous release
    (``createdBy`` ``fleetwatch``) is taken over when its key is wanted, or is an ack that
    ``mine`` says is this processor's; never expired otherwise (it may be another
    deployment's). ``ended``: keys of silences this store has ended (``silence expire``):
    their copies under any ``fleetwatch/*`` instance are expired too, since silence ids are
    unique and a moved store derives a new instance name (its old name's copy would
    otherwise keep muting)."""
    want = {w.key: w for w in wanted}
    gone = set(ended) - set(want)
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    orphans: list[str] = []
    for s in have:
        key = key_of(s, owner)
        if not key:
            by = str(s.get("createdBy") or "")
            if gone and by.startswith(f"{CREATED_BY}/") and key_of(s, by) in gone:
                orphans.append(s["id"])
            continue
        legacy = s.get("createdBy") != owner
        if key in want or (mine(key) and not (legacy and key.startswith("silence "))):
            by_key.setdefault(key, []).append(s)
    out = Plan([], [], sorted(orphans))
    for key, silences in by_key.items():
        # This deployment's first (the smallest id), then the previous release's.
        silences = sorted(silences, key=lambda s: (s.get("createdBy") != owner, s["id"]))
        w = want.get(key)
        if w is None:
            out.expire.extend(s["id"] for s in silences)
            continue
        keep, *extra = silences
        out.expire.extend(s["id"] for s in extra)
        if (_matchers(keep) != w.matchers or keep.get("createdBy") != owner
                or not w.min_end_ts <= ts(keep["endsAt"]) <= w.max_end_ts):
            out.update.append((dict(keep), w))
    out.create.extend(w for key, w in want.items() if key not in by_key)
    return out


class AlertmanagerSilences:
    """Alertmanager's silence API; every failure is a ``SinkError`` (try again later) or,
    for a silence it refuses (400: a regular expression it cannot parse), ``SinkRejected``.
    Requests as ``http`` makes them (basic auth from the URL, a deadline, bounded answers);
    the list of silences may be large: up to ``SILENCES_LIMIT``."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.server = ServerURL.of(base_url.rstrip("/")).join("/api/v2")
        self.base = self.server.shown  # for messages: requests go to self.server.base
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, limit: int = ANSWER_LIMIT) -> Any:
        server = self.server.join(path)
        what = f"Alertmanager {method} {server.shown}"
        status, text, whole = request(server, method, None, self.timeout_s,
                                      f"Alertmanager {method}", limit,
                                      setting="alerts.alertmanager_url")
        if status in AUTH_STATUSES:
            raise unauthorized(server, status, text, f"Alertmanager {method}",
                               "alerts.alertmanager_url")
        if status >= 300:
            said = text.decode("utf-8", "replace").strip()
            raise SinkError(f"{what} answered {status}{': ' + said if said else ''}")
        if not whole:
            raise SinkError(f"{what} answered more than {limit >> 20} MiB, more than "
                            "fleetwatch reads: too many silences, the expired ones included "
                            "(Alertmanager keeps them for its --data.retention, 120h by "
                            "default); shorten --data.retention, or make fewer silences")
        try:
            return json.loads(text) if text.strip() else None
        except ValueError as exc:
            raise SinkError(f"{what}: not JSON: {text[:200]!r}") from exc

    def list(self) -> list[dict[str, Any]]:
        got = self._call("GET", "/silences", SILENCES_LIMIT)
        if not isinstance(got, list):
            raise SinkError(f"Alertmanager GET {self.base}/silences: expected a list")
        return got

    def alerts(self, matcher: str) -> list[dict[str, Any]]:
        """The alerts Alertmanager has (active, silenced or inhibited) that ``matcher``
        (e.g. ``alertname=~"gpu_xid_.*"``) selects: the label sets an adopted alert was
        posted under (``AlertmanagerSink.adopt``). Read up to ``SILENCES_LIMIT``."""
        got = self._call("GET", "/alerts?filter=" + urllib.parse.quote(matcher, safe=""),
                         SILENCES_LIMIT)
        if not isinstance(got, list):
            raise SinkError(f"Alertmanager GET {self.base}/alerts: expected a list")
        return got

    def put(self, body: dict[str, Any]) -> None:
        """Create a silence, or (``id`` in ``body``) change one; Alertmanager replaces a
        silence whose matchers or start change by a new one."""
        post_json(self.server.join("/silences"), body, self.timeout_s,
                  "Alertmanager silences", setting="alerts.alertmanager_url")

    def expire(self, silence_id: str) -> None:
        try:
            self._call("DELETE", "/silence/" + urllib.parse.quote(silence_id, safe=""))
        except SinkError as exc:
            if "already expired" not in str(exc):  # another processor was first
                raise


def wanted_of(silences: Iterable[Silence], acks: Mapping[str, Acknowledgement],
              firing: Iterable[tuple[Alert, Mapping[str, str]]], now: float,
              resend_s: float, clusters: Iterable[str] = ()) -> list[Wanted]:
    """Every silence fleetwatch wants in Alertmanager: one per fleetwatch silence not yet
    ended, one per acknowledged alert of ``firing`` (this processor's, with its labels)."""
    clusters = tuple(clusters)
    out = [w for w in (silence_wanted(s, now, clusters) for s in silences) if w is not None]
    out += [ack_wanted(lab, a.id, acks[a.id], now, resend_s)
            for a, lab in firing if a.id in acks and a.state == "firing"]
    return out
