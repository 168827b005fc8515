"""Trained model files: one versioned file per training, the newest that loads wins.

A file is one line of JSON metadata (what it was trained on, with which
versions, how well it did on held-out data) followed by the pickled models.
The metadata is read and checked first: a file written by another model
format or another scikit-learn version, or by a newer fleetwatch, is refused
with what to do (retrain, or upgrade this fleetwatch), before a byte of the
pickle is touched. A pickle runs code as it loads, so a file is
loaded only from where no one but its reader (or root) can have written it: a
file or directory writable by group or others, or owned by another user, is
refused before it is opened (POSIX). After unpickling, the objects are checked
to be the models this code expects, and to be the ones its metadata line was
written with (the pickle holds that line's SHA-256): a file that is not is
refused like a damaged one. Names are claimed atomically: two trainings that finish in the
same second each keep their own file.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import pickle
import stat
import tempfile
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
    """Write ``models`` as a new file in ``directory`` and return its path. The file is
    written whole under a temporary name of its own, then given the first free name of
    its second (``...T000000.fwm``, ``-1``, ``-2``, ...) with a link that fails if the
    name is taken: concurrent writers never share a file, and each returns its own."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now or time.time()))
    meta = {**models.metadata, "format": FORMAT, "sklearn": _sklearn_version()}
    line = json.dumps(meta, sort_keys=True).encode()
    for model in (models.thermal, models.anomaly):
        if model is not None:  # the pickle vouches for its metadata line (``load``)
            model.metadata_sha256 = hashlib.sha256(line).hexdigest()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{PREFIX}", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(line + b"\n")
            pickle.dump((models.thermal, models.anomaly, models.lemon), f, protocol=5)
            f.flush()
            os.chmod(tmp, 0o644)  # mkstemp's 0600: readable by a processor run as another user
            os.fsync(f.fileno())
        n = 0
        while True:
            path = directory / f"{PREFIX}{stamp}{f'-{n}' if n else ''}{SUFFIX}"
            if _claim(tmp, path):
                break
            n += 1
    finally:
        tmp.unlink(missing_ok=True)
    _sync_dir(directory)
    return path


def _claim(tmp: Path, path: Path) -> bool:
    """Give the written ``tmp`` the name ``path`` unless it is taken; True if it was free."""
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: reserve the name, then fill it
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        os.replace(tmp, path)
        return True


def _sync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_trusted(path: str | Path) -> None:
    """Refuse (``ModelFileError``) a model file that someone other than this process's
    user or root could have written: the file or its directory writable by group or
    others, or owned by another user. Loading a pickle runs its code. POSIX only."""
    if os.name != "posix":
        return
    path = Path(path).absolute()
    me = os.geteuid()
    for p, what in ((path, "model file"), (path.parent, "model directory")):
        st = os.stat(p)
        if st.st_mode & 0o022:
            raise ModelFileError(
                f"{path}: the {what} {p} is writable by group or others (mode "
                f"{st.st_mode & 0o7777:o}); a model file is a pickle and loading it runs "
                f"its code, so it is refused: make it writable only by its owner "
                f"(chmod go-w {p}){_fs_group_hint(path.parent)}")
        if st.st_uid not in (me, 0):
            raise ModelFileError(
                f"{path}: the {what} {p} is owned by uid {st.st_uid}, not by this user "
                f"(uid {me}) or root; a model file is a pickle and loading it runs its "
                f"code, so it is refused: chown it to the user that runs fleetwatch, or "
                f"point models.dir at a directory of that user's")


