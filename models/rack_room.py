"""The room's air around each rack, for the rack detector (``models.rack``).

The dies follow the air degree for degree at the same power, and the GPUs' thermal
models (``rack_models``) have no input for it: ``RoomShift`` says, per rack, how far
the room's air around it (the other racks' inlets: ``rack_inlets.Inlets.room``) has
moved since it was first read, so that the detector takes that out of each temperature
before its models see it. A held (flagged) rack whose room cannot be read follows its
unflagged peers' air instead. State and arithmetic only; it holds no finding.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from fleetwatch.models.batch import ewma_weight
from fleetwatch.models.rack_inlets import Inlets

ROOM_S = 300.0       # the room's air (``RoomShift.shift``): averaged over this time constant


class RoomShift:
    """Per rack code: the room's air around it, averaged over ``ROOM_S``, and its move."""

    def __init__(self, inlets: Inlets) -> None:
        self.inlets = inlets
        # Rack code -> [the room's air around it when first read, now, when read].
        self._room: dict[int, list[float]] = {}
        # Held rack code -> [its unflagged peers' air (``Inlets.peer_room``), averaged as
        # the room's, when read], and the flagged racks it was read with.
        self._loose: dict[int, list[float]] = {}
        self._loose_with: frozenset[int] = frozenset()

    def shift(self, codes: np.ndarray, now: float, clusters: list[str],
              flagged: Collection[int], held: Collection[int]) -> np.ndarray:
        """Per frame: how far the room's air around its rack (the other racks' median
        inlet: ``Inlets.room``) has moved since this detector first read it (0 where it
        never could: no inlet sensors, fewer than four racks; as before). The dies follow
        the air degree for degree at the same power, and the models have no input for it:
        a room warming over hours would stand in every residual, each rack's models
        learning it at their own speed, so the racks that learned it sooner made the
        slowest one look like its own cooler. Taken out before the models, it is no
        rack's rise; a rack's own air is never part of its room."""
        rooms = self.inlets.room(now, clusters, flagged)
        for code, level in rooms.items():
            room = self._room.setdefault(code, [level, level, now])
            # Averaged over ROOM_S: the sensors' rounding and noise, moving the median
            # a tenth of a degree from one batch to the next, stay out of the residuals.
            room[1] += float(ewma_weight(np.array(now - room[2]), ROOM_S)) * (level - room[1])
            room[2] = now
        self._follow_loose(now, clusters, rooms, flagged, held)
        shift = np.zeros(len(clusters))
        for code, (first, level, _) in self._room.items():
            shift[code] = level - first
        return shift[codes]

    def _follow_loose(self, now: float, clusters: list[str], rooms: dict[int, float],
                      flagged: Collection[int], held: Collection[int]) -> None:
        """A held rack whose room has too few unflagged racks to be read (two racks of four
        flagged) follows the moves of its unflagged peers' air instead: its room shift
        stood still for the hours of the fault while the room warmed, and its GPUs read
        that warming as their own once the rack cleared (a node alert in a fixed rack).
        Only the moves count, from the racks read last time: a median of other racks has
        another level."""
        were = frozenset(flagged)
        if were != self._loose_with:
            self._loose, self._loose_with = {}, were
        for code, level in self.inlets.peer_room(now, clusters, were).items():
            if code in rooms or code not in self._room or code not in held:
                self._loose.pop(code, None)
                continue
            loose = self._loose.get(code)
            if loose is None:
                self._loose[code] = [level, now]
                continue
            moved = float(ewma_weight(np.array(now - loose[1]), ROOM_S)) * (level - loose[0])
            loose[0] += moved
            loose[1] = now
            self._room[code][1] += moved
            self._room[code][2] = now
