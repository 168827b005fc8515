"""Faults the simulator can inject, and the ground truth it records for each.

Each kind has a scope (what it happens to: one GPU, a node or a rack), the
modes it comes in (a slow ``drift`` or a ``sudden`` fault) and a severity whose
meaning depends on the kind (``SPECS``). The physics of each lives in
``effects.py``. A ``job_hang`` names a node: the job running there (the first one
to run there after the onset, if none does) hangs on all its nodes, and its
record lists them (``FaultRecord.nodes``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fleetwatch.durations import parse_duration

Mode = Literal["drift", "sudden"]
Scope = Literal["gpu", "node", "rack"]


@dataclass(frozen=True, slots=True)
class KindSpec:
    scope: Scope
    modes: tuple[Mode, ...]       # the first is the default
    severity: float               # default severity
    severity_min: float           # severity must be above this
    meaning: str                  # what the severity means


SPECS: dict[str, KindSpec] = {
    "cooling": KindSpec("gpu", ("sudden", "drift"), 2.0, 1.0,
                        "thermal resistance, times normal (a failed fan or a blocked cold plate)"),
    "cooling_slow": KindSpec("gpu", ("drift",), 1.3, 1.0,
                             "thermal resistance at the end of a slow ramp, times normal; "
                             "the die stays under 80 °C"),
    "rack_cooling": KindSpec("rack", ("drift", "sudden"), 15.0, 0.0,
                             "°C the rack's inlet air warms by"),
    "xid79": KindSpec("gpu", ("sudden", "drift"), 1.0, 0.0,
                      "unused (a drift first shows PCIe replays)"),
    "ecc_dbe": KindSpec("gpu", ("sudden", "drift"), 1.0, 0.0,
                        "1: contained double-bit error (XID 94), row remap pending; "
                        ">= 2: uncontained (XID 95) and the row remap fails (XID 64)"),
    "nvlink": KindSpec("gpu", ("drift", "sudden"), 1.0, 0.0, "error rate, times the default"),
    "stuck": KindSpec("gpu", ("sudden",), 1.0, 0.0, "unused"),
    "straggler": KindSpec("gpu", ("sudden", "drift"), 2.0, 1.0,
                          "the GPU's clock and SM activity are divided by this"),
    "power_brake": KindSpec("gpu", ("sudden", "drift"), 3.0, 1.0,
                            "sudden: HW power brake, clocks divided by this; drift: the "
                            "enforced power limit falls to limit / severity"),
    "sensor": KindSpec("gpu", ("sudden", "drift"), 30.0, 0.0,
                       "drift: °C the die reading falls below the truth; sudden: the "
                       "reading sticks at an impossible 0 or 127 °C"),
    "node_silent": KindSpec("node", ("sudden", "drift"), 1.0, 0.0,
                            "unused (a drift first drops some frames)"),
    "pcie_replay": KindSpec("gpu", ("drift", "sudden"), 50.0, 0.0, "PCIe replays per minute"),
    "job_hang": KindSpec("node", ("sudden",), 1.0, 0.0,
                         "unused (every rank of the node's job blocks in a collective, on all "
                         "its nodes, until the fault ends and the job is killed)"),
}
KINDS: tuple[str, ...] = tuple(SPECS)
FaultKind = str


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault to inject: ``start_s`` after the simulation starts, for ``duration_s``.

    The subject is ``node``/``gpu`` for GPU faults, ``node`` (``gpu`` None) for
    node faults, and ``rack`` (``node`` and ``gpu`` None) for rack faults.
    ``severity`` and ``mode`` None mean the kind's default (``SPECS``).
    ``Fault("cooling", node, gpu, start_s, duration_s)`` works as it always has.
    ``onset_ts`` (epoch s), when set, is the onset whatever the simulation's start: a
    fault a continued run takes over from the store (``fleetwatch up --keep``).
    """

    kind: FaultKind
    node: str | None
    gpu: int | None
    start_s: float = 60.0
    duration_s: float = 3600.0
    severity: float | None = None
    mode: Mode | None = None
    rack: str | None = None
    onset_ts: float | None = None

    def __post_init__(self) -> None:
        spec = SPECS.get(self.kind)
        where = f"fault {self.kind}"
        if spec is None:
            raise ValueError(f"{where}: unknown kind (known: {', '.join(KINDS)})")
        if spec.scope == "gpu" and (self.node is None or self.gpu is None):
            raise ValueError(f"{where}: a GPU fault needs a node and a GPU, e.g. "
                             f"{self.kind}:node-001/3")
        if spec.scope == "node" and (self.node is None or self.gpu is not None):
            raise ValueError(f"{where}: a node fault names a node and no GPU, e.g. "
                             f"{self.kind}:node-001")
        if spec.scope == "rack" and (self.rack is None or self.node is not None
                                     or self.gpu is not None):
            raise ValueError(f"{where}: a rack fault names a rack only, e.g. {self.kind}:rack-01")
        if self.mode is not None and self.mode not in spec.modes:
            raise ValueError(f"{where}: mode {self.mode!r} not available "
                             f"(this kind comes as: {', '.join(spec.modes)})")
        if not (0.0 <= self.start_s < 1e10 and 0.0 < self.duration_s < 1e10):
            raise ValueError(f"{where}: start must be >= 0 and duration > 0 (seconds), got "
                             f"start {self.start_s!r}, duration {self.duration_s!r}")
        if self.onset_ts is not None and not 0.0 <= self.onset_ts < 1e11:
            raise ValueError(f"{where}: onset must be a time (epoch s), got {self.onset_ts!r}")
        if self.severity is not None and not spec.severity_min < self.severity < 1e6:
            raise ValueError(f"{where}: severity must be above {spec.severity_min:g} "
                             f"({spec.meaning}), got {self.severity!r}")

    @property
    def spec(self) -> KindSpec:
        return SPECS[self.kind]

    @property
    def subject(self) -> str:
        """What it happens to, as ``--fault`` writes it: ``node-001/3``, ``node-001``, or
        ``rack-00``."""
        if self.rack is not None:
            return self.rack
        return f"{self.node}" + ("" if self.gpu is None else f"/{self.gpu}")

    @property
    def resolved_mode(self) -> Mode:
        return self.mode or self.spec.modes[0]

    @property
    def resolved_severity(self) -> float:
        return self.spec.severity if self.severity is None else self.severity


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """Ground truth: what was injected, where, and when (epoch s).

    ``first_faulty_ts`` is the time of the first sample the fault changed (None
    while, or if, the fault has not shown in any reading: a stuck fault on a
    GPU that never got a job). ``gpu`` is None for node and rack faults,
    ``node`` None for rack faults. ``nodes``: every node a fault on a job reached
    (a ``job_hang``: its job's nodes, ``node`` among them), ``job`` that job's id;
    empty and None for the other kinds.
    """

    kind: str
    node: str | None
    gpu: int | None
    onset_ts: float
    end_ts: float
    severity: float
    mode: Mode = "sudden"
    rack: str | None = None
    first_faulty_ts: float | None = None
    nodes: tuple[str, ...] = ()
    job: str | None = None

    @property
    def scope(self) -> Scope:
        return SPECS[self.kind].scope


