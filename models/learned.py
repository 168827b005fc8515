"""The learned detectors as one detector that follows the newest trained model file.

Thermal health, the fleet anomaly model and lemon-node scores, run by the
processor like any rule. At start, and then every ``check_every_s`` of wall time
(of the data's in a replay: ``use_clock``), it looks for a newer file in the
model directory and swaps it in without a restart (per-GPU smoothing state is
kept: a retrain changes what is expected, not what was seen). A file that does
not load (damaged, cut short, written by another model format or scikit-learn)
is skipped with the reason, once, and the next older one is tried: one bad file
does not take the models away while a good one sits beside it; so is a file
named more than a day in the future (it would shadow every later training).
Installing a model is all or nothing: if it fails, the models in use stay and
the file is refused. With no usable model it runs nothing but the lemon scores,
and says so once.

A model learnt one kind of GPU: a file records the power limits of the GPUs it
was trained on (``gpu_power_limits_w``), and only GPUs whose limit is one of
them (within 10%) are given to thermal health and fleet anomaly; the others
are counted not judged (``coverage``) and said once per kind of GPU. A file
written before that was recorded scores every GPU, as it did, and says so.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models import Finding
from fleetwatch.models.anomaly import FleetAnomaly
from fleetwatch.models.artifact import (
    ModelFileError,
    ModelSet,
    candidates,
    in_future,
    load,
    named_ts,
)
from fleetwatch.models.lemon import EventReader, LemonScore
from fleetwatch.models.thermal_health import ThermalHealth

log = logging.getLogger(__name__)

LIMIT_TOLERANCE = 0.10  # a power limit within 10% of a trained one is that kind of GPU
SCORED_RULES = ("thermal_health", "fleet_anomaly")
MODEL_TS = "model_ts"  # evidence key: the version (name time) of the model file in use
JUDGED_WINDOW_S = 300.0  # judged_now: nodes whose latest frame is this recent


class LearnedDetectors:
    name = "learned"

    def __init__(self, directory: str | Path, *, thermal: ThermalHealth | None = None,
                 anomaly: FleetAnomaly | None = None, lemon: LemonScore | None = None,
                 check_every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory).absolute()
        self.thermal = thermal or ThermalHealth()
        self.anomaly = anomaly or FleetAnomaly()
        self.lemon = lemon or LemonScore()
        self.rules: Mapping[str, tuple[str, ...]] = {
            **self.thermal.rules, **self.anomaly.rules, **self.lemon.rules}
        self.check_every_s = check_every_s
        self._clock = clock
        self._next_check = 0.0
        self.loaded: Path | None = None  # the file whose models are in use
        # Files that did not load, with their ``_version`` then and why: skipped (and said)
        # once, tried again only if rewritten (a copy that was still arriving), or their
        # mode or owner changed (the refusal's advice followed).
        self._refused: dict[Path, tuple[tuple[int, ...] | None, str]] = {}
        self._said_none = False
        # The power limits (W) the file in use was trained on; None: it does not say.
        self._limits: list[float] | None = None
        self._kinds: dict[float, bool] = {}     # a GPU's power limit -> scored
        # GPU models with a limit the file does not score, said once each: a power brake or a
        # cap walks a GPU's limit down a watt at a time, which is not one warning a watt.
        self._said_kinds: set[str] = set()
        self._judged = dict.fromkeys(SCORED_RULES, 0)
        self._given = dict.fromkeys(SCORED_RULES, 0)
        self.not_judged: dict[str, str] = {}     # rule -> why GPUs were not judged
        # (cluster, node) -> its latest frame's (ts, GPUs, GPUs of a kind scored): judged_now
        self._nodes: dict[tuple[str, str], tuple[float, int, int]] = {}
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
        # The file in use was deleted (or moved away): fall back to what a restart would
        # load now, the newest other file that loads, or no model.
        gone = self.loaded if self.loaded is not None and self.loaded not in files else None
        for path in files:
            if path == self.loaded:
                return False  # the newest that loads is in use already
            version = _version(path)
            if path in self._refused and self._refused[path][0] == version:
                skipped.append(path.name)
                continue
            try:
                if in_future(path):
                    raise ModelFileError(
                        f"{path} is named for a time more than a day after now (a clock "
                        "that ran ahead, or a copied file): it would shadow every later "
                        "training; rename it with a time before now, or delete it")
                models = load(path)
                self.use(models, path)
            except (ModelFileError, OSError) as exc:
                log.warning("model file skipped: %s", exc)
                self._refused[path] = (version, str(exc))
                skipped.append(path.name)
                continue
            self.loaded = path
            fixed = self._refused.pop(path, None)
            if fixed is not None:
                log.info("model file %s, skipped before, loads now (rewritten, or its mode "
                         "or owner fixed)", path.name)
            meta = models.metadata
            log.info("loaded model %s from %s (trained on %s GPUs, %s; thermal held-out MAE "
                     "%s)%s%s", path.name, path.parent, meta.get("gpus", "?"),
                     trained_text(meta),
                     meta.get("thermal_heldout_mae_c", "?"), _gaps(models),
                     f"; the newest that loads: skipped {', '.join(skipped)}" if skipped else "")
            if gone is not None:
                log.warning("model file %s, in use, is gone from %s: using %s instead, as a "
                            "restart would", gone.name, self.directory, path.name)
            if self._limits is None:
                log.info("model file %s does not record which GPUs it was trained on "
                         "(written by an older fleetwatch): it scores every GPU, whatever "
                         "its kind; `fleetwatch train` again to have that checked", path)
            return True
        if gone is not None:
            self._unload()
            log.warning("model file %s, in use, is gone from %s and no other file there "
                        "loads (%d skipped): running the rules alone (and lemon scores), as "
                        "a restart would; `fleetwatch train` makes a model", gone.name,
                        self.directory, len(files))
            self._said_none = True
        if self.loaded is None and not self._said_none:
            what = (f"no model file in {self.directory} loads ({len(files)} skipped)" if files
                    else f"no trained model in {self.directory}")
            log.info("%s: running the rules alone (and lemon scores); `fleetwatch train` "
                     "makes one", what)
            self._said_none = True
        return False

    def use(self, models: ModelSet, path: Path | None = None) -> None:
        """Install ``models``: all of them, or (``ModelFileError``) none, the ones in use
        kept."""
        limits = _trained_limits(models.metadata)
        before = (self.thermal.model, self.anomaly.model, dict(self.lemon._score))
        try:
            self.thermal.model = models.thermal
            self.anomaly.model = models.anomaly
            if models.lemon:
                self.lemon.seed(models.lemon)
        except Exception as exc:  # what a file holds decides what can fail here
            self.thermal.model, self.anomaly.model = before[:2]
            self.lemon._score.clear()
            self.lemon._score.update(before[2])
            raise ModelFileError(f"{path or 'the model file'} cannot be "
                                 f"used ({type(exc).__name__}: {exc}): run `fleetwatch train` "
                                 "again") from exc
        self._limits, self._kinds, self._said_kinds = limits, {}, set()
        self.thermal.trained_from = _range_start(models.metadata)
        self.not_judged = {}

    def _unload(self) -> None:
        """No model in use (lemon scores go on, rebuilt from the store's events)."""
        self.thermal.model = self.anomaly.model = None
        self.loaded, self._limits, self._kinds, self._said_kinds = None, None, {}, set()
        self.thermal.trained_from = None
        self.not_judged = {}

    def coverage(self) -> dict[str, tuple[int, int]]:
        """Per rule of thermal health and fleet anomaly: (GPU samples given to its model,
        GPU samples given to this detector) since it was built. A sample is not given to
        the model where there is none, or where its GPU is not of a kind the model was
        trained on."""
        return {rule: (self._judged[rule], self._given[rule]) for rule in SCORED_RULES}

    def _scored(self, frames: Sequence[Frame], count: bool) -> Sequence[Frame]:
        """``frames`` with only the GPUs of a kind the model in use was trained on."""
        n = sum(len(f.gpus) for f in frames)
        if self._limits is None:
            out, each = frames, [len(f.gpus) for f in frames]
        else:
            out, each = [], []
            for f in frames:
                gpus = tuple(g for g in f.gpus if self._of_kind(g))
                each.append(len(gpus))
                if len(gpus) == len(f.gpus):
                    out.append(f)
                elif gpus:
                    out.append(dataclasses.replace(f, gpus=gpus))
        kept = sum(each)
        if count:
            for rule, part in self._parts():
                self._given[rule] += n
                self._judged[rule] += kept if _has_model(part.model) else 0
            for f, k in zip(frames, each):
                if f.gpus:
                    self._nodes[(f.cluster, f.node)] = (f.ts, len(f.gpus), k)
        return out

    def _parts(self) -> tuple[tuple[str, ThermalHealth | FleetAnomaly], ...]:
        return (("thermal_health", self.thermal), ("fleet_anomaly", self.anomaly))

    def judged_now(self, window_s: float = JUDGED_WINDOW_S) -> dict[str, tuple[int, int, str]]:
        """Per rule of thermal health and fleet anomaly, over each node's latest frame of
        the last ``window_s`` of frame time: (GPUs its model judges, GPUs given, and when
        it judges none of them, why: ``no_model``, or ``other_gpu_kind`` where their power
        limits are not the ones the model was trained on). What /metrics shows: a loaded
        model that judges no GPU stops learned detection silently otherwise."""
        newest = max((v[0] for v in self._nodes.values()), default=0.0)
        recent = [v for v in self._nodes.values() if v[0] >= newest - window_s]
        given, kept = sum(v[1] for v in recent), sum(v[2] for v in recent)
        out = {}
        for rule, part in self._parts():
            has = _has_model(part.model)
            judged = kept if has else 0
            why = "" if judged or not given else ("other_gpu_kind" if has else "no_model")
            out[rule] = (judged, given, why)
        return out

    def _of_kind(self, g: GpuReading) -> bool:
        limit = g.metrics.get("gpu_power_limit_w")
        if limit is None or limit != limit:
            return True  # nothing to tell its kind by: scored, as before
        scored = self._kinds.get(limit)
        if scored is None:
            assert self._limits is not None
            scored = self._kinds[limit] = any(
                abs(limit - w) <= LIMIT_TOLERANCE * w for w in self._limits)
        if not scored and g.model not in self._said_kinds:
            self._said_kinds.add(g.model)
            trained = ", ".join(f"{w:g} W" for w in self._limits or [])
            why = (f"the model file {self.loaded} was trained on GPUs with a power limit of "
                   f"{trained}; {g.model or 'a GPU'} has {limit:g} W")
            for rule in SCORED_RULES:
                self.not_judged[rule] = f"{why}: train on this fleet"
            log.warning("%s: not scoring %s GPUs limited to %g W with thermal health or "
                        "fleet anomaly (another kind of GPU, or a power limit lowered by a cap "
                        "or a fault; if it is their usual limit, train on this fleet: "
                        "`fleetwatch train`); other limits of %s GPUs it does not score are "
                        "not said again", why, g.model or "these", limit, g.model or "these")
        return scored

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Look for a newer model file, and rebuild lemon scores up to "now", on this
        clock (a replay's: the data's time) instead of the wall's; the folder is read
        again at the next frame."""
        self._clock = clock
        self.lemon.use_clock(clock)
        self._next_check = -math.inf

    def use_events(self, events: EventReader | None) -> None:
        """The store's event reader: lemon scores are rebuilt from it (``LemonScore``), and
        thermal health reads the boards replaced before it met a node."""
        self.lemon.use_events(events)
        self.thermal.use_events(events)

    def drop(self, nodes: Sequence[str]) -> None:
        gone = set(nodes)
        self._nodes = {k: v for k, v in self._nodes.items() if k[1] not in gone}
        for d in (self.thermal, self.anomaly, self.lemon):
            d.drop(nodes)

    def enrich(self, frames: Sequence[Frame]) -> None:
        """Add the thermal health score to the frames' GPUs before they are stored."""
        if self._clock() >= self._next_check:
            self.reload()
        self.thermal.enrich(self._scored(frames, count=False))

    def update(self, frames: Sequence[Frame]) -> list[Finding]:
        if self._clock() >= self._next_check:
            self.reload()
        scored = self._scored(frames, count=True)
        return [*self._versioned([*self.thermal.update(scored), *self.anomaly.update(scored)]),
                *self.lemon.update(frames)]

    def _versioned(self, findings: list[Finding]) -> list[Finding]:
        """Findings of a model with the model file's version in their evidence
        (``model_ts``: the UTC time in its name, ``fleetwatch-model-YYYYmmddTHHMMSS``), so
        that an alert says which training raised it (two versions run side by side in a
        group while a new file is copied to each host, or after a rollback)."""
        ts = named_ts(self.loaded) if self.loaded is not None else None
        if ts is None or not findings:
            return findings
        return [dataclasses.replace(f, evidence={**f.evidence, MODEL_TS: ts}) for f in findings]


def _has_model(model: object) -> bool:
    """Whether a part has a model that scores anything (an anomaly model of no phase
    scores nothing)."""
    if model is None:
        return False
    center = getattr(model, "center", None)
    return center is None or bool(center)


def _range_text(span: object) -> str:
    """A file's training range as UTC times (``2026-11-25T14:00Z to 2026-11-27T14:00Z``)."""
    if isinstance(span, (list, tuple)) and len(span) == 2 \
            and all(isinstance(t, (int, float)) for t in span):
        return " to ".join(time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(t)) for t in span)
    return "range not recorded"


