"""The GPU boards and jobs a processor recalls from the store for the nodes it meets for
the first time (a start, a partition taken over), and the board an alert names. A mixin of
``Processor``, whose constructor sets the state it reads."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from fleetwatch.frame import Frame
from fleetwatch.pipeline import job_recall
from fleetwatch.pipeline.batches import Stats
from fleetwatch.pipeline.board_events import board_of, replaced_before
from fleetwatch.pipeline.events import EventTracker, NodeKey
from fleetwatch.pipeline.refusals import Refusals
from fleetwatch.pipeline.store.base import Alert, Store, StoreError, gpu_index

log = logging.getLogger("fleetwatch.pipeline.processor")  # as before the move: said there

# How far back the boards of a node met for the first time are read; fewer nodes than
# RECALL_PER_NODE are read one by one, more in one read of the whole fleet's.
BOARD_RECALL_S = 90 * 86400
# The job events read back at a start (the jobs each GPU holds open, which the first frame
# ends where it no longer names them). A week: 2,048 GPUs' 30 days held 667,000 job events,
# 2.5 s and 0.5 GB to read at a start; a week's are 1 s and 0.1 GB. A slot with no job
# event in it has its node's older ones read alone (``job_recall``).
JOB_RECALL_S = 7 * 86400
RECALL_PER_NODE = 16


class BoardRecall:
    """Recalling boards and jobs, and naming an alert's board, for ``Processor``."""

    store: Store
    stats: Stats
    events: EventTracker
    refusals: Refusals
    _unrecalled: dict[NodeKey, Frame]  # nodes met while the store was away: first frame

    def _recall_boards(self, frames: Sequence[Frame], judging: bool = False) -> None:
        """The boards the store last named in the slots of nodes met for the first time
        (a start, a partition taken over), so that a board swapped while no processor
        watched is a ``gpu_replaced`` and a board met again is not named again. Raises
        ``StoreError`` while the store is away (the batch is tried again), unless
        ``judging``: a node met while the store is away must not hold back the alerts of
        the whole fleet, so it is met without them (its boards named again) and its first
        frame compared with them once the store answers (``_recall_late``)."""
        nodes = self.events.unknown(frames)
        if not nodes:
            return
        now = max(f.ts for f in frames)
        # The boards and the states to start from; the jobs still open, which the first
        # frame ends where it no longer names them (the run that wrote them stopped).
        reads = ((now - BOARD_RECALL_S, ["gpu_identity", "gpu_state"]),
                 (now - JOB_RECALL_S, ["job_start", "job_end"]))
        try:
            if len(nodes) <= RECALL_PER_NODE:
                stored = [e for start, kinds in reads for c, n in nodes
                          for e in self.store.events(start, now + 1, node=n, kinds=kinds)]
            else:  # a start with many nodes: one read a kind, not one a node
                stored = [e for start, kinds in reads
                          for e in self.store.events(start, now + 1, kinds=kinds)]
            stored += job_recall.older_job_events(self.store, frames, nodes, stored,
                                                  now - JOB_RECALL_S)
            seen = job_recall.last_seen(self.store, job_recall.dropping(frames, nodes, stored))
        except StoreError as exc:
            if not judging:
                raise
            for f in frames:
                key = (f.cluster, f.node)
                if key in nodes:
                    self._unrecalled.setdefault(key, f)
            log.info("the store is away (%s): %d node(s) met for the first time (%s) are "
                     "judged without their stored GPU boards; a board swapped meanwhile is "
                     "told once the store is back", exc, len(nodes),
                     ", ".join(f"{c}/{n}" for c, n in nodes[:5]))
            stored, seen = [], {}
        except Exception:  # a store without events, or a bug there: boards are named anew
            self.stats.errors += 1
            log.exception("could not read the GPU boards stored for %d nodes; their boards "
                          "are named again, a board swapped meanwhile is not seen", len(nodes))
            stored, seen = [], {}
        self.events.recall(nodes, stored, seen)

    def _recall_late(self) -> None:
        """The store answers again: nodes met while it was away get their boards compared
        with those it last named (``gpu_replaced`` where another board is there); a read
        that fails waits for the next stored batch."""
        for key, first in list(self._unrecalled.items()):
            try:
                stored = self.store.events(first.ts - BOARD_RECALL_S, first.ts,
                                           node=key[1], kinds=["gpu_identity"])
            except StoreError:
                return
            except Exception:  # a bug there: the swap, if any, goes untold
                self.stats.errors += 1
                log.exception("could not read the GPU boards stored for %s/%s", *key)
                stored = []
            replaced = replaced_before(first, stored)
            if replaced:
                self.refusals.write("events", self.store.write_events, replaced)
            del self._unrecalled[key]

    def _name_board(self, a: Alert, frame: Frame | None) -> Alert:
        """A GPU alert that names no board yet gets the one its slot held in the frame of
        its step (serial, UUID, PCI bus id), else the one last seen there
        (``EventTracker.board``), here for every rule at once. One that names one keeps
        it: the alert is about that board, even once replaced. The frame's, not the
        newest: in a batch that holds a swap, an alert opened before it is the old
        board's, whatever the batch size."""
        index = gpu_index(a.device)
        if a.uuid:  # named by its finding (a board missing, an XID's): its serial, bus id
            return a if a.serial else self._name_uuid(a, frame)
        if index is None:
            return a
        g = frame.gpu(index) if frame is not None else None
        board = board_of(g.uuid, g.info, g.model) if g is not None else None
        last = self.events.board(a.cluster, a.node, index)
        if board is None or last is not None and last.uuid == board.uuid and not board.serial:
            board = last  # a frame without its board's identity (sent once in a while)
        if board is None:
            return a
        return dataclasses.replace(a, uuid=board.uuid, serial=board.serial,
                                   pci_bus_id=board.pci_bus_id)

    def _name_uuid(self, a: Alert, frame: Frame | None) -> Alert:
        """An alert whose finding named its board (by UUID) gets that board's serial and PCI
        bus id: from the frame, wherever NVML numbers it now, else as last seen on the
        node (a board missing is in no frame)."""
        g = next((g for g in frame.gpus if g.uuid == a.uuid), None) if frame else None
        board = board_of(g.uuid, g.info, g.model) if g is not None else None
        if board is None or not board.serial:
            board = self.events.named(a.cluster, a.node, a.uuid) or board
        if board is None or not (board.serial or board.pci_bus_id):
            return a
        return dataclasses.replace(a, serial=board.serial, pci_bus_id=board.pci_bus_id)
