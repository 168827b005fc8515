"""Who hears about an alert: labels, silences, inhibition, acknowledgements, grouping.

Pure functions over alerts. They act on notifications, never on the lifecycle:
a silenced or inhibited alert still goes pending → firing → resolved in the
book and the store, as in Alertmanager; only the notifying sinks stay quiet.

* A silence mutes the alerts that match all its matchers while the stream's
  time (the newest frame's, or the alert's own ``updated_ts``, whichever is
  later) is within the silence's range: an alert that stopped changing (a
  latched XID, a silent node) is muted by a silence added after its last
  change, and heard again once the silence ends, unless a receiver was told of it before
  the silence and it has not changed since (state, revision, severity), or its subject is
  clear again by then (firing only as ``keep_firing_s`` holds it: a node rebooted within
  its silence), when it is heard if its finding comes back before it resolves.
* Inhibition: a firing node-down or silent-node alert mutes the GPU alerts of
  its node (they cannot be judged). A cooling failure explains thermal symptoms only
  (``COOLING_EXPLAINS_RULES``: temperatures, thermal throttles; not a GPU hotter than
  its own node's peers, not a power brake): a firing node-cooling alert mutes those of
  its node's GPUs, a firing critical rack alert (rack cooling) those of its rack's GPUs
  and the node-cooling alerts of its rack. The one cause is paged, not its sixteen
  symptoms; a hardware error (XID 79, a DBE, a row remap, a link down) needs its own
  action and still pages.
* A node or rack alert that no processor re-judges any more (its updated time
  ``STALE_COVER_S`` before the alert it would mute: a processor gone, an alert an older
  release left open in the store) mutes nothing: a cover is re-written at least every
  minute while its finding holds.
* On one GPU (same cluster, node and device), a firing alert mutes the alerts it
  explains (``SAME_GPU_COVERS``): a family's critical its warning (one hot GPU: the
  warning is heard first, the critical pages when it comes, the warning stays muted
  while the critical fires: a severity change is heard, twice the same is not), a
  hardware throttle the software thermal throttle and the straggling it causes, the
  critical temperature the thermal throttles (not a power brake), an
  event its consequence (XID 79 the lost GPU; XID 48 the DBE counter, its row remap
  and XIDs 63/94; a link down the XID 74 that reports it). A cause covers only while it
  is heard itself (not silenced, acknowledged or muted): a silence or an acknowledgement
  mutes what it matches, and the alerts it covered are notified on their own. While a
  room alert fires, a cause that Alertmanager's room rule mutes (``ROOM_MUTES_IN_AM``)
  covers nothing, so a GPU hotter than its peers still pages there.
* One hot GPU is one incident: far hotter than its peers (``gpu_hot_vs_peers_critical``)
  and at its slowdown temperature (``gpu_temp_critical``) are two findings of it, each
  critical. Whichever fires first is the page and mutes the other (both stay in the
  book and the store); a notifier shows the later one in the page (``incident_joined``:
  its message and evidence), so the on-call's one notification is updated, and if the
  page resolves first the other is notified then. The order is no label, so Alertmanager
  has no rule for this pair: fleetwatch does not post the muted one.
* A firing room alert (``room_inlet_hot``: the cluster's inlet air above ASHRAE's
  envelope) mutes its cluster's GPU thermal alerts that the room explains: those of a
  GPU with no open alert of being hotter than its peers at similar power (a GPU hotter
  than its peers is its own cooling, and still pages), and no hardware power brake.
* An acknowledged alert is not notified again until it resolves.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.pipeline.alerts import scope_of
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.xids import seen_of

LABELS = ("rule", "severity", "cluster", "rack", "node", "device")
OPS = ("=~", "!~", "!=", "=")
_MATCHER = re.compile(r"^\s*([a-z_]+)\s*(=~|!~|!=|=)\s*(.*?)\s*$")

# Node-scope rules whose firing alert means the node's GPUs cannot be judged.
NODE_DOWN_RULES = frozenset({"node_silent", "node_down"})
# A node alert about the whole node's cooling covers its GPUs' temperature alerts, as a
# rack's covers the rack's.
NODE_COVER_RULES = NODE_DOWN_RULES | {"node_cooling"}
# Node-scope rules that a firing rack alert of the node's rack explains: a rack cooler
# failing warms its nodes' GPUs above their models; it does not silence a node.
RACK_EXPLAINS_RULES = frozenset({"node_cooling"})
# GPU rules a cooling failure (a warm room, a rack's cooler, a node's fans) explains:
# every die follows its air at the same power. Not where the GPU is also hotter than its
# node's peers (``PEER_RULES`` open for it: its own cooling), nor a power brake, nor any
# hardware error (XID, ECC, row remap, NVLink, a lost GPU), which needs its own action.
COOLING_EXPLAINS_RULES = frozenset({"gpu_temp_high", "gpu_temp_critical", "gpu_temp_rising",
                                    "gpu_mem_temp_high", "gpu_hw_slowdown",
                                    "gpu_sw_thermal_slowdown"})
ROOM_RULE = "room_inlet_hot"
ROOM_EXPLAINS_RULES = COOLING_EXPLAINS_RULES
# A node or rack alert written last this long (stream time) before the alert it would
# mute is no longer judged by anyone: it mutes nothing. A firing one is written at least
# every ``alerts.REFRESH_S`` while its finding holds, and resolves ``keep_firing_s`` (5 min
# by default) after it clears.
STALE_COVER_S = 1800.0
PEER_RULES = frozenset({"gpu_hot_vs_peers", "gpu_hot_vs_peers_critical"})
# The rules that Alertmanager's room rule mutes in the room's cluster, with no peer
# exception (a label cannot say "hotter than its peers"; deploy/alertmanager): while the
# room fires, an alert of these rules is no page there, so it covers nothing.
ROOM_MUTES_IN_AM = ROOM_EXPLAINS_RULES - {"gpu_hw_slowdown"}
_BRAKE = THROTTLE_FLAGS["hw_power_brake_slowdown"]


def visible(text: str) -> str:
    """Text people typed (an acknowledgement's or silence's author and comment), each
    character a terminal would act on (ESC, BEL, CR, a bidi override) written as its escape
    (``\\x1b``): a store of an older release may hold such text, refused now at input."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


