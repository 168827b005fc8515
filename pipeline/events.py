"""Events from frames: what happened to each GPU, kept beside its series.

A frame says what a GPU is at an instant; failure detection and per-job
energy need what changed and when. ``EventTracker.update`` turns frames into
``Event`` records (``pipeline.store.base``), and keeps, per node, only what
it needs to see a change: each GPU's state, throttle mask and job. Pure: no
I/O, no clock; the processor writes the events with the batch.

* ``xid``: one per XID in a frame (``GpuReading.xids``), ``code`` the XID.
  The n-th repeat of one XID on one GPU in one frame is stamped n ms later,
  so that each stays its own event in every store (a store keeps one event
  per identity and millisecond).
* ``gpu_state``: the GPU's state changed (``value``: ok, lost), or the GPU
  left the node's frames (``value``: gone) or came back. A GPU first seen
  in a state other than ok is an event too. A GPU lost after its samples
  stopped (judged minutes later in a recording) is lost from the first frame
  without one: its event is stamped then, as its gpu_lost alert starts then.
  A node met for the first time (a start, a partition taken over) starts from
  each GPU's newest stored state (``recall``): a GPU still lost is not lost again.
* ``throttle``: the ``gpu_throttle_reasons`` bitmask changed; ``code`` the
  new mask, ``text`` its flags' names.
* ``gpu_identity``: the board in a GPU slot as the frame names it (``value`` its
  UUID, ``text`` its serial, PCI bus id and model), at the first frame with the
  GPU's UUID (of the tracker: a processor's start, a partition taken over) and
  whenever any of them changes. A frame without the UUID (NVML could not read it)
  changes nothing. ``board(...)`` gives the last one, for alerts to name it.
* ``gpu_replaced``: the UUID in a GPU slot changed: another board is there
  (``value`` the new UUID, ``text`` the old and new boards). Not at a first sighting,
  nor for a board back less than ``board_events.FLAP_S`` after it left (two machines under one node
  name alternating their frames: ``node_name_conflict``), nor for a board seen in another
  slot of the node before (``gpu_moved``). A new board replaces the one no longer seen at
  its PCI bus id where the frames name it (else at its index): NVML may number it otherwise
  than the board it replaced (``models.board_places``).
* ``gpu_moved``: a board seen before in another GPU slot of the node is in this one: NVML
  numbered the node's GPUs otherwise (a board before it did not enumerate, a firmware or
  driver upgrade) (``value`` its UUID, ``code`` the index it was at, ``text`` both). The
  series stay keyed by GPU index: this event (and ``gpu_identity``) say which board each
  index held when. A board no longer seen at all is named in the ``gone`` event of the
  index the node no longer has (and alerted on: ``gpu_missing``).
* ``job_start`` / ``job_end``: a job started or ended on a GPU (``value``: the job
  id, one per event: each job of a shared GPU has its own). A job already
  running when a GPU is first seen (a processor just started, or a partition
  just assigned) starts at that frame: a reader that wants a job's true start
  takes its earliest ``job_start``.

Frames of one node must come in time order (they do: one partition per
node); a frame older than the node's last one is ignored for changes (its
XIDs still count). ``drop(nodes)`` forgets nodes when their partition is
revoked, so that a rebalance does not leave a stale baseline behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from fleetwatch.catalogue import throttle_flags
from fleetwatch.frame import Frame
from fleetwatch.pipeline.board_events import (
    Board,
    board_events,
    frame_event,
    placed_events,
    placement,
)
from fleetwatch.pipeline.store.base import Event, gpu_device, gpu_index

THROTTLE_METRIC = "gpu_throttle_reasons"
GONE = "gone"

NodeKey = tuple[str, str]  # (cluster, node)


class _Gpu(NamedTuple):
    """A GPU as last seen; replaced, never changed, so that a node's copy is a dict copy."""

    state: str
    job: str | None
    throttle: int | None
    board: Board | None = None
    # The board that last left the slot (its UUID) and when: one back within
    # ``board_events.FLAP_S`` is no replacement.
    left: tuple[str, float] | None = None
    # The first frame of its current run of frames without a metric (None: it has some).
    quiet: float | None = None


