"""The fleet heatmap's hover names each GPU's job and user: from the job events of the
last day, and from the energy ledger for a GPU that has held the same job longer."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.dashboards import figures, fleet
from fleetwatch.dashboards.data import read_fleet
from fleetwatch.dashboards.fleet_jobs import EVENTS_S, FleetJobs, booked
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.ledger import EnergyRow, bucket_floor
from fleetwatch.pipeline.store.sqlite import SqliteStore
from tests.energy.helpers import frame

NOW = 1_700_000_000.0


def _event(ts: float, kind: str, node: str, gpu: int, job: str, cluster: str = "c1"
           ) -> Event:
    return Event(ts, kind, cluster, "r1", node, f"gpu{gpu}", value=job)


def _row(hour: int, node: str, gpu: int, job: str, user: str, cluster: str = "c1"
         ) -> EnergyRow:
    return EnergyRow(hour, cluster, "r1", node, f"gpu{gpu}", job, user, "", 1e6, 0.0, 600.0,
                     0.0, 0.0, 0.0)


class Store:
    """Job events and ledger rows, counting the reads."""

    def __init__(self, events: list[Event], rows: list[EnergyRow]) -> None:
        self._events, self._rows, self.reads = events, rows, []

    def events(self, start: float, end: float, node=None, kinds=None, device=None,
               except_xids=()) -> list[Event]:
        self.reads.append((start, end))
        return [e for e in self._events if start <= e.ts < end and e.kind in kinds]

    def energy(self, start: float, end: float, cluster=None, node=None) -> list[EnergyRow]:
        return [r for r in self._rows if start <= r.bucket_ts < end]


def test_each_gpus_job_from_events_and_the_ledger() -> None:
    hour = bucket_floor(NOW)
    events = [_event(NOW - 7200, "job_start", "n1", 0, "777"),
              _event(NOW - 600, "job_start", "n1", 1, "778"),
              _event(NOW - 300, "job_end", "n1", 1, "778"),
              _event(NOW - 60, "job_start", "n1", 0, "777", cluster="c2")]
    rows = [_row(hour, "n1", 0, "777", "alice"), _row(hour, "n1", 1, "778", "bob"),
            # n2 GPU 3 has run job 9 for three days: no event in the day read, the
            # ledger's hours book it; n2 GPU 4 holds no job.
            _row(hour - 3600, "n2", 3, "9", "carol"), _row(hour, "n2", 3, "9", "carol"),
            _row(hour, "n2", 4, "", "")]
    store = Store(events, rows)
    jobs = FleetJobs().read(store, NOW)
    assert jobs == {("c1", "n1", 0): "777 · user alice", ("c1", "n2", 3): "9 · user carol",
                    ("c2", "n1", 0): "777"}  # c2's 777 is another job: its user unknown
    assert min(start for start, _ in store.reads) == NOW - EVENTS_S  # a day, not a month


def test_later_refreshes_read_only_the_newest_events() -> None:
    store = Store([_event(NOW - 7200, "job_start", "n1", 0, "777")], [])
    held = FleetJobs()
    held.read(store, NOW)
    store.reads.clear()
    store._events.append(_event(NOW + 10, "job_end", "n1", 0, "777"))
    assert held.read(store, NOW + 15) == {}
    assert all(end - start <= 3600 + 120 for start, end in store.reads)
    # A clock gone back a day (a simulation started again): read from scratch.
    store._events = [_event(NOW - 86400 - 60, "job_start", "n5", 2, "5")]
    assert held.read(store, NOW - 86400) == {("c1", "n5", 2): "5"}


def test_the_ledger_books_the_newest_hour() -> None:
    hour = bucket_floor(NOW)
    got = booked([_row(hour, "n1", 0, "1", "a"), _row(hour - 3600, "n1", 0, "0", "z"),
                  EnergyRow(hour, "c1", "r1", "n1", "cpu", "1", "a", "", 1.0, 0, 1, 0, 0, 0)])
    assert got == {("c1", "n1", 0): ("1", "a")}


def test_the_heatmap_hover_says_the_job_and_user_from_a_store(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.write([frame(NOW - 5, {g: {"gpu_temp_c": 50.0, "gpu_power_w": 300.0,
                                     "gpu_util_pct": 90.0} for g in range(2)}, node="n1")])
    store.write_events([_event(NOW - 900, "job_start", "n1", 0, "777")])
    store.write_energy([_row(bucket_floor(NOW), "n1", 0, "777", "alice")], [])
    view = read_fleet(store, NOW)
    _, fig, _, _ = fleet.parts(view, NOW, None, {}, FleetJobs().read(store, NOW))
    trace = fig.data[0]
    row = list(trace.y).index("n1")
    assert "job  777 · user alice" in figures.hover_text(trace, row, 0)
    assert "job" not in figures.hover_text(trace, row, 1)  # GPU 1 holds none
    store.close()
