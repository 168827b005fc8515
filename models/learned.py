"""The learned detectors as one detector that follows the newest trained model file.

Thermal health, the fleet anomaly model and lemon-node scores, run by the
processor like any rule. At start, and then every ``check_every_s`` of wall
time, it looks for a newer file in the model directory and swaps it in
without a restart (per-GPU smoothing state is kept: a retrain changes what is
expected, not what was seen). A file that does not load (damaged, cut short,
written by another model format or scikit-learn) is skipped with the reason,
once, and the next older one is tried: one bad file does not take the models
away while a good one sits beside it. With no usable model it runs nothing
but the lemon scores, and says so once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fleetwatch.frame import Frame
from fleetwatch.models import Finding
from fleetwatch.models.anomaly import FleetAnomaly
from fleetwatch.models.artifact import ModelFileError, ModelSet, candidates, load
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
        self.loaded: Path | None = None  # the file whose models are in use
        # Files that did not load, with the size and time they had then and why: skipped
        # (and said) once, tried again only if rewritten (a copy that was still arriving).
        self._refused: dict[Path, tuple[tuple[int, int] | None, str]] = {}
        self._said_none = False
        self.reload()

    @property
    def skipped(self) -> dict[Path, str]:
        """The model files in the directory that did not load, and why (the error's text)."""
        return {p: why for p, (_, why) in self._refused.items()}

    def reload(self) -> bool:
        """Swap in the newest model file that loads, if it is newer than the one in use;
        True when one was loaded."""
        self._next_check = self._clock() + self.check_every_s
        files = candidates(self.directory)
        self._refused = {p: v for p, v in self._refused.items() if p in files}
        skipped: list[str] = []
        for path in files:
            if path == self.loaded:
                return False  # the newest that loads is in use already
            version = _version(path)
            if path in self._refused and self._refused[path][0] == version:
                skipped.append(path.name)
                continue
            try:
                models = load(path)
            except (ModelFileError, OSError) as exc:
                log.warning("model file skipped: %s", exc)
                self._refused[path] = (version, str(exc))
                skipped.append(path.name)
                continue
            self.use(models)
            self.loaded = path
            meta = models.metadata
            log.info("loaded model %s (trained on %s GPUs, %s; thermal held-out MAE %s)%s",
                     path.name, meta.get("gpus", "?"), meta.get("range", "?"),
                     meta.get("thermal_heldout_mae_c", "?"),
                     f"; the newest that loads: skipped {', '.join(skipped)}" if skipped else "")
            return True
        if self.loaded is None and not self._said_none:
            what = (f"no model file in {self.directory} loads ({len(files)} skipped)" if files
                    else f"no trained model in {self.directory}")
            log.info("%s: running the rules alone (and lemon scores); `fleetwatch train` "
                     "makes one", what)
            self._said_none = True
        return False

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


def _version(path: Path) -> tuple[int, int] | None:
    """A file's size and modification time (None: it cannot be read)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)
