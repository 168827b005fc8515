"""Which board is where after a node's GPUs are numbered again (a reboot, a driver or
firmware upgrade): the boards themselves tell what moved, what was replaced and what is
missing, not the NVML index.

NVML numbers a node's GPUs in PCI bus order at each driver load: a board that does not
enumerate moves every board after it down one index, and a firmware or BIOS change may
number them otherwise. A board is its UUID (serial and PCI bus id beside it): the same UUID
at another index is the same board moved; a new UUID is a replacement of the board that
was at its PCI bus id (or, where a frame names no PCI bus id, at its index) if that one is
no longer seen; and a board seen before that no frame names any more, nor any new board
took the place of, is missing. Pure: per node, per frame; no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

from fleetwatch.frame import Frame, is_board_uuid


class Seen(NamedTuple):
    """A board as a frame names it (its UUID; its PCI bus id, "" where not read)."""

    uuid: str
    pci_bus_id: str = ""


class Placement(NamedTuple):
    """How the boards a frame names stand against those named before (indices are NVML's)."""

    moved: dict[int, int]      # index now -> the index the same board was at
    replaced: dict[int, int]   # index now -> the index of the board it took the place of
    added: list[int]           # indices of boards never seen, that replaced none
    missing: dict[int, str]    # index a board was at -> its UUID: no longer seen

    @property
    def changed(self) -> bool:
        return bool(self.moved or self.replaced or self.added or self.missing)


def place(before: Mapping[int, Seen], now: Mapping[int, Seen],
          unnamed: Collection[int] = ()) -> Placement:
    """The boards ``now`` (index -> board) against ``before``. ``unnamed``: indices of the
    frame's GPUs that name no board (NVML could not read the UUID): a board before that may
    be one of them (its index first, then any) is not missing, only unread."""
    where = {b.uuid: i for i, b in before.items()}
    present = {b.uuid for b in now.values()}
    moved = {i: where[b.uuid] for i, b in now.items()
             if b.uuid in where and where[b.uuid] != i}
    gone = {i: b for i, b in before.items() if b.uuid not in present}
    replaced: dict[int, int] = {}
    added: list[int] = []
    for i, b in sorted(now.items()):
        if b.uuid in where:
            continue
        old = _replaced(i, b, gone, now)
        if old is None:
            added.append(i)
        else:
            replaced[i] = old
            del gone[old]
    for i in sorted(unnamed, key=lambda i: (i not in gone, i)):  # unread, not missing
        if gone:
            del gone[i if i in gone else min(gone)]
    return Placement(moved, replaced, added, {i: b.uuid for i, b in sorted(gone.items())})


def _replaced(index: int, board: Seen, gone: Mapping[int, Seen],
              now: Mapping[int, Seen]) -> int | None:
    """The index of the board no longer seen whose place a new board took: the one at its
    PCI bus id; where either names none, the one at its index. A board at another PCI bus
    id than the one gone from its index took no one's place (a board added, or moved there
    by a renumbering while the board of that bus id is missing)."""
    if board.pci_bus_id:
        for i, old in gone.items():
            if old.pci_bus_id == board.pci_bus_id:
                return i
    old = gone.get(index)
    if old is not None and not (old.pci_bus_id and board.pci_bus_id):
        return index
    return None


class Missing(NamedTuple):
    """A board a node's frames no longer name (nor a new board in its place)."""

    uuid: str
    index: int          # the NVML index it was at in the last frame that named it
    serial: str
    pci_bus_id: str
    model: str
    since: float        # the first frame without it
    before: int         # how many boards the node named then
    now: int            # how many it names now

    def text(self) -> str:
        said = ", ".join(f"{k} {v}" for k, v in (("serial", self.serial),
                                                 ("PCI bus id", self.pci_bus_id),
                                                 ("model", self.model)) if v)
        return f"{self.uuid} ({said})" if said else self.uuid


_Known = dict[str, tuple[str, str, str]]  # UUID -> (serial, PCI bus id, model)


class MissingBoards:
    """Per node, the boards its frames name, and those they no longer name: a board that
    did not enumerate after a reboot (fallen off the bus before NVML loaded, unseated,
    unpowered). One stays missing until a frame names it again, or a new board at its PCI
    bus id (its replacement). Frames of a node come in time order; a late one changes
    nothing."""

    def __init__(self) -> None:
        # (cluster, node) -> (last frame's time, index -> the board named there, what is
        # known of each board, the boards missing by UUID)
        self._nodes: dict[tuple[str, str], tuple[float, dict[int, Seen], _Known,
                                                 dict[str, Missing]]] = {}
        # Boards missing as open alerts said at a start or a takeover (``adopt``), for
        # nodes not met yet.
        self._adopted: dict[tuple[str, str], dict[str, Missing]] = {}

    def adopt(self, boards: Iterable[tuple[str, str, Missing]]) -> None:
        """Boards (cluster, node, board) missing when the store's open alerts were written:
        still missing at the node's first frame unless it names them again, or names
        another board at their PCI bus id (replaced meanwhile)."""
        for cluster, node, m in boards:
            if (cluster, node) not in self._nodes:
                self._adopted.setdefault((cluster, node), {})[m.uuid] = m

    def see(self, f: Frame) -> list[Missing]:
        """The boards of the frame's node missing as of this frame."""
        key = (f.cluster, f.node)
        last = self._nodes.get(key)
        if last is not None:
            ts, before, known, missing = last
            if f.ts < ts:
                return list(missing.values())
            gpus = f.gpus
            if len(gpus) == len(before) and all(
                    (b := before.get(g.index)) is not None and b.uuid == g.uuid for g in gpus):
                self._nodes[key] = (f.ts, before, known, missing)  # the usual case
                return list(missing.values()) if missing else []
        named = {g.index: Seen(g.uuid, g.info.get("pci_bus_id", ""))
                 for g in f.gpus if is_board_uuid(g.uuid)}
        if last is None:
            uuids = {b.uuid for b in named.values()}
            buses = {b.pci_bus_id for b in named.values()}
            missing = {u: m._replace(now=len(named))
                       for u, m in self._adopted.pop(key, {}).items()
                       if u not in uuids and m.pci_bus_id not in buses}
            self._nodes[key] = (f.ts, named, _learn({}, f), missing)
            return list(missing.values())
        known = _learn(known, f)
        # A board's PCI bus id from any frame that gave it (a frame may not).
        now = {i: b._replace(pci_bus_id=b.pci_bus_id or known[b.uuid][1])
               for i, b in named.items()}
        was = {i: b._replace(pci_bus_id=b.pci_bus_id or known.get(b.uuid, ("", "", ""))[1])
               for i, b in before.items()}
        p = place(was, now, [g.index for g in f.gpus if not is_board_uuid(g.uuid)])
        uuids = {b.uuid for b in now.values()}
        buses = {b.pci_bus_id for i, b in now.items() if i in p.added and b.pci_bus_id}
        missing = {u: m for u, m in missing.items()  # back, or replaced at its bus
                   if u not in uuids and not (m.pci_bus_id and m.pci_bus_id in buses)}
        for i, uuid in p.missing.items():
            serial, bus, model = known.get(uuid, ("", "", ""))
            missing[uuid] = Missing(uuid, i, serial, bus, model, f.ts, len(was), len(now))
        missing = {u: m._replace(now=len(now)) for u, m in missing.items()}
        self._nodes[key] = (f.ts, now, known, missing)
        return list(missing.values())

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self._nodes if k[1] in gone]:
            del self._nodes[key]
        for key in [k for k in self._adopted if k[1] in gone]:
            del self._adopted[key]


def _learn(known: _Known, f: Frame) -> _Known:
    out = dict(known)
    for g in f.gpus:
        if is_board_uuid(g.uuid):
            was = out.get(g.uuid, ("", "", ""))
            out[g.uuid] = (g.info.get("serial", "") or was[0],
                           g.info.get("pci_bus_id", "") or was[1],
                           ("" if g.model == "unknown" else g.model) or was[2])
    return out
