"""A store that can no longer grow is named for what it is: SQLite reports a write refused
for the file size limit (EFBIG, ``ulimit -f``, systemd ``LimitFSIZE=``) as a "disk I/O
error", which must not send the user to ``dmesg`` and ``.recover`` a sound file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import resource, sys
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.pipeline.store import StoreError
from fleetwatch.pipeline.store.sqlite import SqliteStore
resource.setrlimit(resource.RLIMIT_FSIZE, (1_500_000, 1_500_000))
store = SqliteStore(sys.argv[1])
sim = FleetSim(SimParams(nodes=4, gpus=8), 1_763_800_000.0)
try:
    for _ in range(20_000):
        sim.step()
        store.write(sim.frames())
except StoreError as exc:
    print(exc)
"""


def test_a_store_at_the_file_size_limit_says_so(tmp_path: Path) -> None:
    db = tmp_path / "limited.db"
    said = subprocess.run([sys.executable, "-c", SCRIPT, str(db)], capture_output=True,
                          text=True, timeout=300).stdout
    assert f"the store {db} cannot grow" in said and "file size limit (1.4 MiB" in said
    assert "ulimit -f" in said and ".recover" not in said and "dmesg" not in said