@dataclass(frozen=True, slots=True)
class Cover:
    """On one GPU, a firing ``cause`` mutes ``effect``. ``cause_xids``: the XID codes of
    which the cause must hold one (none: any); ``effect_xids``: the codes the effect may
    hold (none: any), so an XID alert that also says something new is still heard."""

    cause: str
    effect: str
    cause_xids: frozenset[int] = frozenset()
    effect_xids: frozenset[int] = frozenset()
    # The effect must be a thermal throttle: its reasons say thermal, and no power brake.
    thermal_only: bool = False
    # Two findings of one incident, each paged on its own: the cause covers the effect only
    # if it fired first (``fired_first``), so whichever pages first stays the one page and
    # the later is shown in it (``incident_joined``), in either order.
    first: bool = False


_DBE = frozenset({48})
# The action of the cause covers the effect's: XID 48's "drain, reset, replace if it
# repeats" says more than the DBE counter's; the link down counts the links.
SAME_GPU_COVERS = (
    Cover("gpu_hot_vs_peers_critical", "gpu_hot_vs_peers"),
    # One hot GPU far above its peers and at its slowdown temperature: one incident, one
    # page, whichever finding came first; the other is shown in it.
    Cover("gpu_hot_vs_peers_critical", "gpu_temp_critical", first=True),
    Cover("gpu_temp_critical", "gpu_hot_vs_peers_critical", first=True),
    Cover("gpu_temp_critical", "gpu_hot_vs_peers"),
    Cover("gpu_temp_critical", "gpu_temp_high"),
    Cover("gpu_temp_critical", "gpu_temp_rising"),
    Cover("gpu_temp_high", "gpu_temp_rising"),
    Cover("gpu_mem_temp_critical", "gpu_mem_temp_high"),
    Cover("gpu_hw_slowdown", "gpu_sw_thermal_slowdown"),
    # The driver slowing a GPU at its slowdown temperature: that temperature's doing.
    Cover("gpu_temp_critical", "gpu_hw_slowdown", thermal_only=True),
    Cover("gpu_temp_critical", "gpu_sw_thermal_slowdown"),
    Cover("gpu_hw_slowdown", "gpu_straggler"),
    Cover("gpu_hw_slowdown", "gpu_power_low_vs_peers"),
    Cover("gpu_xid_critical", "gpu_lost", frozenset({79})),
    Cover("gpu_xid_critical", "gpu_ecc_dbe", _DBE),
    Cover("gpu_xid_critical", "gpu_row_remap_pending", _DBE),
    Cover("gpu_xid_critical", "gpu_xid_warning", _DBE, frozenset({63, 94})),
    Cover("gpu_nvlink_down", "gpu_nvlink_errors"),
    Cover("gpu_nvlink_down", "gpu_xid_critical", effect_xids=frozenset({74})),
)
_COVERED_BY: dict[str, tuple[Cover, ...]] = {
    e: tuple(c for c in SAME_GPU_COVERS if c.effect == e)
    for e in {c.effect for c in SAME_GPU_COVERS}}
