"""Trained model files: one versioned file per training, the newest that loads wins.

A file is one line of JSON metadata (what it was trained on, with which
versions, how well it did on held-out data) followed by the pickled models.
The metadata is read and checked first: a file written by another model
format or another scikit-learn version is refused with what to do, before a
byte of the pickle is touched. Load model files only from a directory you
trust (pickle runs code): the processor reads ``models.dir``, which only
``fleetwatch train`` writes.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 2  # 2: thermal health reads the node's median temperature and power
PREFIX, SUFFIX = "fleetwatch-model-", ".fwm"


class ModelFileError(ValueError):
    """A model file that this code cannot use; the message says what to do."""


@dataclass
class ModelSet:
    """What one training produced."""

    thermal: Any = None        # models.thermal_health.ThermalModel
    anomaly: Any = None        # models.anomaly.AnomalyModel
    lemon: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def _sklearn_version() -> str:
    import sklearn

    return str(sklearn.__version__)


def save(models: ModelSet, directory: str | Path, now: float | None = None) -> Path:
    """Write ``models`` as a new file in ``directory``; atomic (rename), returns its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now or time.time()))
    path = directory / f"{PREFIX}{stamp}{SUFFIX}"
    n = 1
    while path.exists():
        path = directory / f"{PREFIX}{stamp}-{n}{SUFFIX}"
        n += 1
    meta = {**models.metadata, "format": FORMAT, "sklearn": _sklearn_version()}
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(json.dumps(meta, sort_keys=True).encode() + b"\n")
        pickle.dump((models.thermal, models.anomaly, models.lemon), f, protocol=5)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_metadata(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        line = f.readline(1 << 20)
    try:
        meta = json.loads(line)
    except ValueError:
        raise ModelFileError(f"{path} is not a fleetwatch model file (no metadata line)") from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{path} is not a fleetwatch model file")
    return meta


def load(path: str | Path) -> ModelSet:
    meta = read_metadata(path)
    if meta.get("format") != FORMAT:
        raise ModelFileError(f"{path} has model format {meta.get('format')!r}; this fleetwatch "
                             f"reads format {FORMAT}: run `fleetwatch train` again")
    if meta.get("sklearn") != _sklearn_version():
        raise ModelFileError(f"{path} was trained with scikit-learn {meta.get('sklearn')}, this "
                             f"process has {_sklearn_version()}: run `fleetwatch train` again "
                             "with this installation (a model pickled by another version may "
                             "load and predict wrongly)")
    with open(path, "rb") as f:
        f.readline(1 << 20)
        try:
            thermal, anomaly, lemon = pickle.load(f)  # noqa: S301 - our own trusted directory
        except Exception as exc:  # a truncated or foreign pickle raises many kinds
            raise ModelFileError(f"{path} is damaged ({exc}): run `fleetwatch train` again") \
                from None
    return ModelSet(thermal, anomaly, lemon, meta)


def _written(path: Path) -> tuple[int, str, int]:
    """Sort key of a model file name, in the order ``save`` writes them: its timestamp,
    then its sequence number in that second (``...T000000.fwm``, then ``-1``, ``-2``,
    ... ``-10``: as strings ``-`` sorts before ``.`` and ``-10`` before ``-9``). A name
    without that shape sorts before every stamped one: it is tried last."""
    stem = path.name[len(PREFIX):-len(SUFFIX)]
    stamp, _, seq = stem.partition("-")
    if len(stamp) == 15 and stamp[8] == "T" and (stamp[:8] + stamp[9:]).isdigit() \
            and (seq.isdigit() or not seq):
        return (1, stamp, int(seq or 0))
    return (0, stem, 0)


def candidates(directory: str | Path) -> list[Path]:
    """The model files in ``directory``, newest first (by the timestamp and sequence
    number in their names); none if it is not a directory."""
    d = Path(directory)
    if not d.is_dir():
        return []
    files = [p for p in d.iterdir() if p.name.startswith(PREFIX) and p.suffix == SUFFIX]
    return sorted(files, key=_written, reverse=True)


def newest(directory: str | Path) -> Path | None:
    """The newest model file in ``directory`` (by the timestamp in its name), if any."""
    files = candidates(directory)
    return files[0] if files else None