@dataclass
class _Node:
    ts: float
    gpus: dict[int, _Gpu] = field(default_factory=dict)
    # The boards the store last named in its slots (``recall``): a board met again after a
    # restart is not new, another one in its slot is a replacement.
    stored: dict[int, Board] = field(default_factory=dict)
    # The state (ok, lost, gone) of the newest ``gpu_state`` event the store holds for each
    # slot (``recall``): the state a GPU first seen here starts from, so that a partition
    # taken over (or a restart) stores no second "lost" for a GPU still lost.
    states: dict[int, str] = field(default_factory=dict)
    # The jobs the store holds open on each slot (``recall``), comma-joined: the first frame
    # ends those it no longer names (a run that stopped wrote no end) and goes on with the
    # rest without starting them again.
    jobs: dict[int, str] = field(default_factory=dict)
    # When the node was last seen before (its newest stored sample, ``recall``): a recalled
    # job its first frame no longer names ended then, not over the time nothing watched.
    seen: float | None = None
    # Boards no longer in any slot (missing, or replaced), by UUID: what an alert about one
    # names.
    left: dict[str, Board] = field(default_factory=dict)
    # The UUIDs of the last frame, where it changed no GPU's place (``_changes``).
    sig: list[str] | None = None


# What ``recall`` read for a node: the boards in its slots, each slot's state, its open jobs.
_Recalled = tuple[dict[int, Board], dict[int, str], dict[int, str]]


