"""XID events: each classified by the XID table (fleetwatch/xids.csv), latched for a hold time.

One alert per GPU and severity lists every XID seen while it is open (code, count,
first and last time) and suggests the most drastic action among them (the table's
``rank``). A code new to the open alert raises its ``REVISION``, so the alert is
written and notified again (the lifecycle bounds how often: ``pipeline.alerts``). The
message and evidence list at most ``XID_LISTED`` codes, the worst first, and count the
rest. An open alert loaded from the store after a restart is adopted with the codes its
evidence holds (one of an older release with its one code and count). An XID from
another board than the one the codes were seen on (the board in the slot was replaced:
its UUID changed) starts afresh: the old board's codes are not the new one's, and its
finding names the new board, so the lifecycle ends the alert about the old board and
opens (and notifies) one about the new board.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from fleetwatch.config import DetectorsConfig
from fleetwatch.frame import Frame, is_board_uuid
from fleetwatch.models import RANK, REVISION, Finding, OpenAlert
from fleetwatch.models.batch import gpu_finding
from fleetwatch.models.held_jobs import HeldJobs, job_tags, job_words
from fleetwatch.xids import (
    MORE_CODES,
    MORE_COUNT,
    SEVERITIES,
    Seen,
    describe,
    seen_of,
    xid_evidence,
    xid_text,
)

_XidKey = tuple[str, str, int, str]  # (cluster, node, gpu, severity)


class XidEvents:
    """Each XID a GPU reports, classified by the XID table (fleetwatch/xids.csv).

    One alert per GPU and severity; while it holds (``hold_s`` after the last XID),
    every XID of that severity joins it: the message lists each code with its count
    and times, the action is that of the most drastic (the table's ``rank``: RMA over
    drain-and-reset), and a code new to the alert bumps its ``revision`` so the sinks
    hear of it. The codes seen are kept in the evidence (``xid_CODE_count``,
    ``xid_CODE_first_ts``, ``xid_CODE_last_ts``), from which ``adopt`` takes an open
    alert over after a restart."""

    name = "xid"
    rules: dict[str, tuple[str, ...]] = {
        "gpu_xid_critical": (), "gpu_xid_warning": (), "gpu_xid_info": ()}

    def __init__(self, config: DetectorsConfig | None = None) -> None:
        self.c = config or DetectorsConfig()
        self._seen: dict[_XidKey, Seen] = {}
        # The alert's revision (codes it took in), and (codes, count) of an adopted alert
        # that its evidence counts without listing them.
        self._revision: dict[_XidKey, float] = {}
        self._more: dict[_XidKey, tuple[float, float]] = {}
        # The board (UUID) each GPU's codes were seen on, where a frame or alert named one.
        self._board: dict[tuple[str, str, int], str] = {}
        self._jobs = HeldJobs()  # the job its GPU held: the job an XID 79 crashed

    def drop(self, nodes: Iterable[str]) -> None:
        gone = set(nodes)
        for key in [k for k in self._seen if k[1] in gone]:
            del self._seen[key]
            self._revision.pop(key, None)
            self._more.pop(key, None)
        for gpu in [k for k in self._board if k[1] in gone]:
            del self._board[gpu]
        self._jobs.drop(gone)

    def adopt(self, alerts: Iterable[OpenAlert]) -> None:
        """Take over the XIDs of open XID alerts (loaded from the store at start, or for
        nodes this processor now owns), so later XIDs join them."""
        for a in alerts:
            severity = a.rule.removeprefix("gpu_xid_")
            digits = a.device.removeprefix("gpu")
            if a.rule not in self.rules or not digits.isdigit() or a.state == "resolved":
                continue
            evidence = a.evidence or {}
            seen = seen_of(evidence)
            if not seen and "xid" in evidence:  # an older release's: one code and its count
                seen = {int(evidence["xid"]): [float(evidence.get("count", 1.0)),
                                               a.started_ts, a.updated_ts]}
            if seen:
                key = (a.cluster, a.node, int(digits), severity)
                # The store's alerts name their board (models do not import the store).
                board = getattr(a, "uuid", "")
                if is_board_uuid(board):
                    self._board[key[:3]] = board
                self._seen[key] = seen
                self._revision[key] = float(evidence.get(REVISION, len(seen)))
                self._more[key] = (evidence.get(MORE_CODES, 0.0), evidence.get(MORE_COUNT, 0.0))

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        out = []
        for f in frames:
            self._jobs.see(f)
            for g in f.gpus:
                if g.xids:
                    if is_board_uuid(g.uuid):
                        self._new_board(f, g.index, g.uuid)
                    found = self._classify(f, g.index, g.xids)
                    if is_board_uuid(g.uuid):  # the alert is about this board
                        found = [dataclasses.replace(x, board=g.uuid) for x in found]
                    out.extend(found)
        return out

    def _new_board(self, f: Frame, gpu: int, board: str) -> None:
        """Forget the codes seen on the GPU's board before, if this is another one."""
        key = (f.cluster, f.node, gpu)
        was = self._board.get(key)
        self._board[key] = board
        if was is None or was == board:
            return
        for severity in SEVERITIES:
            self._seen.pop((*key, severity), None)
            self._revision.pop((*key, severity), None)
            self._more.pop((*key, severity), None)

    def _classify(self, f: Frame, gpu: int, codes: tuple[int, ...]) -> list[Finding]:
        by_severity: dict[str, list[int]] = {}
        for code in codes:
            by_severity.setdefault(describe(code).severity, []).append(code)
        out = []
        for severity, now in by_severity.items():
            hold = self.c.xid_info_hold_s if severity == "info" else self.c.xid_hold_s
            key = (f.cluster, f.node, gpu, severity)
            seen = self._seen.get(key)
            if seen is None or f.ts >= max(s[2] for s in seen.values()) + hold:
                seen = self._seen[key] = {}  # the alert before (if any) has ended
                self._revision[key], self._more[key] = 0.0, (0.0, 0.0)
            for code in now:
                if code not in seen:
                    self._revision[key] += 1
                s = seen.setdefault(code, [0.0, f.ts, f.ts])
                s[0] += 1
                s[1], s[2] = min(s[1], f.ts), max(s[2], f.ts)
            evidence = xid_evidence(seen, self._more[key])
            evidence[REVISION] = self._revision[key]
            evidence[RANK] = float(describe(int(evidence["xid"])).rank)
            held = self._jobs.held(f, gpu)
            out.append(_xid_finding(f, gpu, severity, evidence, hold,
                                    held.job or "" if held is not None else "",
                                    held.info if held is not None else None))
        return out


def _xid_finding(f: Frame, gpu: int, severity: str, evidence: dict[str, float],
                 hold: float, job: str = "", info: Mapping[str, str] | None = None
                 ) -> Finding:
    """One XID alert's finding: the codes seen while it holds, the worst first; the job
    that held the GPU, and its owner (``info``), named as the job detectors name them."""
    message, action = xid_text(f.node, gpu, evidence, job_words(job, info))
    code = int(evidence["xid"])
    return dataclasses.replace(
        gpu_finding(f, gpu, f"gpu_xid_{severity}", code, message, severity, 0.0, evidence,
                    action, hold), **job_tags(job, info))
