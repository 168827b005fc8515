"""The energy ledger: records and the small interface every store backend implements.

The processor integrates energy once (``fleetwatch.pipeline.energy``) and
writes ledger rows; the dashboard and ``fleetwatch report`` only read them.
A row is the absolute total of one bucket (an hour) for one device of one
node, split by the job, user and team that held it, so writing it again
replaces it: a replayed batch cannot count twice. The integrator's per-device
watermark (``DeviceState``) is written with the rows, in the same request, so
a processor that takes over a node resumes exactly where the last one stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

# Device names of the node-level rows: the CPU packages (RAPL) and the rest of the
# node (fans, NICs, memory, storage: a static model per node from config).
CPU_DEVICE = "cpu"
REST_DEVICE = "rest"
# The watermark of a node's host readings (CPU power, the node's own clock).
HOST_DEVICE = "host"
# The watermark of the node's latest frame whose GPU list is NVML's answer (not a frame
# sent while its driver was away, host_nvml_up 0): a GPU missing from such a list is absent.
LISTED_DEVICE = "gpus_listed"

# Ledger buckets: hourly, the resolution of grid-intensity series (EIA, electricityMaps).
BUCKET_S = 3600


def bucket_floor(ts: float) -> int:
    """The start of the bucket that holds ``ts``."""
    return int(ts // BUCKET_S) * BUCKET_S


# How far back a backend must find a node's watermark. A node silent for longer resumes
# without one: its first interval after the silence is neither integrated nor counted.
STATE_LOOKBACK_S = 7 * 86_400

ENERGY_FIELDS = ("energy_j", "idle_j", "seconds", "idle_s", "missing_s", "over_tdp_s")
# The fields of energy measured by the counter across a gap (``EnergyRow.gap_j``): stored
# beside ENERGY_FIELDS; a store written before them reads them as 0.
GAP_FIELDS = ("gap_j", "gap_s", "gaps", "longest_gap_s")
ROW_FIELDS = ENERGY_FIELDS + GAP_FIELDS


class EnergyRow(NamedTuple):
    """One bucket of one device's energy, for one (job, user, team).

    ``seconds``: device-seconds covered by measurements; ``missing_s``: time
    inside the bucket with no usable measurement (a gap longer than
    ``energy.max_gap_s``, a lost GPU), never filled with invented power.
    ``idle_j`` / ``idle_s``: the part spent powered but doing no work.
    ``over_tdp_s``: time the board drew more than ``energy.tdp_w``.

    Across a gap longer than ``energy.max_gap_s`` whose energy counter is sound (it
    went on from the same reading, at a mean power the board can draw), the counter's
    step is booked as measured, spread evenly over the gap's hours (where in the gap
    it was drawn is not known): ``gap_j`` is that part of ``energy_j``, ``gap_s`` the
    gap's time (in neither ``seconds`` nor ``missing_s``). ``gaps`` counts the gaps that
    end in the bucket (a shared GPU's share of one), ``longest_gap_s`` is the longest of
    them. Rows stored before these fields existed read 0.
    """

    bucket_ts: int          # start of the bucket, seconds since the epoch, UTC
    cluster: str
    rack: str
    node: str
    device: str             # gpu3, cpu, rest
    job: str                # "" when no job held it
    user: str
    team: str
    energy_j: float
    idle_j: float
    seconds: float
    idle_s: float
    missing_s: float
    over_tdp_s: float
    gap_j: float = 0.0
    gap_s: float = 0.0
    gaps: float = 0.0
    longest_gap_s: float = 0.0


class DeviceState(NamedTuple):
    """Where the integrator stands on one device: the last sample it integrated up to.

    ``counter_j`` is the watermark of NVML's energy counter: its reading plus what the
    power samples booked while it stood still (what a processor of any release resumes
    from). ``reading_j`` is the reading itself where the two differ (None: they do not),
    so that a processor taking over keeps the owed part apart and takes the next, still
    frozen, reading for a counter that stands still rather than one that went down."""

    cluster: str
    node: str
    device: str
    ts: float
    power_w: float | None      # None: the device reported no power
    counter_j: float | None    # NVML total energy counter; None: not supported
    reading_j: float | None = None  # the counter's own reading, where it owes energy


# What ``energy_totals`` can group by (besides the hour).
TOTAL_KEYS = ("cluster", "rack", "node", "job", "user", "team")
# What it can also group by within each cluster (``per_cluster``): what a top list needs
# to price each cluster's part with its own grid and PUE (carbon.clusters), and what tells
# a rack from its namesake in another cluster (the facility page's energy per rack).
CLUSTER_KEYS = ("job", "user", "rack")


class EnergyTotal(NamedTuple):
    """The sum of an hour's rows that share one value of a ``TOTAL_KEYS`` column."""

    bucket_ts: int
    name: str
    energy_j: float        # every device: GPUs, CPUs, the rest of the node
    idle_j: float
    gpu_energy_j: float
    gpu_s: float
    idle_s: float
    missing_s: float       # GPU time without a usable measurement
    over_tdp_s: float
    cluster: str = ""      # totals per cluster (``per_cluster``): their cluster; else ""


class TopLine(NamedTuple):
    """One job's (user's, ...) part of a window, for a "top N" list."""

    name: str
    energy_j: float
    co2e_kg: float       # energy priced at each hour's kg CO2e per kWh
    gpu_s: float
    idle_j: float
    gpu_energy_j: float
    idle_s: float = 0.0  # GPU seconds idle: with gpu_s, the idle share of its GPU time
    cluster: str = ""    # of a line per cluster (a job: ids restart per cluster); else ""


def top_from_totals(totals: Sequence[EnergyTotal], kg_per_kwh: Mapping[tuple[str, int], float],
                    limit: int, per_cluster: bool = False) -> list[TopLine]:
    """``energy_top`` for a backend without one of its own: from the hourly totals per
    cluster (``energy_totals(..., per_cluster=True)``), each priced at its (cluster, hour)."""
    acc: dict[tuple[str, str], list[float]] = {}
    for t in totals:
        a = acc.setdefault((t.cluster if per_cluster else "", t.name), [0.0] * 6)
        a[0] += t.energy_j
        a[1] += t.energy_j / 3.6e6 * kg_per_kwh.get((t.cluster, t.bucket_ts), 0.0)
        a[2] += t.gpu_s
        a[3] += t.idle_j
        a[4] += t.gpu_energy_j
        a[5] += t.idle_s
    lines = sorted((TopLine(n, *a, cluster=c) for (c, n), a in acc.items()),
                   key=lambda x: -x.energy_j)
    return lines[:limit]


def check_keys(by: str, per_cluster: bool) -> None:
    """Refuse a ``by`` a backend cannot group by (it is put into a query)."""
    if by not in TOTAL_KEYS:
        raise ValueError(f"energy_totals by {by!r}: one of {', '.join(TOTAL_KEYS)}")
    if per_cluster and by not in CLUSTER_KEYS:
        raise ValueError(f"energy totals per cluster by {by!r}: one of "
                         f"{', '.join(CLUSTER_KEYS)}")


class EnergyStore(Protocol):
    """The ledger part of a store (``SqliteStore``, ``VictoriaMetricsStore``)."""

    def write_energy(self, rows: Sequence[EnergyRow], states: Sequence[DeviceState]) -> None:
        """Replace these rows (absolute totals) and states; both land, or neither does.
        A rewrite of a row comes with its node's newer watermark (the integrator's
        order), which is what orders rewrites on a server that keeps every sample.
        Raises ``StoreError`` when the store cannot take them now."""

    def energy_state(self, cluster: str, node: str, at_ts: float
                     ) -> tuple[list[DeviceState], list[EnergyRow]]:
        """A node's watermarks as of ``at_ts`` (a backend may look back only so far:
        ``STATE_LOOKBACK_S``) and its rows from the oldest watermark's bucket on."""

    def energy(self, start_ts: float, end_ts: float, cluster: str | None = None,
               node: str | None = None) -> list[EnergyRow]:
        """Rows whose bucket starts in [start, end), oldest first."""

    def energy_totals(self, start_ts: float, end_ts: float, by: str,
                      per_cluster: bool = False) -> list[EnergyTotal]:
        """Per hour in [start, end) and value of ``by`` (one of ``TOTAL_KEYS``): what the
        dashboard draws, summed by the store rather than row by row in Python.
        ``per_cluster`` (``by`` one of ``CLUSTER_KEYS``): per hour, cluster and value."""

    def energy_top(self, start_ts: float, end_ts: float, by: str,
                   kg_per_kwh: Mapping[tuple[str, int], float], limit: int,
                   per_cluster: bool = False) -> list[TopLine]:
        """The ``limit`` largest values of ``by`` (one of ``CLUSTER_KEYS``) over [start, end)
        by energy, each with its CO2e: each cluster's part of it at ``kg_per_kwh`` of that
        (cluster, hour). ``per_cluster``: a line per cluster and value (job ids restart in
        each cluster), else one per value summed over clusters (a user is the same person)."""


class OwnedAlert(Protocol):
    """What ``job_owners`` reads of an alert (``base.Alert`` has it)."""

    @property
    def jobs(self) -> tuple[str, ...]: ...
    @property
    def users(self) -> tuple[str, ...]: ...
    @property
    def teams(self) -> tuple[str, ...]: ...


def job_owners(rows: Iterable[EnergyRow], alerts: Iterable[OwnedAlert], job: str
               ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Whom ``job`` belongs to, as the agent read it from the scheduler: the users and
    teams of its energy ledger rows (one owner per row: a shared GPU's are split), else
    those its alerts carry (a store with no ledger); each once, ((), ()) if unknown."""
    users: dict[str, None] = {}
    teams: dict[str, None] = {}
    for r in rows:
        if r.job == job:
            users.update(dict.fromkeys(x for x in (r.user,) if x))
            teams.update(dict.fromkeys(x for x in (r.team,) if x))
    if not users and not teams:
        for a in alerts:
            if a.jobs == (job,):  # a shared GPU's alert names several owners: not this one's
                users.update(dict.fromkeys(a.users))
                teams.update(dict.fromkeys(a.teams))
    return tuple(users), tuple(teams)


def owner_text(owners: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """``alice · team vision``: whom the job belongs to (``job_owners``), only
    what the store knows; "" if nothing."""
    users, teams = owners
    return " · ".join([*([", ".join(users)] if users else []),
                       *([f"team {', '.join(teams)}"] if teams else [])])

