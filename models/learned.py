"""The learned detectors as one detector that follows the newest trained model file.

Thermal health, the fleet anomaly model and lemon-node scores, run by the
processor like any rule. At start, and then every ``check_every_s`` of wall
time, it looks for a newer file in the model directory and swaps it in
without a restart (per-GPU smoothing state is kept: a retrain changes what is
expected, not what was seen). With no usable model it runs nothing but the
lemon scores, and says so once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.anomaly import FleetAnomaly
from fleetwatch.models.artifact import ModelFileError, ModelSet, load, newest
from fleetwatch.models.lemon import LemonScore
from fleetwatch.models.thermal_health import ThermalHealth

log = logging.getLogger(__name__)


class LearnedDetectors:
    name = "learned"

    def __init__(self, directory: str | Path, *, thermal: ThermalHealth | None = None,
                 anomaly: FleetAnomaly | None = None, lemon: LemonScore | None = None,
                 check_every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.thermal = thermal or ThermalHealth()
        self.anomaly = anomaly or FleetAnomaly()
        self.lemon = lemon or LemonScore()
        self.rules: Mapping[str, tuple[str, ...]] = {
            **self.thermal.rules, **self.anomaly.rules, **self.lemon.rules}
        self.check_every_s = check_every_s
        self._clock = clock
        self._next_check = 0.0
        self.loaded: Path | None = None
        self._said_none = False
        self.reload()

    def reload(self) -> bool:
        """Swap in the newest model file if it is new; True when one was loaded."""
        self._next_check = self._clock() + self.check_every_s
        path = newest(self.directory)
        if path is None:
            if not self._said_none:
                log.info("no trained model in %s: running the rules alone (and lemon scores); "
                         "`fleetwatch train` makes one", self.directory)
                self._said_none = True
            return False
        if path == self.loaded:
            return False
        try:
            models = load(path)
        except (ModelFileError, OSError) as exc:
            log.warning("model file not used: %s", exc)
            self.loaded = path  # said once; a newer file will be tried
            return False
        self.use(models)
        self.loaded = path
        meta = models.metadata
        log.info("loaded model %s (trained on %s GPUs, %s; thermal held-out MAE %s)",
                 path.name, meta.get("gpus", "?"), meta.get("range", "?"),
                 meta.get("thermal_heldout_mae_c", "?"))
        return True

    def use(self, models: ModelSet) -> None:
        self.thermal.model = models.thermal
        self.anomaly.model = models.anomaly
        if models.lemon:
            self.lemon.seed(models.lemon)

    def drop(self, nodes: Sequence[str]) -> None:
        for d in (self.thermal, self.anomaly, self.lemon):
            d.drop(nodes)

    def enrich(self, frames: Sequence[Frame]) -> None:
        """Add the thermal health score to the frames' GPUs before they are stored."""
        if self._clock() >= self._next_check:
            self.reload()
        self.thermal.enrich(frames)

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        if self._clock() >= self._next_check:
            self.reload()
        return [*self.thermal.update(frames), *self.anomaly.update(frames),
                *self.lemon.update(frames)]
