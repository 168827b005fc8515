"""The samples read from recorded files (``recorded``), gathered by time and node before
they become frames, and what went wrong or was left out on the way: rows bad or late,
samples repeated, zeros read as absent, times written without a zone or going back an
hour where clocks fall back."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetwatch.collectors.nvml.metrics import ZERO_IS_ABSENT
from fleetwatch.recorded_values import BACK_HOUR, fall_back, utc


class ReplayError(ValueError):
    """A recorded file cannot be read; the message names the file and line."""


@dataclass
class Reading:
    """Samples gathered from files, and what went wrong or was left out on the way."""

    # (ts, node) -> gpu (None: host) -> metric -> value
    samples: dict[tuple[float, str], dict[int | None, dict[str, float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(dict)))
    xids: dict[tuple[float, str, int], list[int]] = field(
        default_factory=lambda: defaultdict(list))
    # (node, gpu) -> time -> the last XID seen (XID_ERRORS): events once all are read
    xid_last: dict[tuple[str, int], dict[float, int]] = field(
        default_factory=lambda: defaultdict(dict))
    zero_absent: dict[str, int] = field(default_factory=dict)  # metric -> 0s read as absent
    overshoot: dict[str, int] = field(default_factory=dict)  # metric -> ratios read as 1
    # How long a GPU's samples must stop (its node's going on) to read it as lost, absent
    # an XID 79 (recorded_ticks.mark_lost; detectors.gpu_lost_silent_s).
    lost_silent_s: float = 300.0
    # The readings below key a node by ``place``'s key: its name, unless a node of that name
    # in another cluster was read first (then "cluster/name", its name kept in ``names``).
    places: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (cluster, rack)
    names: dict[str, str] = field(default_factory=dict)  # key -> node name, where not the key
    jobs: dict[tuple[float, str, int], str] = field(default_factory=dict)  # (ts, node, gpu)
    models: dict[tuple[str, int], str] = field(default_factory=dict)  # (node, gpu) -> name
    # (node, gpu) -> (since, UUID, info: serial, pci_bus_id) at each change of the board,
    # in time order, where the files name it (the agent's JSON frames); elsewhere a GPU is
    # "node/gpuN", a stand-in.
    boards: dict[tuple[str, int], list[tuple[float, str, dict[str, str]]]] = field(
        default_factory=dict)

    def place(self, node: str, cluster: str, rack: str) -> str:
        """The key of ``node`` of ``cluster``: a name is a node within its cluster, so a
        same-named node of another cluster is a second node, not the first one's second
        agent (which would mix their series and raise a false node_name_conflict)."""
        key = node
        while key in self.places and (self.places[key][0], self.names.get(key, key)) \
                != (cluster, node):
            key = f"{cluster}/{key}"  # prefixed again in the unlikely case it is taken
        if key not in self.places:
            self.places[key] = (cluster, rack)
            if key != node:
                self.names[key] = node
        return key

    def board(self, ts: float, node: str, gpu: int, uuid: str, info: dict[str, str]) -> None:
        """The board a frame names in a GPU slot; kept where it changes."""
        seen = self.boards.setdefault((node, gpu), [])
        if not seen or seen[-1][1:] != (uuid, info):
            seen.append((ts, uuid, info))
    # (ts, node) -> the GPUs of that frame read as lost (see _mark_lost)
    lost: dict[tuple[float, str], set[int]] = field(default_factory=lambda: defaultdict(set))
    # (ts, node) -> the GPUs the agent's own frame listed (recorded_frames): that frame lists
    # those only, as live, and a GPU it left out is absent, not lost. Other layouts: none.
    listed: dict[tuple[float, str], frozenset[int]] = field(default_factory=dict)
    bad_rows: int = 0
    bad_examples: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The files carry XIDs (an xid row, or an XID_ERRORS file even if all 0): only then can
    # the XID rules say a GPU had none.
    xid_channel: bool = False
    repeats: int = 0          # samples given again (same time, node, GPU and metric)
    conflicts: int = 0        # ... with another value
    conflict_example: str = ""
    conflict_fall_back: bool = False  # ... at a time clocks fall back (``fall_back``)
    naive_times: int = 0      # distinct times written without a zone (read as UTC)
    naive_example: str = ""
    # Series whose times went back by about an hour (a daylight-saving change in local
    # times), the first such row, and each series' newest time (bounded).
    back_hour: int = 0
    back_example: str = ""
    last_ts: dict[tuple[str, ...], float] = field(default_factory=dict)
    unused: dict[str, int] = field(default_factory=dict)  # DCGM field -> rows passed over
    # Streaming (fleetwatch.recorded_stream): rows before ``horizon`` came after their
    # time was replayed; ``sealer`` is called with the newest time read, now and then.
    horizon: float = -math.inf
    late: int = 0
    late_example: str = ""
    sealer: Callable[[float], None] | None = None
    newest: float = -math.inf

    def too_late(self, ts: float, where: str) -> bool:
        """A row older than what was already replayed: counted and passed over."""
        if ts >= self.horizon:
            if ts > self.newest:
                self.newest = ts
                if self.sealer is not None:
                    self.sealer(ts)
            return False
        self.late += 1
        if not self.late_example:
            self.late_example = f"{where} at {utc(ts)}"
        return True

    def went_back(self, ts: float, series: tuple[str, ...], where: str) -> None:
        """Note a series whose time goes back by about an hour (50 to 70 minutes) where
        clocks fall back (``fall_back``), in a file with times written without a zone:
        local times across the end of daylight-saving time do. Elsewhere such a step is
        a fault of the recording, said as rows repeated or passed over."""
        last = self.last_ts.get(series)
        if (last is not None and self.naive_times and BACK_HOUR[0] <= last - ts <= BACK_HOUR[1]
                and fall_back(last)):
            self.back_hour += 1
            if not self.back_example:
                self.back_example = f"{where}: {utc(last)} then {utc(ts)}"
            last = None  # counted once per step: the series goes on from here
        if last is None or ts > last:
            if len(self.last_ts) > 100_000:
                self.last_ts.clear()
            self.last_ts[series] = ts

    def bad(self, where: str, why: str, skip: bool) -> None:
        if not skip:
            raise ReplayError(f"{where}: {why} (fix the row, or pass --skip-bad to skip "
                              "and count such rows)")
        self.bad_rows += 1
        if len(self.bad_examples) < 5:
            self.bad_examples.append(f"{where}: {why}")

    def put(self, ts: float, node: str, gpu: int | None, metric: str, value: float) -> None:
        """One sample; one given again keeps the last, counted (and if its value differs).

        A 0 the agent reads as no reading (``ZERO_IS_ABSENT``) is counted and not kept.
        """
        if value == 0.0 and metric in ZERO_IS_ABSENT:
            self.zero_absent[metric] = self.zero_absent.get(metric, 0) + 1
            return
        metrics = self.samples[(ts, node)][gpu]
        old = metrics.get(metric)
        if old is not None:
            self.repeats += 1
            if old != value:
                self.conflicts += 1
                if not self.conflict_example:
                    where = node if gpu is None else f"{node} GPU {gpu}"
                    self.conflict_example = (f"{where} {metric} at {utc(ts)}: {old:g}, "
                                             f"then {value:g}")
                    self.conflict_fall_back = fall_back(ts)
        metrics[metric] = value