class EventTracker:
    """Frames in, events out; per-node state that ``drop`` forgets."""

    def __init__(self) -> None:
        self._nodes: dict[NodeKey, _Node] = {}
        # The nodes as they were before the last update (None: not known then), for undo().
        self._before: dict[NodeKey, _Node | None] = {}
        # Read back, not yet met: the boards and GPU states stored for each node.
        self._recalled: dict[NodeKey, _Recalled] = {}
        self._seen: dict[NodeKey, float] = {}  # read back with them: last seen before

    def unknown(self, frames: Iterable[Frame]) -> list[NodeKey]:
        """Nodes of these frames this tracker has neither met nor ``recall``-ed."""
        return sorted({(f.cluster, f.node) for f in frames} - self._nodes.keys()
                      - self._recalled.keys())

    def recall(self, nodes: Iterable[NodeKey], events: Iterable[Event],
               seen: Mapping[NodeKey, float] | None = None) -> None:
        """The boards, GPU states and open jobs stored for these nodes (their
        ``gpu_identity``, ``gpu_state``, ``job_start`` and ``job_end`` events, any order):
        what their first frames are compared with. ``seen``: when each was last seen (its
        newest stored sample), the end of an open job its first frame no longer names."""
        nodes = list(nodes)
        self._seen.update({k: ts for k, ts in (seen or {}).items() if k in set(nodes)})
        recalled: dict[NodeKey, _Recalled] = {key: ({}, {}, {}) for key in nodes}
        open_jobs: dict[NodeKey, dict[int, set[str]]] = {key: {} for key in nodes}
        for e in sorted(events, key=lambda e: (e.ts, e.kind == "job_start")):
            index = gpu_index(e.device)
            known = recalled.get((e.cluster, e.node))
            if known is None or index is None:
                continue
            if e.kind == "gpu_identity":
                board = known[0][index] = Board.of_event(e)
                for other in [i for i, b in known[0].items()  # it moved here (gpu_moved)
                              if i != index and b.uuid == board.uuid]:
                    del known[0][other]
            elif e.kind == "gpu_state" and e.value:
                known[1][index] = e.value
            elif e.kind == "job_start":
                open_jobs[(e.cluster, e.node)].setdefault(index, set()).update(
                    split_jobs(e.value))
            elif e.kind == "job_end":
                open_jobs[(e.cluster, e.node)].get(index, set()).difference_update(
                    split_jobs(e.value))
        for key, held in open_jobs.items():
            recalled[key][2].update({i: ",".join(sorted(j)) for i, j in held.items() if j})
        self._recalled.update(recalled)

    def update(self, frames: Iterable[Frame]) -> list[Event]:
        """The events these frames make, in frame order; the state moves past them
        (``undo()`` moves it back, when the events could not be stored)."""
        out: list[Event] = []
        self._before = {}
        for f in frames:
            self._xids(f, out)
            key = (f.cluster, f.node)
            node = self._nodes.get(key)
            if node is not None and f.ts < node.ts:
                continue  # late: its changes are already behind us
            if key not in self._before:
                self._before[key] = None if node is None else _copy(node)
            if node is None:
                boards, states, jobs = self._recalled.pop(key, ({}, {}, {}))
                node = self._nodes[key] = _Node(f.ts, stored=boards, states=states, jobs=jobs,
                                                seen=self._seen.pop(key, None))
            self._changes(f, node, out)
            node.ts = f.ts
        return out

    def undo(self) -> None:
        """Forget the last ``update``: the same frames given again make the same events."""
        for key, node in self._before.items():
            if node is None:
                gone = self._nodes.pop(key, None)
                if gone is not None and (gone.stored or gone.states or gone.jobs):
                    self._recalled[key] = (gone.stored, gone.states, gone.jobs)  # as read
                if gone is not None and gone.seen is not None:
                    self._seen[key] = gone.seen
            else:
                self._nodes[key] = node
        self._before = {}

    def drop(self, nodes: Iterable[str | NodeKey]) -> None:
        """Forget these nodes (names, or (cluster, node) pairs); their next frame is a first."""
        wanted = set(nodes)
        for key in [k for k in self._nodes if k in wanted or k[1] in wanted]:
            del self._nodes[key]
        for key in [k for k in self._recalled if k in wanted or k[1] in wanted]:
            del self._recalled[key]
        for key in [k for k in self._seen if k in wanted or k[1] in wanted]:
            del self._seen[key]

    def nodes(self) -> list[NodeKey]:
        return sorted(self._nodes)

    def board(self, cluster: str, node: str, index: int) -> Board | None:
        """The board last seen in this GPU slot (None: no frame has named it)."""
        known = self._nodes.get((cluster, node))
        gpu = known.gpus.get(index) if known is not None else None
        return gpu.board if gpu is not None else None

    def named(self, cluster: str, node: str, uuid: str) -> Board | None:
        """The board of this UUID as last seen on the node, in whichever slot (one missing
        now included)."""
        known = self._nodes.get((cluster, node))
        if known is None:
            return None
        for gpu in known.gpus.values():
            if gpu.board is not None and gpu.board.uuid == uuid:
                return gpu.board
        return known.left.get(uuid)

    @staticmethod
    def _xids(f: Frame, out: list[Event]) -> None:
        for g in f.gpus:
            seen: dict[int, int] = {}
            for code in g.xids:
                n = seen[code] = seen.get(code, -1) + 1
                out.append(frame_event(f, gpu_device(g.index), "xid", f.ts + n / 1000, code=code))

    @staticmethod
    def _changes(f: Frame, node: _Node, out: list[Event]) -> None:
        gpus = node.gpus
        first = not gpus
        present = set()
        before: dict[int, Board] = {}
        placed = None
        sig = [g.uuid for g in f.gpus]
        if sig != node.sig and (bool(node.stored) if first else not _same_places(f, gpus)):
            before = {i: x.board for i, x in gpus.items() if x.board is not None
                      and x.state != GONE} if not first else dict(node.stored)
            placed = placement(f, before)
        for g in f.gpus:
            index = g.index
            present.add(index)
            raw = g.metrics.get(THROTTLE_METRIC)
            mask = None if raw is None else int(raw)
            was = gpus.get(index)
            if was is None:  # first seen: as the store last said it was (else ok, no job)
                was = _Gpu(node.states.get(index, "ok") if first else GONE,
                           node.jobs.get(index) if first else None, mask,
                           node.stored.get(index))
            state, job, throttle, board, left, _ = was
            if placed is None:
                board, left = board_events(f, index, g, board, left, out)
            else:
                board, left = placed_events(f, g, before, placed, board, left, out)
            quiet = None if g.metrics else f.ts if was.quiet is None else was.quiet
            if was.board != board or was.left != left or was.quiet != quiet:
                was = was._replace(board=board, left=left, quiet=quiet)
            if g.state == state and g.job == job and (mask is None or mask == throttle):
                if gpus.get(index) is not was:
                    gpus[index] = was
                continue  # nothing else changed
            device = gpu_device(index)
            if g.state != state:
                since = quiet if g.state == "lost" and quiet is not None else f.ts
                out.append(frame_event(f, device, "gpu_state", since, value=g.state))
            if mask is not None and throttle is not None and mask != throttle:
                out.append(frame_event(f, device, "throttle", f.ts, code=mask,
                                  text=",".join(throttle_flags(mask))))
            if g.job != job:
                # One event per job: a job that shares the GPU (MPS, time slicing) starts
                # and ends on its own, not when a partner comes or goes.
                was_jobs, now_jobs = split_jobs(job), split_jobs(g.job)
                # A recalled job (first frame) ended while no one watched: last seen then.
                end = min(f.ts, node.seen) if first and node.seen is not None else f.ts
                for ended in sorted(was_jobs - now_jobs):
                    out.append(frame_event(f, device, "job_end", end, value=ended))
                for started in sorted(now_jobs - was_jobs):
                    out.append(frame_event(f, device, "job_start", f.ts, value=started))
            gpus[index] = _Gpu(g.state, g.job, throttle if mask is None else mask, board, left,
                               quiet)
        # The frame's boards as last seen, where each GPU's index is its position and each
        # named the board it had: a frame that names them alike changes no place.
        if sig != node.sig:
            node.sig = sig if placed is None and len(gpus) == len(f.gpus) and all(
                g.index == j for j, g in enumerate(f.gpus)) else None
        missing = [] if placed is None else [(i, before[i]) for i in placed.missing]
        for _, b in missing:
            node.left[b.uuid] = b
        for index, was in gpus.items():
            if index not in present and was.state != GONE:
                device = gpu_device(index)
                lost = "".join(f"; board {b.uuid} ({b.text() or 'no serial'}), gpu{i} "
                               "before, is no longer seen" for i, b in missing)
                out.append(frame_event(f, device, "gpu_state", f.ts, value=GONE,
                                  text=f"{device} is no longer in {f.node}'s frames{lost}"))
                for ended in sorted(split_jobs(was.job)):  # cannot be seen running any more
                    out.append(frame_event(f, device, "job_end", f.ts, value=ended))
                gpus[index] = was._replace(state=GONE, job=None)


