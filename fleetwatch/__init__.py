"""fleetwatch: real-time telemetry and failure observability for GPU datacenters."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

__version__ = "0.1.0"

# The folder that holds the packages (fleetwatch/, pipeline/, collectors/): in a git
# checkout installed with ``pip install -e``, the checkout itself.
_ROOT = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=4)
def commit(root: Path = _ROOT) -> str:
    """The commit (12 hex digits) fleetwatch runs from when installed from a git checkout,
    else "": every release says 0.1.0, so during a rolling upgrade only the commit tells
    the members apart. Asked of git once; a missing git or a timeout gives ""."""
    if not (root / ".git").exists():   # a folder, or a file in a git worktree
        return ""
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    out = done.stdout.strip()
    return out if done.returncode == 0 and all(c in "0123456789abcdef" for c in out) else ""


def version_text() -> str:
    """``0.1.0``, or ``0.1.0 (commit 9f61837abcde)`` from a git checkout."""
    c = commit()
    return f"{__version__} (commit {c})" if c else __version__