def node_name(index: int) -> str:
    """The simulated fleet's name of its node ``index`` (``FleetSim.node_names``)."""
    return f"node-{index:03d}"


def rack_name(index: int) -> str:
    """The simulated fleet's name of its rack ``index`` (``FleetSim.rack_names``)."""
    return f"rack-{index:02d}"


def _names(first: str, last: str, count: int, noun: str) -> str:
    if count == 1:
        return f"its only {noun} is {first}"
    return f"its {count:,} {noun}s are {first} .. {last}"


class NoSuchSubject(ValueError):
    """A fault on a node, GPU or rack (``missing``) the fleet does not have."""

    def __init__(self, message: str, missing: Scope) -> None:
        super().__init__(message)
        self.missing = missing


def check_subjects(faults: Sequence[Fault], nodes: int, gpus: int, nodes_per_rack: int) -> None:
    """``NoSuchSubject`` for the first fault whose node, GPU or rack a fleet of ``nodes`` x
    ``gpus`` (``nodes_per_rack`` a rack) does not have, naming the ones it has.

    Pure and cheap, so that a command checks its faults before it creates or writes
    anything; ``Effects`` checks the same way. The message starts with the fault as
    ``--fault`` writes it (``cooling:node-009/1: ...``).
    """
    racks = (nodes - 1) // nodes_per_rack + 1
    known = {node_name(i) for i in range(nodes)}
    for f in faults:
        where = f"{f.kind}:{f.subject}"
        if f.rack is not None:
            if f.rack not in {rack_name(r) for r in range(racks)}:
                raise NoSuchSubject(f"{where}: no rack {f.rack} in this fleet: "
                                    f"{_names(rack_name(0), rack_name(racks - 1), racks, 'rack')}",
                                    "rack")
            continue
        if f.node not in known:
            raise NoSuchSubject(f"{where}: no node {f.node} in this fleet: "
                                f"{_names(node_name(0), node_name(nodes - 1), nodes, 'node')}",
                                "node")
        if f.gpu is not None and not 0 <= f.gpu < gpus:
            raise NoSuchSubject(f"{where}: no GPU {f.gpu} on {f.node}: "
                                f"{_names('0', str(gpus - 1), gpus, 'GPU')}", "gpu")


