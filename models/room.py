"""A warm room: the cluster's air, not one GPU's cooling (``room_inlet_hot``).

When the facility's supply air warms (summer free cooling, a CRAH down for the whole
hall), every die warms with it degree for degree at the same power, and the GPUs that
run hot all their life reach their slowdown temperature and throttle: per GPU, that is
a stream of thermal pages about a fault no GPU has. One finding for the cluster says
what it is: the median of its nodes' inlet sensors (``host_inlet_temp_c``, the BMC's),
above ASHRAE TC 9.9's recommended envelope (18-27 °C, ``room_inlet_warn_c``) a warning,
above the allowable limit of class A1 (15-32 °C, ``room_inlet_critical_c``) critical,
back to a warning once the air has stayed ``CLEAR_C`` under that line for
``room_inlet_for_s``.
The median, so that one node's sensor does not make a room; and most racks of the cluster
above the line (each rack's median inlet), so that one rack's cooler (``rack_cooling``'s)
does not either: in a small fleet, the two nodes of one hot rack of four nodes pulled the
median over the line, and a rack's failure read as a hot room.
While it fires, the GPU thermal alerts it explains are held back
(``pipeline.inhibition.inhibited_by``); a GPU hotter than its peers at similar power still
pages. Without inlet sensors it says nothing.

The finding is rack-scoped, named ``ROOM`` (``rack:*``: every rack of the cluster), so
that it travels as a rack alert does and no rack's name can be taken for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fleetwatch.catalogue import THROTTLE_FLAGS
from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.batch import COL, columns, throttle_bits
from fleetwatch.models.rack_inlets import INLET_MAX_C, INLET_MIN_C, median_of

ROOM = "*"             # the finding's rack: the whole cluster's room
STALE_S = 120.0        # a node's inlet reading counts this long after its frame
MIN_NODES = 3          # fewer sensors cannot tell the room from one rack's air
CLEAR_C = 1.0          # a finding holds until the median is this far under its line
_THERMAL = THROTTLE_FLAGS["sw_thermal_slowdown"] | THROTTLE_FLAGS["hw_thermal_slowdown"]
THROTTLE = COL["gpu_throttle_reasons"]


class RoomInlet:
    name = "room_inlet"
    rules = {"room_inlet_hot": ("host_inlet_temp_c",)}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        # (cluster, node) -> (ts, inlet °C, GPUs throttling for heat, GPUs reporting).
        self.nodes: dict[tuple[str, str], tuple[float, float, int, int]] = {}
        # (cluster, node) -> its rack, as its last frame named it.
        self.racks: dict[tuple[str, str], str] = {}
        # Clusters whose finding holds -> its severity: critical drops to warning only once
        # the air has stayed CLEAR_C under the critical line for room_inlet_for_s (a room
        # swinging about 32 °C must not flip it: each flip a new page in Alertmanager).
        self.flagged: dict[str, str] = {}
        # Clusters whose critical finding's air is CLEAR_C under its line -> since when.
        self.calm: dict[str, float] = {}

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self.nodes if k[1] in gone]:
            del self.nodes[key]
            self.racks.pop(key, None)

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        b = columns(frames)
        if not b.frames:
            return []
        hot = (throttle_bits(b.x[..., THROTTLE]) & _THERMAL) != 0
        # Per frame, counted once for the batch: its GPUs throttling for heat, and reporting.
        hot_n = (hot & b.present).sum(axis=1).tolist()
        gpus_n = b.present.sum(axis=1).tolist()
        # Judged at every sample time of the batch: the alert's lifecycle reads a time
        # with frames and no finding as the room cleared.
        at: dict[float, set[str]] = {}
        frames_at: dict[float, list[int]] = {}
        for i, f in enumerate(b.frames):
            frames_at.setdefault(f.ts, []).append(i)
            v = f.host.metrics.get("host_inlet_temp_c")
            if v is None or not INLET_MIN_C <= v <= INLET_MAX_C:  # NaN fails both
                continue
            at.setdefault(f.ts, set()).add(f.cluster)
        out: list[Finding] = []
        for ts in sorted(at):
            for i in frames_at[ts]:
                self._read(b.frames[i], int(hot_n[i]), int(gpus_n[i]))
            out += [f for c in sorted(at[ts]) if (f := self._judge(c, ts)) is not None]
        return out

    def _read(self, f: Frame, hot: int, gpus: int) -> None:
        """One node's inlet reading, and how many of its GPUs throttle for heat."""
        v = f.host.metrics.get("host_inlet_temp_c")
        if v is None or not INLET_MIN_C <= v <= INLET_MAX_C:
            return
        key = (f.cluster, f.node)
        if key in self.nodes and self.nodes[key][0] >= f.ts:
            return  # a repeated or older frame
        self.nodes[key] = (f.ts, float(v), hot, gpus)
        self.racks[key] = f.rack

    def _judge(self, cluster: str, now: float) -> Finding | None:
        """The cluster's finding at ``now`` from its nodes' fresh inlet readings."""
        fresh = [s for (c, _), s in self.nodes.items()
                 if c == cluster and now - s[0] <= STALE_S]
        if len(fresh) < MIN_NODES:
            self.flagged.pop(cluster, None)
            self.calm.pop(cluster, None)
            return None
        median = median_of([s[1] for s in fresh])
        warn, crit = self.c.room_inlet_warn_c, self.c.room_inlet_critical_c
        # Held until clearly under its line: a room hovering at 27 °C is one alert.
        line = warn - CLEAR_C if cluster in self.flagged else warn
        racks_above, racks = self._racks_above(cluster, now, line)
        if median <= line or 2 * racks_above <= racks:
            # Under the line, or a minority of racks above it: their own coolers
            # (``rack_cooling``), not the room.
            self.flagged.pop(cluster, None)
            self.calm.pop(cluster, None)
            return None
        throttling, gpus = sum(s[2] for s in fresh), sum(s[3] for s in fresh)
        severity = self._severity(cluster, now, median)
        hold = f"{self.c.room_inlet_for_s:g} s"
        limit = (f"above the {crit:g} °C allowable limit" if median > crit
                 else f"back under the {crit:g} °C allowable limit, critical until it stays "
                 f"{CLEAR_C:g} °C under it for {hold}" if severity == "critical"
                 else f"above the {warn:g} °C recommended limit" if median > warn
                 else f"held until {CLEAR_C:g} °C under the {warn:g} °C recommended limit")
        return Finding(
            "room_inlet_hot", cluster, ROOM, "", None, now, median,
            f"Cluster {cluster}: the room's air is {median:.1f} °C at the nodes' inlets "
            f"(median of {len(fresh)} nodes), {limit}; {throttling} of {gpus} GPUs "
            "throttle for heat", severity, self.c.room_inlet_for_s, 0.0,
            {"inlet_median_c": round(median, 2), "nodes_judged": len(fresh),
             "racks_above": racks_above, "racks_judged": racks,
             "gpus_thermal_throttling": throttling, "gpus_reporting": gpus,
             "inlet_warn_c": warn, "inlet_critical_c": crit},
            "Facility cooling: check the CRAH/CRAC units' supply air and the chilled water "
            "or economiser setpoints; GPU thermal alerts the room explains are held back "
            "while this fires (a GPU hotter than its peers still pages); cap or move load "
            "if the room keeps warming", "rack")

    def _racks_above(self, cluster: str, now: float, line: float) -> tuple[int, int]:
        """(racks of the cluster whose nodes' median fresh inlet is above ``line``, racks
        with a fresh reading)."""
        by_rack: dict[str, list[float]] = {}
        for key, s in self.nodes.items():
            if key[0] == cluster and now - s[0] <= STALE_S:
                by_rack.setdefault(self.racks.get(key, ""), []).append(s[1])
        above = sum(median_of(v) > line for v in by_rack.values())
        return above, len(by_rack)

    def _severity(self, cluster: str, now: float, median: float) -> str:
        """Critical above the allowable line; once critical, until the air has stayed
        ``CLEAR_C`` under it for ``room_inlet_for_s`` (a room back in the warning band for
        hours is a warning, not a critical alert muting every GPU's for as long)."""
        crit = self.c.room_inlet_critical_c
        severity = "critical" if median > crit else self.flagged.get(cluster, "warning")
        if severity == "critical" and median <= crit - CLEAR_C:
            since = self.calm.setdefault(cluster, now)
            if now - since >= self.c.room_inlet_for_s:
                severity = "warning"
        if severity == "critical" and median > crit - CLEAR_C:
            self.calm.pop(cluster, None)
        if severity == "warning":
            self.calm.pop(cluster, None)
        self.flagged[cluster] = severity
        return severity
