"""The job page's header names whom the job belongs to, as the store has it: the energy
ledger's (job, user, team) rows, else the owners its alerts carry; nothing where unknown."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from fleetwatch.dashboards import job_data
from fleetwatch.frame import Frame, GpuReading
from fleetwatch.pipeline.events import EventTracker
from fleetwatch.pipeline.store.ledger import EnergyRow, job_owners, owner_text
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.dashboards.fakes import alert


def row(job_id: str, user: str, team: str, device: str = "gpu0") -> EnergyRow:
    return EnergyRow(7200, "sim", "r0", "n1", device, job_id, user, team, 3.6e6, 0.0,
                     3600.0, 0.0, 0.0, 0.0)


def test_the_owner_is_the_ledgers_then_the_alerts() -> None:
    rows = [row("42", "alice", "vision"), row("42", "alice", "vision", "gpu1"),
            row("43", "bob", "llm"), row("", "", "")]
    assert job_owners(rows, (), "42") == (("alice",), ("vision",))
    assert job_owners(rows, (), "44") == ((), ())
    a = dataclasses.replace(alert("n1", 0), jobs=("44",), users=("carol",), teams=("rl",))
    assert job_owners(rows, (a,), "44") == (("carol",), ("rl",))
    assert owner_text((("alice",), ("vision",))) == "alice · team vision"
    assert owner_text(((), ("vision",))) == "team vision"
    assert owner_text(((), ())) == ""


def test_read_job_names_the_owner_from_the_stores_ledger(tmp_path: Path) -> None:
    """Frames with a job and its owner through the processor's event tracker and the
    store's energy ledger, as ``fleetwatch up`` writes them; the job page reads them."""
    store = SqliteStore(tmp_path / "s.db")
    now = time.time()
    tracker = EventTracker()
    info = {"user": "user-02", "team": "multimodal"}
    frames = [Frame("sim", "r0", "n1", now - 600 + 15 * k,
                    (GpuReading(3, "GPU-x", "H100", {"gpu_power_w": 300.0}, job="4000003",
                                info=info),)) for k in range(3)]
    store.write_events(tracker.update(frames))
    store.write_energy([row("4000003", "user-02", "multimodal", "gpu3")._replace(
        bucket_ts=int(now - 600) // 3600 * 3600)], [])
    (found,) = job_data.find_jobs(store, "4000003", now)
    view = job_data.read_job(store, found, now - 900, now, now)
    assert view.owners == (("user-02",), ("multimodal",))
    store.close()
