"""A node paged silent resolves with its first frame back, whatever ``alerts.keep_firing_s``
says (300 s by default): a node that sends is not silent, and keep_firing is for a reading
that hovers at a limit. (The r23 mass run: 29 nodes back from a PDU trip stayed FIRING,
and counted silent on the fleet page, for the 5 minutes of keep_firing_s, restarted by a
processor restart in between; partitioned nodes resolved 3 to 8 minutes after they
reconnected.)"""

from __future__ import annotations

from fleetwatch.models.node_silence import NodeSilence
from fleetwatch.pipeline.alerts import AlertBook
from tests.models.helpers import busy, node

NODES = ("node-00", "node-01", "node-02", "node-03")


def test_a_node_back_resolves_its_page_at_its_first_frame() -> None:
    d = NodeSilence()
    book = AlertBook(requirements={"node_silent": ()}, keep_firing_s=300.0)
    states: list[tuple[float, str]] = []
    t = 1000.0
    while t < 1600.0:
        # node-03 sends nothing from 1300 to 1500.
        names = NODES if not 1300.0 <= t < 1500.0 else NODES[:3]
        frames = [node(t, [busy(60)], name=n) for n in names]
        changes = book.observe(frames, d.update(frames, wall=t + 0.1))
        book.apply(changes)
        states += [(a.updated_ts, a.state) for a in changes if a.node == "node-03"]
        t += 5.0
    fired = [ts for ts, s in states if s == "firing"]
    assert fired and fired[0] - 1300.0 <= 65
    assert states[-1] == (1500.0, "resolved")
    assert book.open == []