_SPEC = re.compile(
    r"^(?P<kind>[a-z0-9_]+):(?P<subject>[^/@+~]+?)(?:/(?P<gpu>\d+))?"
    r"(?:@(?P<start>(?:[\d.]+[smhd])+|[\d.]+))?(?:\+(?P<dur>(?:[\d.]+[smhd])+|[\d.]+))?"
    r"(?:x(?P<sev>[\d.]+))?"
    r"(?:~(?P<mode>[a-z]+))?$")
SPEC_HELP = ("KIND:NODE/GPU[@START][+DURATION][xSEVERITY][~MODE] (KIND:NODE for node faults, "
             "KIND:RACK for rack faults), e.g. cooling:node-001/3@2m+1h~drift, "
             "rack_cooling:rack-00@1h+2h, node_silent:node-002@3h30m+10m")


def _seconds(spec: str, what: str, text: str) -> float:
    """A fault's START or DURATION: the command line's durations (90s, 5m, 3h30m), or a
    bare number of seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"fault {spec!r}: {what} {exc}") from None


def _which_part(spec: str) -> str:
    """Why ``spec`` does not parse, naming the part: its START or DURATION when one is not
    a duration, else the form expected."""
    m = re.match(r"^[^:@+~]+:[^@+~]*(?:@(?P<start>[^+x~]*))?(?:\+(?P<dur>[^x~]*))?", spec)
    for what, name in (("START", "start"), ("DURATION", "dur")):
        text = m[name] if m else None
        if text is not None:
            _seconds(spec, what, text)
    return f"fault {spec!r}: expected {SPEC_HELP}"


def parse_fault(spec: str) -> Fault:
    """Parse ``SPEC_HELP``'s form into a ``Fault``; a ``ValueError`` says what is wrong."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(_which_part(spec.strip()))
    kind = m["kind"]
    if kind not in SPECS:
        raise ValueError(f"fault {spec!r}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    scope, subject = SPECS[kind].scope, m["subject"]
    if scope == "gpu" and m["gpu"] is None:
        raise ValueError(f"fault {spec!r}: expected KIND:NODE/GPU ({kind} happens to one GPU), "
                         f"e.g. {kind}:node-001/3")
    if scope != "gpu" and m["gpu"] is not None:
        raise ValueError(f"fault {spec!r}: {kind} happens to a whole {scope}: write "
                         f"{kind}:{scope.upper()} without /GPU")
    if m["mode"] and m["mode"] not in ("drift", "sudden"):
        raise ValueError(f"fault {spec!r}: mode must be ~drift or ~sudden, got ~{m['mode']}")
    try:
        sev = float(m["sev"]) if m["sev"] else None
    except ValueError:
        raise ValueError(f"fault {spec!r}: severity {m['sev']!r} is not a number") from None
    try:
        return Fault(kind,
                     subject if scope != "rack" else None,
                     int(m["gpu"]) if m["gpu"] is not None else None,
                     _seconds(spec, "START", m["start"]) if m["start"] else 60.0,
                     _seconds(spec, "DURATION", m["dur"]) if m["dur"] else 3600.0,
                     sev, m["mode"],  # type: ignore[arg-type]
                     subject if scope == "rack" else None)
    except ValueError as exc:
        raise ValueError(f"fault {spec!r}: {str(exc).split(': ', 1)[-1]}") from None
