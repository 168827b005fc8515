"""A frame's message key against its node (``Intake.decode``): which frames are refused for
it (``misplaced``), and the processor's warning, per node, about a producer whose frames
come with no key and are refused here (``KeylessLog``).

Each member of a consumer group judges the nodes of its partitions, and a node's partition
is the one its name's key maps to (``fleetwatch agent`` keys every frame so). A frame under
another node's key reaches a member that may not own its node, which would page it silent
once it heard no more of it: refused, whoever reads it. A frame with no key (an older agent,
another tool) lands on any partition: the member that owns its node's partition takes it
wherever it lands among that member's partitions (one member owns them all: every such frame
is taken); another member refuses it, as that member does not judge the node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from fleetwatch.frame import Frame
from fleetwatch.frame_checks import quote
from fleetwatch.pipeline.bus import Message, Partition
from fleetwatch.pipeline.ownership import Locate

log = logging.getLogger("fleetwatch.pipeline.processor")

FIX = ("a node's frames must all reach the processor that owns its partition; key the frame "
       "by its node's name, as fleetwatch agent does")
SAY_EVERY_S = 600.0  # a node's keyless frames refused here: said at most once in this
MAX_NODES = 10_000   # nodes said of and remembered (beyond: the dead-letter log alone)


def home(f: Frame, locate: Locate | None) -> Partition | None:
    """The partition the frame's node's name maps to (None: no bus, or not known yet)."""
    return None if locate is None else locate(f.node.encode())


def owns(node_home: Partition | None, owned: Collection[Partition] | None) -> bool:
    """Does this member own the node whose partition is ``node_home``? ``owned`` None:
    no bus told it its partitions, so every node is its own."""
    return node_home is not None and (owned is None or node_home in owned)


def misplaced(m: Message, f: Frame, locate: Locate | None,
              owned: Collection[Partition] | None = None) -> str | None:
    """Why frame ``f`` of message ``m`` is refused for the message's key (None: it is not).

    Under another node's key: always. With no key: where the partition its node's name
    maps to is another member's (or not known yet); taken where this member owns it
    (``owned``: its partitions, None: all), on whichever of its partitions it landed.
    ``locate`` None (no bus: ``Processor.handle`` called directly) places none."""
    where = f"{f.cluster}/{f.rack}/{f.node}"
    if m.key is not None:
        return (f"key {quote(m.key)} is not the frame's node {quote(f.node)} ({where}): "
                f"under another key it reaches a processor that does not judge that node "
                f"(and would page it silent); {FIX}")
    if locate is None:
        return None
    at = home(f, locate)
    if at == (m.topic, m.partition) or owns(at, owned):
        return None
    on = (f"{at[0]}/{at[1]}, where its name maps, which another processor of the group "
          f"owns (it judges the node, with only the frames that land on its partitions)"
          if at is not None else
          "its node's partition (this topic's partitions are not known yet)")
    return (f"no key: the frame of node {quote(f.node)} ({where}) is on "
            f"{m.topic}/{m.partition}, not on {on}; {FIX}")


class KeylessLog:
    """The warning, per node, that its frames come with no key and are refused here: the
    first at once, then at most one every ``every_s`` with the count since (the dead-letter
    log says them all together, under one field, ``key``)."""

    def __init__(self, every_s: float = SAY_EVERY_S,
                 clock: Callable[[], float] = time.monotonic,
                 say: Callable[[str], None] | None = None) -> None:
        self._every_s = every_s
        self._clock = clock
        self._say = say or (lambda text: log.warning("%s", text))
        self._nodes: dict[tuple[str, str], tuple[float, int]] = {}  # -> last said, since

    def refused(self, m: Message, f: Frame, node_home: Partition | None) -> None:
        now = self._clock()
        key = (f.cluster, f.node)
        said = self._nodes.get(key)
        if said is not None and now - said[0] < self._every_s:
            self._nodes[key] = (said[0], said[1] + 1)
            return
        if said is None and len(self._nodes) >= MAX_NODES:
            return  # one more among very many: the dead-letter log's lines say it
        count = 1 + (said[1] if said is not None else 0)
        self._nodes[key] = (now, 0)
        owner = (f"its partition {node_home[0]}/{node_home[1]} is another processor's, "
                 "which judges it with only the frames that land on its own partitions: "
                 "it stores a part of them and may page the node node_silent while it sends"
                 if node_home is not None else
                 "its partition is not known yet (this topic's partitions are not known)")
        since = (f"{count} in the last {now - said[0]:.0f} s" if said is not None
                 else "the first")
        self._say(f"node {quote(f.node)} ({f.cluster}/{f.rack}/{f.node}) sends frames with no "
                  f"message key: they land on any partition, and those on this processor's "
                  f"({since}: latest {m.topic}/{m.partition}@{m.offset}) are refused, dead "
                  f"letters of field key, as {owner}. Key its frames by the node's name, as "
                  f"fleetwatch agent does, or run one processor (said at most once every "
                  f"{self._every_s:g} s per node)")