# The rules whose firing alert may cover another of its GPU's (what a notifier must see).
GPU_COVER_RULES = frozenset(c.cause for c in SAME_GPU_COVERS)


def _codes(alert: Alert) -> set[int]:
    return set(seen_of(alert.evidence)) if alert.evidence else set()


_THERMAL = THROTTLE_FLAGS["hw_thermal_slowdown"] | THROTTLE_FLAGS["sw_thermal_slowdown"]


def _thermal_throttle(alert: Alert) -> bool:
    bits = int(alert.evidence.get("throttle_reasons", 0.0)) if alert.evidence else 0
    return bool(bits & _THERMAL) and not bits & _BRAKE


def fired_first(a: Alert, b: Alert) -> bool:
    """Did ``a`` fire before ``b`` (one not fired yet fires last; a tie goes by id)?"""
    inf = float("inf")
    ta = inf if a.fired_ts is None else a.fired_ts
    tb = inf if b.fired_ts is None else b.fired_ts
    return (ta, a.id) < (tb, b.id)


def _covers(cover: Cover, cause: Alert, effect: Alert) -> bool:
    if cause.rule != cover.cause or (cause.cluster, cause.node, cause.device) != (
            effect.cluster, effect.node, effect.device):
        return False
    if cover.first and not fired_first(cause, effect):
        return False
    if cover.cause_xids and not cover.cause_xids & _codes(cause):
        return False
    if cover.thermal_only and not _thermal_throttle(effect):
        return False
    return not cover.effect_xids or _codes(effect) <= cover.effect_xids


def same_incident(page: Alert, later: Alert) -> bool:
    """Is firing ``page`` the one page of an incident that ``later`` (another finding of it,
    fired after) belongs to (a ``first`` cover of ``SAME_GPU_COVERS``)?"""
    return page.state == "firing" and any(
        c.first and _covers(c, page, later) for c in _COVERED_BY.get(later.rule, ()))


def incident_joined(page: Alert, later: Alert) -> Alert:
    """The page as the on-call sees it once ``later`` (``same_incident``) fired: its message
    adds the later finding's, its evidence the later's values (one it shares with another
    value as ``<later rule>.<key>``), so the page says both without a second one. The
    store keeps each alert as its detector wrote it."""
    evidence = dict(page.evidence)
    for k, v in later.evidence.items():
        if k not in evidence:
            evidence[k] = v
        elif evidence[k] != v:
            evidence[f"{later.rule}.{k}"] = v
    return replace(page, message=f"{page.message}; now also {later.rule}: {later.message}",
                   evidence=evidence)


def labels(alert: Alert) -> dict[str, str]:
    out = {name: str(getattr(alert, name)) for name in LABELS}
    out["scope"] = scope_of(alert)
    return out


def parse_matcher(text: str) -> tuple[str, str, str]:
    """``node=node-001``, ``rule=~gpu_.*``, ``severity!=info`` → (label, op, value)."""
    m = _MATCHER.match(text)
    if not m or m[1] not in (*LABELS, "scope"):
        raise ValueError(f"silence matcher {text!r}: expected LABEL=VALUE, LABEL!=VALUE, "
                         f"LABEL=~REGEX or LABEL!~REGEX with LABEL one of "
                         f"{', '.join((*LABELS, 'scope'))}")
    value = m[3].strip('"')
    if m[2] in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"silence matcher {text!r}: bad regular expression: {exc}") from None
        problem = not_re2(value)
        if problem:
            raise ValueError(f"silence matcher {text!r}: {problem}, which Alertmanager's "
                             "regular expressions (Go's RE2) do not have, so the silence could "
                             "not mute it there; write it without (a regex matches the whole "
                             "value, e.g. rule!~gpu_temp.* instead of rule=~(?!gpu_temp).*)")
    return m[1], m[2], value


# Python syntax that Go's RE2 (Alertmanager's matchers) lacks, after "(?".
_NOT_RE2_GROUPS = (("<=", "a lookbehind (?<=...)"), ("<!", "a negative lookbehind (?<!...)"),
                   ("=", "a lookahead (?=...)"), ("!", "a negative lookahead (?!...)"),
                   (">", "an atomic group (?>...)"), ("(", "a conditional (?(...)...)"),
                   ("P=", "a named backreference (?P=...)"), ("#", "a comment (?#...)"))
