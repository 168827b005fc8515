"""The model files' directory as ``fleetwatch train`` sees it: the offsets of the model
in use (a retrain moves each at most a step from them), whether a file can be written
there, and what a processor will make of the file just written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetwatch.models.anomaly import PHASE_NAMES
from fleetwatch.models.artifact import ModelFileError, candidates, in_future, load, read_metadata


def previous_offsets(out_dir: str | Path) -> dict[str, float]:
    """The thermal offsets of the model a processor on ``out_dir`` would use now (the
    newest file that loads and is not named in the future), {} with none."""
    for path in candidates(out_dir):
        if in_future(path):
            continue
        try:
            models = load(path)
        except (ModelFileError, OSError):
            continue
        return dict(getattr(models.thermal, "offsets", None) or {})
    return {}


def check_out_dir(out_dir: str | Path) -> str | None:
    """Why a model file cannot be written in ``out_dir`` (made if missing), or None: asked
    before the history is read and the models fit, which takes minutes."""
    import tempfile

    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as exc:
        return (f"cannot write model files in {Path(out_dir).absolute()} "
                f"({exc.strerror or exc}): give --out (models.dir) a directory this user "
                "can write")
    return None


def written_warnings(path: Path, meta: dict[str, Any]) -> list[str]:
    """What a processor on ``path``'s directory will make of the file just written: files
    that sort after it (it will not be loaded), or a file it replaces that had a model of
    more phases of work (fleet anomaly stops scoring them)."""
    out: list[str] = []
    files = candidates(path.parent)  # newest first
    at = files.index(path) if path in files else -1
    ahead, older = (files[:at], files[at + 1:]) if at >= 0 else ([], files)
    # Only a newer-named file a processor would load shadows this one: it skips one named
    # more than a day ahead, or that does not load (damaged, another version).
    ahead = [p for p in ahead if _loads(p)]
    if ahead:
        out.append(f"{len(ahead)} model file(s) in {path.parent.absolute()} are named after "
                   f"this one and load ({', '.join(p.name for p in ahead[:3])}): a processor "
                   "loads the newest that loads, so it will not load this one; move them "
                   "away")
    if not older or ahead:
        return out
    try:
        before = read_metadata(older[0])
    except (OSError, ModelFileError):
        return out
    had = set(PHASE_NAMES) - set(before.get("anomaly_phases_missing", PHASE_NAMES))
    has = set(PHASE_NAMES) - set(meta.get("anomaly_phases_missing", PHASE_NAMES))
    lost = [n for n in PHASE_NAMES if n in had - has]
    if lost:
        out.append(f"this model has no fleet anomaly model of {', '.join(lost)} work, which "
                   f"{older[0].name} (in use until now) has: processors on "
                   f"{path.parent.absolute()} load the new file within a minute and stop "
                   f"scoring GPUs doing that work; delete {path.name} and train on a longer "
                   "span to keep them")
    return out


def _loads(path: Path) -> bool:
    """Whether a processor would load ``path`` (named no more than a day ahead, and it
    loads)."""
    if in_future(path):
        return False
    try:
        load(path)
    except (ModelFileError, OSError):
        return False
    return True
