"""Switching store.kind from SQLite to VictoriaMetrics left the silences in force and the
acknowledgements behind without a word (grow #2): an "RMA pending" silence vanished and
its node paged again. ``silence import --from OLD.db`` carries them; a processor starting
on the server store while the old file holds some says so."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import uuid
from pathlib import Path

from fleetwatch.config import load
from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Silence
from fleetwatch.pipeline.store.sqlite import SqliteStore
from fleetwatch.pipeline.store.victoria import VictoriaMetricsStore
from fleetwatch.store_switch import carry, left_behind
from tests.servers import Server

DAY = 86400.0


def old_store(path: Path, node: str) -> tuple[SqliteStore, str, str]:
    """A SQLite store with a silence in force, one ended and one to come, an open alert
    acknowledged and a resolved one acknowledged; returns (store, the open alert's id, the
    silence in force's id)."""
    now = time.time()
    store = SqliteStore(path)
    rma = f"rma-{uuid.uuid4().hex[:8]}"
    store.write_silences([
        Silence(rma, (("node", "=", node),), now - DAY, now + 29 * DAY, "ops",
                "RMA pending, ticket 4711"),
        Silence(f"old-{rma}", (("node", "=", node),), now - 9 * DAY, now - 8 * DAY, "ops"),
        Silence(f"next-{rma}", (("rack", "=", "r9"),), now + DAY, now + 2 * DAY, "ops")])
    firing = Alert(f"a-{rma}", "xid_fatal", "critical", "c", "r", node, "gpu1", "firing",
                   now - 3600, now - 60, 79.0, "XID 79", fired_ts=now - 3000)
    gone = dataclasses.replace(firing, id=f"b-{rma}", state="resolved", resolved_ts=now - 10)
    store.write_alerts([firing, gone])
    store.write_acks([Acknowledgement(firing.id, now - 100, "ops", "known"),
                      Acknowledgement(gone.id, now - 100, "ops", "")])
    return store, firing.id, rma


def test_carry_takes_silences_not_ended_and_acks_of_open_alerts_once(tmp_path: Path) -> None:
    old, open_id, rma = old_store(tmp_path / "old.db", "node-001")
    new = SqliteStore(tmp_path / "new.db")
    done = carry(old, new, time.time())
    assert sorted(s.id for s in done.silences) == sorted([rma, f"next-{rma}"])
    assert [a.alert_id for a in done.acks] == [open_id]
    assert {s.id for s in new.silences()} == {rma, f"next-{rma}"}
    assert [s.comment for s in new.silences(time.time())] == ["RMA pending, ticket 4711"]
    again = carry(old, new, time.time())
    assert again.silences == [] and again.acks == []


def test_a_processor_on_victoria_warns_until_they_are_imported(
        tmp_path: Path, victoria: Server) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    old, _, rma = old_store(tmp_path / "fleetwatch.db", node)
    old.close()
    config_file = tmp_path / "vm.toml"
    config_file.write_text(f'[store]\nkind = "victoriametrics"\n'
                           f'url = "http://{victoria.address}"\n'
                           f'path = "{tmp_path}/fleetwatch.db"\n')
    config = load(config_file, env={})
    vm = VictoriaMetricsStore(f"http://{victoria.address}")
    try:
        said = left_behind(config, vm, time.time())
        assert said is not None and "holds 2 silence(s) in force and 1 acknowledgement(s)" \
            in said, said
        assert f"fleetwatch silence import --from {tmp_path}/fleetwatch.db" in said

        run = subprocess.run([sys.executable, "-m", "fleetwatch.cli", "--config",
                              str(config_file), "silence", "import", "--from",
                              str(tmp_path / "fleetwatch.db")],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert "imported 2 silence(s) and 1 acknowledgement(s)" in run.stderr
        assert f"{rma} node={node} until" in run.stdout
        # What the server now holds, read back as the processor reads it.
        assert [s.id for s in vm.silences(time.time()) if s.id == rma] == [rma]
        assert left_behind(config, vm, time.time()) is None
    finally:
        vm.close()


def test_a_file_at_store_path_that_is_no_store_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "fleetwatch.db").write_text("not a database, " * 100)
    config = load(None, env={"FLEETWATCH_STORE_KIND": "victoriametrics",
                             "FLEETWATCH_STORE_PATH": str(tmp_path / "fleetwatch.db")})
    new = SqliteStore(tmp_path / "new.db")
    assert left_behind(config, new, time.time()) is None