_QUANTIFIER_END = re.compile(r"(?:[*+?]|\{\d+(?:,\d*)?\})$")


def not_re2(regex: str) -> str:
    """The first construct of ``regex`` (valid Python) that RE2 refuses, named; "" if none:
    lookaround, backreferences, atomic groups, possessive quantifiers, conditionals,
    comments and ``\\Z``."""
    i, in_class = 0, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            nxt = regex[i + 1:i + 2]
            if not in_class and nxt.isdigit() and nxt != "0":
                return f"a backreference (\\{nxt})"
            if nxt == "Z":
                return "\\Z (write $ or \\z)"
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            if regex[i:i + 1] == "^":
                i += 1
            if regex[i:i + 1] == "]":   # a "]" first in a class is a literal
                i += 1
            continue
        elif c == "(" and regex[i + 1:i + 2] == "?":
            rest = regex[i + 2:]
            for start, name in _NOT_RE2_GROUPS:
                if rest.startswith(start):
                    return name
            flags = _FLAGS.match(rest)
            if flags and set(flags[1]) - set("imsU-"):
                return f"the inline flag(s) {''.join(sorted(set(flags[1]) - set('imsU-')))} " \
                       f"(RE2 has i, m, s and U)"
        elif c == "+" and _QUANTIFIER_END.search(regex[:i]) and not _escaped(regex, i - 1):
            return f"a possessive quantifier ({regex[i - 1]}+)"
        i += 1
    return ""


_FLAGS = re.compile(r"([a-zA-Z-]+)[:)]")


def not_in_alertmanager(silence: Silence) -> str:
    """Why Alertmanager cannot take this silence, or "": a regex that Go's RE2 lacks, in a
    silence stored before fleetwatch refused them. It mutes fleetwatch's own sinks, not
    Alertmanager's notifications."""
    for name, op, value in silence.matchers:
        problem = not_re2(value) if op in ("=~", "!~") else ""
        if problem:
            return (f"{name}{op}{value} has {problem}, which Alertmanager's regular "
                    "expressions (Go's RE2) do not have")
    return ""


