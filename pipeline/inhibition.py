"""Inhibition: which firing alert explains another, so that only the cause is paged.

Pure functions over alerts, used by ``pipeline.silences.mute``.

* A firing node-down or silent-node alert mutes the GPU alerts of its node (they cannot
  be judged). A cooling failure explains thermal symptoms only
  (``COOLING_EXPLAINS_RULES``: temperatures, thermal throttles; not a GPU hotter than
  its own node's peers, not a power brake): a firing node-cooling alert mutes those of
  its node's GPUs, a firing critical rack alert (rack cooling) those of its rack's GPUs
  and the node-cooling alerts of its rack. A firing rack-down alert (``rack_silent``:
  several of a rack's nodes silent together, its power or its switch) mutes the
  ``node_silent`` alerts of its rack, and nothing of its live nodes. The one cause is
  paged, not its sixteen symptoms; a hardware error (XID 79, a DBE, a row remap, a link
  down) needs its own action and still pages.
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
  is heard itself or acknowledged (not silenced, nor muted by anything but a cover on its
  own GPU): an acknowledgement is "I have this GPU", so what its alert explains stays
  muted (an ack pages nothing more); a silence mutes what it matches, and the alerts it
  covered are notified on their own; a cause muted by its GPU's heard cover (the
  incident's page, its family's critical) still covers, as that page explains it all
  (``covers_while_muted``: one hot GPU's temperature warning under a muted
  ``gpu_temp_critical`` is no second page). While a
  room alert fires, a cause that Alertmanager's room rule mutes (``ROOM_MUTES_IN_AM``)
  covers nothing, so a GPU hotter than its peers still pages there.
* One hot GPU is one incident: its die warming at steady power (its cooler failing,
  ``gpu_warming_at_steady_power``), far hotter than its peers (``gpu_hot_vs_peers_critical``)
  and at its slowdown temperature (``gpu_temp_critical``) are findings of it, each
  critical. Whichever fires first is the page and mutes the others (all stay in the
  book and the store); a notifier shows the later one in the page (``incident_joined``:
  its message and evidence), so the on-call's one notification is updated, and if the
  page resolves first the others are notified then. The order is no label, so Alertmanager
  has no rule for these pairs: fleetwatch does not post the muted ones.
* A firing room alert (``room_inlet_hot``: the cluster's inlet air above ASHRAE's
  envelope) mutes its cluster's GPU thermal alerts that the room explains: those of a
  GPU with no open alert of being hotter than its peers at similar power (a GPU hotter
  than its peers is its own cooling, and still pages), and no hardware power brake.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.pipeline.alert_keys import scope_of
from fleetwatch.pipeline.store.base import Alert
from fleetwatch.xids import seen_of

# Node-scope rules whose firing alert means the node's GPUs cannot be judged.
NODE_DOWN_RULES = frozenset({"node_silent", "node_down"})
# A node alert about the whole node's cooling covers its GPUs' temperature alerts, as a
# rack's covers the rack's.
NODE_COVER_RULES = NODE_DOWN_RULES | {"node_cooling"}
# Node-scope rules that a firing rack alert of the node's rack explains: a rack cooler
# failing warms its nodes' GPUs above their models; it does not silence a node.
RACK_EXPLAINS_RULES = frozenset({"node_cooling"})
# The rack alerts about its air, which explain its GPUs' heat and its nodes' cooling. A rack
# whose nodes went silent together (``rack_silent``: its power or its switch) explains no
# live node's heat: it mutes only its silent nodes' ``node_silent`` (``RACK_DOWN_RULES``).
RACK_COOLING_RULES = frozenset({"rack_cooling"})
RACK_DOWN_RULE = "rack_silent"
RACK_DOWN_RULES = frozenset({"node_silent"})
# GPU rules a cooling failure (a warm room, a rack's cooler, a node's fans) explains:
# every die follows its air at the same power. Not where the GPU is also hotter than its
# node's peers (``PEER_RULES`` open for it: its own cooling), nor a power brake, nor any
# hardware error (XID, ECC, row remap, NVLink, a lost GPU), which needs its own action.
COOLING_EXPLAINS_RULES = frozenset({"gpu_temp_high", "gpu_temp_critical", "gpu_temp_rising",
                                    "gpu_warming_at_steady_power", "gpu_mem_temp_high",
                                    "gpu_hw_slowdown", "gpu_sw_thermal_slowdown"})
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
    # A cooler failing under load: its die climbing at steady power on the first faulty
    # sample, then far above its peers and at its limit minutes later; one incident too.
    Cover("gpu_warming_at_steady_power", "gpu_hot_vs_peers_critical", first=True),
    Cover("gpu_hot_vs_peers_critical", "gpu_warming_at_steady_power", first=True),
    Cover("gpu_warming_at_steady_power", "gpu_temp_critical", first=True),
    Cover("gpu_temp_critical", "gpu_warming_at_steady_power", first=True),
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


def inhibited_by(alert: Alert, open_alerts: Iterable[Alert],
                 heard: Callable[[Alert], bool] | None = None) -> str:
    """The id of a firing alert that covers this one, else "": for a GPU alert, a
    node-down alert of its node, one of its GPU's (``SAME_GPU_COVERS``), or for a thermal
    symptom (``cooling_explains``) of a GPU not hotter than its peers a node-cooling alert
    of its node, a critical rack cooling alert of its rack or a room alert of its cluster; for a
    node alert of ``RACK_EXPLAINS_RULES``, a critical rack cooling alert; for a silent node
    (``RACK_DOWN_RULES``), a ``rack_silent`` alert of its rack. (A rack's warning — above
    its peers since fleetwatch first saw it, with no change seen — explains nothing for
    certain: a hot aisle must not mute its GPUs' alerts for as long as it stays hot.) A
    node or rack alert not judged for ``STALE_COVER_S`` before this one covers nothing.

    A cause on the GPU covers only while it is itself heard (``heard``: acknowledged or
    not muted, or muted but by a cover on its own GPU, ``covers_while_muted``; none:
    every firing one is): a silence mutes what it matches, never another rule's page.
    Nor does one of ``ROOM_MUTES_IN_AM`` while a room alert of its cluster fires, even on
    a GPU hotter than its peers: Alertmanager's room rule, which cannot tell, mutes it
    there."""
    open_alerts = list(open_alerts)
    own = scope_of(alert)
    if own == "node" and alert.rule in RACK_DOWN_RULES:
        return next((a.id for a in open_alerts if a.state == "firing"
                     and a.rule == RACK_DOWN_RULE and a.cluster == alert.cluster
                     and a.rack == alert.rack and judged(a, alert)), "")
    if own == "node" and alert.rule in RACK_EXPLAINS_RULES:
        return next((a.id for a in open_alerts if a.state == "firing"
                     and a.cluster == alert.cluster and a.rack == alert.rack
                     and a.rule in RACK_COOLING_RULES and a.severity == "critical"
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
                and a.rule in RACK_COOLING_RULES
                or a.rule == ROOM_RULE):
            cooled = a.id
    return "" if hotter else cooled


def covers_while_muted(cause: Alert, why: str, open_alerts: Iterable[Alert]) -> bool:
    """Does ``cause``, muted so (``why``: a ``silences.mute`` reason), still cover what it
    explains on its GPU? Only where a cover on its own GPU mutes it (``inhibited:ID``: the
    incident's other finding, its family's critical): that cover is heard, and explains
    all that ``cause`` does, so one hot GPU stays one page. Silenced, or muted by a node,
    rack or room alert, it covers nothing (an acknowledged one covers: the caller checks)."""
    cover = why.removeprefix("inhibited:")
    if cover == why:
        return False
    return any(a.id == cover and scope_of(a) == "gpu"
               and (a.cluster, a.node, a.device) == (cause.cluster, cause.node, cause.device)
               for a in open_alerts)


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
