"""The board in each GPU slot of a node, and the events that say when it changes.

``events.EventTracker`` keeps, per slot, the board a frame named last; this module
compares a frame's boards with those: ``gpu_identity`` where a slot's board is new or
changed, ``gpu_replaced`` where another board took its place, ``gpu_moved`` where NVML
numbered the node's boards otherwise (``models.board_places``). Pure, as the tracker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from fleetwatch.frame import Frame, GpuReading, is_board_uuid
from fleetwatch.models.board_places import Placement, Seen, place
from fleetwatch.pipeline.store.base import Event, gpu_device, gpu_index

# A board back in its GPU slot less than this long after it left it was not swapped
# back: two machines under one node name alternate (a real swap back takes longer).
FLAP_S = 600.0


class Board(NamedTuple):
    """The board in a GPU slot: what an RMA asks for ("" where the frame had none)."""

    uuid: str
    serial: str
    pci_bus_id: str
    model: str

    def text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in zip(_WORDS, self[1:]) if v)

    @classmethod
    def of_event(cls, e: Event) -> Board:
        """The board a ``gpu_identity`` event names (its text parsed back; a backend that
        keeps no text, VictoriaMetrics, gives the UUID alone)."""
        said = dict(_said(part) for part in e.text.split(", ") if part)
        return cls(e.value, *(said.get(w, "") for w in _WORDS))


_WORDS = ("serial", "PCI bus id", "model")


def _said(part: str) -> tuple[str, str]:
    for word in _WORDS:
        if part.startswith(word + " "):
            return word, part[len(word) + 1:]
    return "", ""


def board_of(uuid: str, info: Mapping[str, str], model: str) -> Board | None:
    if not is_board_uuid(uuid):
        return None
    return Board(uuid, info.get("serial", ""), info.get("pci_bus_id", ""),
                 "" if model == "unknown" else model)


def board_events(f: Frame, index: int, g: GpuReading, was: Board | None,
                 left: tuple[str, float] | None, out: list[Event]
                 ) -> tuple[Board | None, tuple[str, float] | None]:
    """The board the frame names in this slot, with ``gpu_identity`` / ``gpu_replaced``
    events where it is new or changed (``was`` where the frame names none), and the
    board that last left the slot. A board back within ``FLAP_S`` of leaving is no
    replacement: two machines under one node name alternate their boards frame by frame
    (``node_name_conflict`` says so), which is not a swap each frame."""
    uuid, info = g.uuid, g.info
    if was is not None and uuid == was.uuid and info.get("serial", was.serial) == was.serial \
            and info.get("pci_bus_id", was.pci_bus_id) == was.pci_bus_id:
        return was, left  # the same board (the usual case, per GPU per frame: kept cheap)
    now = board_of(uuid, info, g.model)
    if now is None or now == was:
        return was, left
    if was is not None and now.uuid == was.uuid:
        # The same board: keep what this frame could not read (a serial read that failed).
        now = Board(now.uuid, now.serial or was.serial, now.pci_bus_id or was.pci_bus_id,
                    now.model or was.model)
        if now == was:
            return was, left
    device = gpu_device(index)
    out.append(frame_event(f, device, "gpu_identity", f.ts, value=now.uuid, text=now.text()))
    if was is None or was.uuid == now.uuid:
        return now, left
    back = left is not None and left[0] == now.uuid and f.ts - left[1] < FLAP_S
    if not back:
        out.append(frame_event(f, device, "gpu_replaced", f.ts, value=now.uuid, text=(
            f"GPU {index} on {f.node}: board {was.uuid} ({was.text() or 'no serial'}) "
            f"replaced by {now.uuid} ({now.text() or 'no serial'})")))
    return now, (was.uuid, f.ts)


def placement(f: Frame, before: Mapping[int, Board]) -> Placement | None:
    """How the frame's boards stand against those last seen in the node's slots, where a
    board is in another slot than before, or one is no longer seen (None: each slot holds
    its board, or a first board: the usual case, kept cheap)."""
    named = {g.index: g for g in f.gpus if is_board_uuid(g.uuid)}
    if all(b.uuid == g.uuid for i, g in named.items() if (b := before.get(i)) is not None) \
            and before.keys() <= named.keys():
        return None
    seen = {b.uuid: b for b in before.values()}
    now = {i: Seen(g.uuid, g.info.get("pci_bus_id", "") or (
        seen[g.uuid].pci_bus_id if g.uuid in seen else "")) for i, g in named.items()}
    p = place({i: Seen(b.uuid, b.pci_bus_id) for i, b in before.items()}, now,
              [g.index for g in f.gpus if not is_board_uuid(g.uuid)])
    return p if p.moved or p.missing or p.added or any(
        k != i for i, k in p.replaced.items()) else None


def placed_events(f: Frame, g: GpuReading, before: Mapping[int, Board], p: Placement,
                  was: Board | None, left: tuple[str, float] | None, out: list[Event]
                  ) -> tuple[Board | None, tuple[str, float] | None]:
    """``board_events`` for a frame whose boards NVML numbered otherwise: a board from
    another slot is moved (no replacement: what was learned of it follows it), a new board
    replaces the one gone from its PCI bus id, one that replaced no board is only named."""
    index = g.index
    if index in p.moved:
        k = p.moved[index]
        old = before[k]
        now = board_of(g.uuid, g.info, g.model) or old
        now = Board(now.uuid, now.serial or old.serial, now.pci_bus_id or old.pci_bus_id,
                    now.model or old.model)
        device = gpu_device(index)
        out.append(frame_event(f, device, "gpu_identity", f.ts, value=now.uuid, text=now.text()))
        out.append(frame_event(f, device, "gpu_moved", f.ts, code=k, value=now.uuid, text=(
            f"board {now.uuid} ({now.text() or 'no serial'}) moved from gpu{k} to gpu{index} "
            f"on {f.node}: NVML numbers the node's GPUs otherwise (a board missing, a "
            "firmware or driver change); not a replacement")))
        return now, None
    if index in p.replaced:
        return board_events(f, index, g, before[p.replaced[index]], left, out)
    if index in p.added:
        return board_events(f, index, g, None, left, out)
    return board_events(f, index, g, was, left, out)


def replaced_before(first: Frame, stored: Iterable[Event]) -> list[Event]:
    """The ``gpu_replaced`` events of a node met before its boards could be recalled (the
    store was away): its ``first`` frame's boards against the boards the store last named
    in those slots (their ``gpu_identity`` events before that frame), stamped at it."""
    boards: dict[int, Board] = {}
    for e in sorted(stored, key=lambda e: e.ts):
        index = gpu_index(e.device)
        if e.kind == "gpu_identity" and index is not None and e.ts < first.ts \
                and (e.cluster, e.node) == (first.cluster, first.node):
            boards[index] = Board.of_event(e)
    out: list[Event] = []
    for g in first.gpus:
        was = boards.get(g.index)
        if was is not None:
            board_events(first, g.index, g, was, None, out)
    return [e for e in out if e.kind == "gpu_replaced"]


def frame_event(f: Frame, device: str, kind: str, ts: float, code: int = 0, value: str = "",
                text: str = "") -> Event:
    """An event of ``f``'s node (the tracker's and the boards' alike)."""
    return Event(ts=ts, kind=kind, cluster=f.cluster, rack=f.rack, node=f.node, device=device,
                 code=code, value=value, text=text)