def _escaped(regex: str, i: int) -> bool:
    """Is the character at ``i`` escaped (an odd run of backslashes before it)?"""
    n = 0
    while i - n - 1 >= 0 and regex[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def matches(silence: Silence, alert: Alert) -> bool:
    have = labels(alert)
    for name, op, value in silence.matchers:
        got = have.get(name, "")
        if op == "=" and got != value or op == "!=" and got == value:
            return False
        if op in ("=~", "!~") and (re.fullmatch(value, got) is not None) != (op == "=~"):
            return False
    return True


def silenced_by(alert: Alert, silences: Iterable[Silence], at: float | None = None) -> str:
    """The id of a silence in force at ``at`` (never before the alert's own time) that
    matches it, else ""."""
    t = alert.updated_ts if at is None else max(at, alert.updated_ts)
    for s in silences:
        if s.start_ts <= t < s.end_ts and matches(s, alert):
            return s.id
    return ""


def inhibited_by(alert: Alert, open_alerts: Iterable[Alert],
                 heard: Callable[[Alert], bool] | None = None) -> str:
    """The id of a firing alert that covers this one, else "": for a GPU alert, a
    node-down alert of its node, one of its GPU's (``SAME_GPU_COVERS``), or for a thermal
    symptom (``cooling_explains``) of a GPU not hotter than its peers a node-cooling alert
    of its node, a critical rack alert of its rack or a room alert of its cluster; for a
    node alert of ``RACK_EXPLAINS_RULES``, a critical rack alert. (A rack's warning — above
    its peers since fleetwatch first saw it, with no change seen — explains nothing for
    certain: a hot aisle must not mute its GPUs' alerts for as long as it stays hot.) A
    node or rack alert not judged for ``STALE_COVER_S`` before this one covers nothing.

    A cause on the GPU covers only while it is itself heard (``heard``: not silenced,
    acknowledged or muted; none: every firing one is): a silence or an acknowledgement
    mutes what it matches, never another rule's page. Nor does one of ``ROOM_MUTES_IN_AM``
    while a room alert of its cluster fires, even on a GPU hotter than its peers:
    Alertmanager's room rule, which cannot tell, mutes it there."""
    open_alerts = list(open_alerts)
    own = scope_of(alert)
    if own == "node" and alert.rule in RACK_EXPLAINS_RULES:
        return next((a.id for a in open_alerts if a.state == "firing"
                     and a.cluster == alert.cluster and a.rack == alert.rack
                     and scope_of(a) == "rack" and a.severity == "critical"
                     and judged(a, alert)), "")
    if own != "gpu":
        return ""
    covers = _COVERED_BY.get(alert.rule, ())
    thermal = cooling_explains(alert)
    warm = any(a.rule == ROOM_RULE and a.state == "firing" and a.cluster == alert.cluster
               for a in open_alerts)
    cooled, hotter = "", False
    for a in open_alerts:
        if a.cluster != alert.cluster:
            continue
        if a.rule in PEER_RULES and a.node == alert.node and a.device == alert.device:
            hotter = True  # hotter than its peers: no room, rack or node air explains it
        if a.state != "firing":
            continue
        if (any(_covers(c, a, alert) for c in covers) and not (warm and a.rule in ROOM_MUTES_IN_AM)
                and (heard is None or heard(a))):
            return a.id
        scope = scope_of(a)
        if scope == "gpu" or not judged(a, alert):
            continue
        if scope == "node" and a.node == alert.node and a.rule in NODE_DOWN_RULES:
            return a.id
        if cooled or not thermal:
            continue
        if (scope == "node" and a.node == alert.node and a.rule in NODE_COVER_RULES
                or scope == "rack" and a.rack == alert.rack and a.severity == "critical"
                or a.rule == ROOM_RULE):
            cooled = a.id
    return "" if hotter else cooled


def judged(cover: Alert, alert: Alert) -> bool:
    """Is the node or rack alert ``cover`` still judged by a processor, as of ``alert``'s
    time: written less than ``STALE_COVER_S`` before it?"""
    return alert.updated_ts - cover.updated_ts < STALE_COVER_S


def cooling_explains(alert: Alert) -> bool:
    """Could a cooling failure (room, rack, node) be this GPU alert's cause: a thermal rule
    (``COOLING_EXPLAINS_RULES``), and no power brake among its throttle reasons?"""
    if alert.rule not in COOLING_EXPLAINS_RULES:
        return False
    reasons = (alert.evidence or {}).get("throttle_reasons", 0.0)
    return not (int(reasons) & _BRAKE if reasons == reasons else False)


@dataclass(frozen=True, slots=True)
class Notice:
    """An alert change with why it is muted ("" if it is not)."""

    alert: Alert
    muted_by: str = ""
    # Notified before in this state and revision, inhibited since, and no longer (its
    # cover resolved): the record sinks hear it, the receivers that heard it are not paged
    # twice for one unchanged alert (``Notifier``).
    heard: bool = False

    @property
    def notify(self) -> bool:
        """Does a notifying sink (Alertmanager, webhook) tell anyone? Firing, and resolved
        ones that had fired, unless ``heard``; pending and never-fired ones stay in the
        record."""
        if self.muted_by or self.heard:
            return False
        a = self.alert
        return a.state == "firing" or (a.state == "resolved" and a.fired_ts is not None)


def mute(alert: Alert, open_alerts: Iterable[Alert], silences: Sequence[Silence],
         acks: Mapping[str, Acknowledgement], at: float | None = None) -> str:
    """Why this change is not notified: ``silence:ID``, ``inhibited:ID``, ``ack:BY``, or "".
    ``at``: the stream's time now (silences are judged then; see ``silenced_by``). A cause
    on the alert's GPU mutes it only if that cause is not muted itself (``inhibited_by``)."""
    return _mute(alert, list(open_alerts), silences, acks, at, frozenset())


def _mute(alert: Alert, open_alerts: list[Alert], silences: Sequence[Silence],
          acks: Mapping[str, Acknowledgement], at: float | None,
          judging: frozenset[str]) -> str:
    sid = silenced_by(alert, silences, at)
    if sid:
        return f"silence:{sid}"
    inner = judging | {alert.id}

    def heard(cause: Alert) -> bool:  # a cause already being judged (a loop) is not heard
        return cause.id not in inner and not _mute(cause, open_alerts, silences, acks, at,
                                                    inner)

    iid = inhibited_by(alert, open_alerts, heard)
    if iid:
        return f"inhibited:{iid}"
    ack = acks.get(alert.id)
    if ack is not None and alert.state == "firing":
        return f"ack:{ack.by}"
    return ""


def group(alerts: Iterable[Alert], by: Sequence[str] = ("cluster", "rack", "node")
          ) -> dict[tuple[str, ...], list[Alert]]:
    """Alerts grouped by these labels (a rack alert, whose node is "", is its own group)."""
    out: dict[tuple[str, ...], list[Alert]] = defaultdict(list)
    for a in alerts:
        have = labels(a)
        out[tuple(have[k] for k in by)].append(a)
    return dict(out)