def _same_places(f: Frame, gpus: Mapping[int, _Gpu]) -> bool:
    """Does each GPU of the frame have the index, and name the board, it had (per frame: the
    usual case, kept cheap)? False asks ``placement``."""
    if len(f.gpus) != len(gpus):
        return False
    for g in f.gpus:
        x = gpus.get(g.index)
        if x is None or x.state == GONE or x.board is not None and x.board.uuid != g.uuid:
            return False
    return True


def _copy(node: _Node) -> _Node:
    return _Node(node.ts, dict(node.gpus), left=dict(node.left))


def split_jobs(value: str | None) -> set[str]:
    """The jobs of a GPU's job value: several jobs on one GPU are comma-joined (frames,
    and events stored before events were per job)."""
    return set(value.split(",")) - {""} if value else set()


def jobs_of(events: Sequence[Event]) -> list[tuple[str, str, str, float, float | None]]:
    """(node, device, job, start, end or None) per job on each GPU, from ``job_start`` /
    ``job_end`` events in time order: what per-job energy attribution reads."""
    open_: dict[tuple[str, str, str, str], float] = {}
    spans: list[tuple[str, str, str, float, float | None]] = []
    for e in sorted(events, key=lambda e: e.ts):
        key = (e.cluster, e.node, e.device, e.value)
        if e.kind == "job_start":
            open_.setdefault(key, e.ts)
        elif e.kind == "job_end" and key in open_:
            spans.append((e.node, e.device, e.value, open_.pop(key), e.ts))
    spans += [(node, device, job, start, None)
              for (_, node, device, job), start in open_.items()]
    return sorted(spans, key=lambda s: (s[3], s[0], s[1]))