def _fs_group_hint(directory: Path) -> str:
    """Where the directory looks as a Kubernetes fsGroup leaves a volume (setgid and
    group-writable), what makes it so: the check stays as strict, the cause is named."""
    mode = os.stat(directory).st_mode
    if mode & stat.S_ISGID and mode & 0o020:
        return (". Its directory is setgid and group-writable, as a Kubernetes fsGroup "
                "leaves a volume: remove fsGroup from the pods that mount models.dir "
                "(deploy/kubernetes/fleetwatch.yaml runs them without one)")
    return ""


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
    path = Path(path).absolute()
    check_trusted(path)
    meta = read_metadata(path)
    fmt, by = meta.get("format"), meta.get("fleetwatch")
    mine = _fleetwatch_version()
    if isinstance(fmt, int) and fmt > FORMAT or _release(by) > _release(mine):
        raise ModelFileError(f"{path} was written by fleetwatch {by or '?'} (model format "
                             f"{fmt!r}), newer than this one ({mine}, format {FORMAT}): "
                             "upgrade fleetwatch on this host, or train with this version")
    if fmt != FORMAT:
        raise ModelFileError(f"{path} has model format {fmt!r}; this fleetwatch "
                             f"reads format {FORMAT}: run `fleetwatch train` again")
    if meta.get("sklearn") != _sklearn_version():
        raise ModelFileError(f"{path} was trained with scikit-learn {meta.get('sklearn')}, this "
                             f"process has {_sklearn_version()}: run `fleetwatch train` again "
                             "with this installation (a model pickled by another version may "
                             "load and predict wrongly)")
    with open(path, "rb") as f:
        line = f.readline(1 << 20).rstrip(b"\n")
        try:
            thermal, anomaly, lemon = pickle.load(f)  # noqa: S301 - our own trusted directory
        except Exception as exc:  # a truncated or foreign pickle raises many kinds
            raise ModelFileError(f"{path} is damaged ({exc}): run `fleetwatch train` again") \
                from None
    wrong = _wrong_objects(thermal, anomaly, lemon)
    if wrong:
        raise ModelFileError(f"{path} is damaged ({wrong}): run `fleetwatch train` again")
    for model in (thermal, anomaly):
        vouched = getattr(model, "metadata_sha256", None)  # None: written before it was kept
        if model is not None and vouched and vouched != hashlib.sha256(line).hexdigest():
            raise ModelFileError(
                f"{path}: its metadata line is not the one written with its models (edited, "
                "or joined to another file's models): the GPUs, range and versions it "
                "states cannot be trusted, so it is refused; run `fleetwatch train` again "
                "rather than editing a model file")
    return ModelSet(thermal, anomaly, lemon, meta)


def _fleetwatch_version() -> str:
    from fleetwatch import __version__

    return str(__version__)


def _release(version: object) -> tuple[int, ...]:
    """A version's leading numbers (``0.2.0rc1`` -> (0, 2, 0)); () when it has none."""
    out = []
    for part in str(version or "").split(".")[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _wrong_objects(thermal: object, anomaly: object, lemon: object) -> str:
    """What in an unpickled file is not what ``save`` writes, or ""."""
    from fleetwatch.models.anomaly import AnomalyModel
    from fleetwatch.models.thermal_model import ThermalModel

    if thermal is not None and not isinstance(thermal, ThermalModel):
        return f"its thermal model is a {type(thermal).__name__}, not a ThermalModel"
    if anomaly is not None and not isinstance(anomaly, AnomalyModel):
        return f"its anomaly model is a {type(anomaly).__name__}, not an AnomalyModel"
    if not isinstance(lemon, dict):
        return f"its lemon scores are a {type(lemon).__name__}, not a dict"
    for key, value in lemon.items():
        if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)
                and isinstance(value, tuple) and len(value) == 2
                and all(isinstance(v, (int, float)) for v in value)):
            return f"a lemon score is {key!r}: {value!r}, not (cluster, node): (score, ts)"
    return ""


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


FUTURE_S = 86400.0  # a name dated further ahead than this is a clock that ran ahead


def named_ts(path: Path) -> float | None:
    """The UTC time in a model file's name (``save``'s stamp), or None without one."""
    shape, stamp, _ = _written(path)
    if not shape:
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%S")))
    except ValueError:  # digits that are no date (month 13)
        return None


def in_future(path: Path, now: float | None = None) -> bool:
    """Whether ``path`` is named for more than ``FUTURE_S`` after ``now``: written by a
    host whose clock ran ahead, or copied in; it would shadow every later training."""
    ts = named_ts(path)
    return ts is not None and ts > (time.time() if now is None else now) + FUTURE_S


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
