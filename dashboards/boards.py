"""The node page's GPU boards: which board (serial, UUID, PCI bus id) is in each slot, since
when, and the boards replaced there, from the store's ``gpu_identity`` and
``gpu_replaced`` events (``pipeline.events``), and the boards moved in from another slot
(``gpu_moved``: NVML numbered the node's GPUs otherwise, a board missing or a firmware
change): the series stay under the GPU index, so this says which board each index held
when. What an RMA asks for, and what tells an alert on gpu3 last month from the board in
gpu3 today."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from dash import html

from fleetwatch.dashboards.data import BOARD_WINDOW_S
from fleetwatch.pipeline.store.base import Event, EventStore, gpu_index

# How far back the page looks for the boards (BOARD_WINDOW_S): a board is named when a
# processor first sees it (its start, a partition taken over), long before the page's range.
KINDS = ("gpu_identity", "gpu_replaced", "gpu_moved")


@dataclass(frozen=True, slots=True)
class Slot:
    device: str
    uuid: str
    details: str            # serial, PCI bus id, model as the event's text says them
    since: float            # first named at
    # (when, what) of each replacement, and of each board moved in from another slot
    replaced: tuple[tuple[float, str], ...] = ()


def slots(events: Sequence[Event]) -> list[Slot]:
    """The board now in each slot and the replacements and moves seen there, by GPU
    index."""
    now: dict[str, Slot] = {}
    for e in sorted(events, key=lambda e: e.ts):
        was = now.get(e.device)
        if e.kind == "gpu_identity":
            if was is not None and was.uuid == e.value:
                now[e.device] = Slot(e.device, e.value, e.text or was.details, was.since,
                                     was.replaced)
            else:
                now[e.device] = Slot(e.device, e.value, e.text, e.ts,
                                     was.replaced if was is not None else ())
        elif e.kind in ("gpu_replaced", "gpu_moved") and was is not None:
            now[e.device] = Slot(was.device, was.uuid, was.details, was.since,
                                 (*was.replaced, (e.ts, e.text)))
    return sorted(now.values(), key=lambda s: (gpu_index(s.device) or 0, s.device))


def panel(store: EventStore, node: str, now: float, cluster: str | None = None) -> html.Div:
    """The boards of ``node`` (of ``cluster`` where given) as a table (the store's events
    of ``BOARD_WINDOW_S``)."""
    rows = slots([e for e in store.events(now - BOARD_WINDOW_S, now + 1, node=node,
                                          kinds=list(KINDS))
                  if cluster is None or e.cluster == cluster])
    if not rows:
        return html.Div("No GPU board named by this node's frames in 90 days (the agent "
                        "reads each GPU's UUID, serial and PCI bus id from NVML)",
                        className="panel-hint")
    body = [html.Tr([html.Td(s.device), html.Td(s.uuid), html.Td(s.details),
                     html.Td(clock(s.since)),
                     html.Td([html.Div(f"{clock(ts)}: {text}") for ts, text in s.replaced]
                             or "—")])
            for s in rows]
    head = html.Tr([html.Th(h) for h in ("GPU", "UUID", "Board", "Named since",
                                          "Replaced / moved in")])
    return html.Table([html.Thead(head), html.Tbody(body)], id="node-board-table",
                      className="alert-table")


def clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
