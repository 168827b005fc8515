"""A node gone for good, through a processor over a real SQLite store: after
``FORGET_S`` its ``node_silent`` alert is resolved in the store as forgotten, and the
processor drops its per-node state (ownership, events, energy, GPU slots, node silence),
so that memory follows the live fleet, not every node name ever seen (r24 churn run:
~90 KB per retired node name, never freed)."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.models.node_silence import FORGET_S, NodeSilence
from fleetwatch.models.thermal import ThermalLimits
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.models.helpers import busy, node

T0 = 1_790_000_000.0
ALL = ("pending", "firing", "resolved")


def test_a_forgotten_node_is_resolved_in_the_store_and_its_state_dropped(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fw.db")
    silence = NodeSilence()
    processor = Processor(store, detectors=[silence, ThermalLimits()])
    t = T0
    while t < T0 + FORGET_S + 2 * 3600.0:
        names = ("stays", "gone") if t < T0 + 3600.0 else ("stays",)
        processor.process([node(t, [busy(60)], name=n) for n in names])
        t += 600.0
    processor.flush()
    [alert] = [a for a in store.alerts(ALL) if a.node == "gone"]
    assert alert.rule == "node_silent" and alert.state == "resolved"
    assert "forgotten" in alert.resolution and alert.evidence["forgotten"] == 1.0
    assert store.alerts() == []  # nothing open
    held = [processor.ownership._nodes, processor.events._nodes, silence._index]
    assert all(("c", "gone") not in h for h in held)
    assert all(("c", "stays") in h for h in held)
    slots = processor.detectors[1]
    assert not [k for k in slots.table._nodes if k[1] == "gone"]
    store.close()