def trained_text(meta: Mapping[str, object]) -> str:
    """The history a file was trained on: what it held where the file says, beside the
    range asked (``fleetwatch train --days 7`` on a store of 20 minutes holds 20 minutes)."""
    asked = _range_text(meta.get("range"))
    held = meta.get("data_range")
    if not (isinstance(held, (list, tuple)) and len(held) == 2
            and all(isinstance(t, (int, float)) for t in held)):
        return asked
    return f"history {_range_text(held)} ({_hours(held[1] - held[0])}), of {asked} asked"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds < 2 * 86400 else f"{seconds / 86400:.1f} d"


def _range_start(meta: Mapping[str, object]) -> float | None:
    """When the history a file was trained on begins (``range``), None where not said."""
    span = meta.get("range")
    if isinstance(span, (list, tuple)) and span and isinstance(span[0], (int, float)):
        return float(span[0])
    return None


def _trained_limits(meta: Mapping[str, object]) -> list[float] | None:
    """The power limits (W) a file's models were trained on, or None where the file does
    not say (older files) or its GPUs had no limit in the data."""
    kinds = meta.get("gpu_power_limits_w")
    if not isinstance(kinds, dict):
        return None
    limits = []
    for w in kinds:
        try:
            limits.append(float(w))
        except ValueError:
            continue
    limits = [w for w in limits if w > 0]
    return sorted(limits) or None


def _gaps(models: ModelSet) -> str:
    """What the file cannot score, for its load line ("" when it scores everything)."""
    from fleetwatch.models.anomaly import PHASE_NAMES

    out = []
    if models.thermal is None:
        out.append("thermal health: no model, not scoring")
    a = models.anomaly
    missing = a.missing() if a is not None else list(PHASE_NAMES)
    if len(missing) == len(PHASE_NAMES):
        out.append("fleet anomaly: no model of any phase of work, not scoring")
    elif missing:
        out.append(f"fleet anomaly: no model of {', '.join(missing)} work, GPUs doing it "
                   "not scored")
    return "; " + "; ".join(out) if out else ""


def _version(path: Path) -> tuple[int, ...] | None:
    """What a refused file is tried again on a change of (None: it cannot be read): its
    size and modification time (rewritten), and its and its directory's mode, owner and
    change time (``chmod go-w`` or ``chown``, as the refusal said, change only those)."""
    try:
        st, up = path.stat(), path.parent.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid, st.st_ctime_ns,
            up.st_mode, up.st_uid)
