"""Lemon scores count hardware incidents, not kernel-log lines or a job's own faults, and
are rebuilt from the store's events when a processor starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.models.lemon import LemonScore
from fleetwatch.models.lemon_points import INCIDENT_S, Incidents, xid_points
from fleetwatch.pipeline.processor import Processor
from fleetwatch.pipeline.store.base import Event
from fleetwatch.pipeline.store.sqlite import SqliteStore

T0 = 1_800_000_000.0
DAY = 86400.0
XID = re.compile(r"NVRM: Xid \([^)]*\): (\d+),")


def frame(ts: float, xids: dict[int, tuple[int, ...]] | None = None, node: str = "n1",
          lost: tuple[int, ...] = ()) -> Frame:
    gpus = tuple(GpuReading(i, f"GPU-{node}-{i}", "H100", {} if i in lost else
                            {"gpu_temp_c": 50.0}, None, "lost" if i in lost else "ok",
                            (xids or {}).get(i, ())) for i in range(8))
    return Frame("c", "r", node, ts, gpus, HostReading())


def test_application_xids_score_nothing_and_unknown_hardware_ones_score_one() -> None:
    assert [xid_points(c) for c in (13, 31, 43, 45)] == [0.0] * 4
    assert xid_points(48) == 3.0 and xid_points(999) == 1.0


def test_a_buggy_job_from_the_real_kernel_log_does_not_make_a_lemon(real_data: Path) -> None:
    log = (real_data / "failure_logs" / "gpud_dmesg_xid13_xid43_plus_oom.log").read_text()
    codes = tuple(int(c) for c in XID.findall(log))
    assert codes.count(13) == 16 and 43 in codes  # one exception, as the agent frames it
    lemon = LemonScore()
    found = []
    for crash in range(4):  # the job crashes four times on day 2
        found += lemon.update([frame(T0 + DAY + 3600 * crash, {6: codes})])
    assert found == [] and lemon.score("c", "n1", T0 + 2 * DAY) == 0.0


def test_one_gsp_hang_from_the_real_log_is_one_incident(real_data: Path) -> None:
    log = (real_data / "failure_logs" / "gpud_dmesg_xid119_gsp_timeout_XE9680.log").read_text()
    times = re.findall(r"\[\w+ \w+ \d+ (\d+):(\d+):(\d+) \d+\] NVRM: Xid \([^)]*\): 119,", log)
    assert len(times) == 5
    lemon = LemonScore()
    for h, m, s in times:
        lemon.update([frame(T0 + int(h) * 3600 + int(m) * 60 + int(s), {4: (119,)})])
    assert lemon.score("c", "n1", T0 + DAY / 2) == pytest.approx(xid_points(119), rel=0.01)


def test_an_ecc_incident_counts_once_by_its_worst_code_and_a_later_one_again() -> None:
    lemon = LemonScore()
    for k, code in enumerate((48, 63, 64)):
        lemon.update([frame(T0 + 12 * k, {3: (code,)})])
    lemon.update([frame(T0 + 40, {5: (79,)}), frame(T0 + 50, lost=(5,))])
    assert lemon.score("c", "n1", T0 + 60) == pytest.approx(3 + 5, rel=1e-3)  # was 11.2
    lemon.update([frame(T0 + INCIDENT_S + 1, {3: (48,)})])                  # a new incident
    assert lemon.score("c", "n1", T0 + INCIDENT_S + 1) == pytest.approx(11, rel=1e-3)


def test_incidents_add_only_what_a_worse_code_adds() -> None:
    inc = Incidents()
    gpu = ("c", "n1", "gpu3")
    assert [inc.add(gpu, T0 + k, code) for k, code in enumerate((63, 48, 48, 63))] == [
        1.0, 2.0, 0.0, 0.0]


def test_an_application_xid_opens_no_incident() -> None:
    """A job's XID 13 storm does not split a hardware incident in two: the 48 repeated
    200 s after the first counts once, as it does with no 13 before it (a rebuild reads
    no application XIDs, so live and rebuilt scores agree)."""
    inc = Incidents()
    gpu = ("c", "n1", "gpu3")
    got = [inc.add(gpu, T0 + ts, code) for ts, code in
           ((0, 13), (800, 48), (900, 13), (1000, 48))]
    assert got == [0.0, 3.0, 0.0, 0.0]


def events_of(events: list[Event]):  # noqa: ANN201
    def read(start: float, end: float, node: str | None = None,
             kinds: list[str] | None = None, device: str | None = None,
             except_xids: tuple[int, ...] = ()) -> list[Event]:
        return [e for e in events if start <= e.ts < end and (node is None or e.node == node)
                and (kinds is None or e.kind in kinds)
                and not (e.kind == "xid" and e.code in except_xids)]
    return read


def test_scores_are_rebuilt_from_stored_events_without_counting_a_frame_twice() -> None:
    stored = [Event(T0 - 2 * DAY + 3600 * k, "xid", "c", "r", "bad", "gpu1", code=48)
              for k in range(3)]
    stored += [Event(T0 - DAY, "xid", "c", "r", "bad", "gpu2", code=79),
               Event(T0 - DAY + 10, "gpu_state", "c", "r", "bad", "gpu2", value="lost"),
               Event(T0 - 60 * DAY, "xid", "c", "r", "bad", "gpu1", code=48)]  # too old
    lemon = LemonScore(threshold=10.0)
    lemon.use_events(events_of(stored))
    # The frame read again after the restart (stored already), then a new one.
    again = frame(T0 - DAY, {2: (79,)}, node="bad")
    found = lemon.update([again])
    # Three incidents of XID 48 an hour apart, the 79 and its loss one: as of T0.
    expected = sum(3 * 0.5 ** ((2 * DAY - 3600 * k) / (7 * DAY)) for k in range(3)) + (
        5 * 0.5 ** (1 / 7))                                      # nothing added by ``again``
    assert lemon.score("c", "bad", T0 - DAY) == pytest.approx(
        expected * 2 ** (1 / 7), rel=1e-3)
    assert found and found[0].rule == "lemon_node"
    lemon.update([frame(T0, lost=(2,), node="bad")])   # still lost: no new points
    assert lemon.score("c", "bad", T0) == pytest.approx(expected, rel=1e-3)
    lemon.update([frame(T0 + 1, {0: (48,)}, node="bad")])
    assert lemon.score("c", "bad", T0 + 1) == pytest.approx(expected + 3, rel=1e-3)


def test_a_restarted_processor_rebuilds_the_score_from_its_store(tmp_path: Path) -> None:
    def lemon_of(p: Processor) -> LemonScore:
        return p.detectors[0]  # type: ignore[return-value]

    store = SqliteStore(tmp_path / "fleet.db")
    first = Processor(store, [LemonScore(threshold=10.0)])
    # Trouble over more than a day (lemon.MIN_SPAN_S): a repeat offender.
    later = T0 + DAY
    batches = [[frame(T0, {3: (48,)})], [frame(later, {5: (79,)})],
               [frame(later + 10, lost=(5,))], [frame(later + 3600, {3: (48,)}, lost=(5,))]]
    for b in batches:
        first.process(b)
    before = lemon_of(first).score("c", "n1", later + 3600)
    assert before == pytest.approx(10.7, rel=0.01) and before > 10.0  # threshold crossed
    assert store.alerts()[0].rule == "lemon_node"
    again = Processor(SqliteStore(tmp_path / "fleet.db"), [LemonScore(threshold=10.0)])
    for b in batches[-2:]:  # read again from the bus: not counted twice
        again.process(b)
    again.process([frame(later + 3900, lost=(5,))])
    assert lemon_of(again).score("c", "n1", later + 3900) == pytest.approx(
        lemon_of(first).score("c", "n1", later + 3900), rel=1e-6)
    (alert,) = again.store.alerts()
    assert alert.rule == "lemon_node" and alert.state == "firing"


def test_the_rebuild_reads_no_application_xids_from_the_store(tmp_path: Path) -> None:
    """A start reads days of events: the store leaves out the application XIDs (a job's
    storm, which score nothing) and the score is what the frames gave."""
    store = SqliteStore(tmp_path / "fleet.db")
    live = LemonScore()
    frames = [frame(T0 + 60 * k, {1: (13, 13, 43)}, node=f"n{k % 10}") for k in range(2000)]
    frames += [frame(T0 + 7 * DAY, {2: (79,)}, node="n3"),
               frame(T0 + 7 * DAY + 5, {2: (13,)}, node="n3", lost=(2,))]
    Processor(store, [live]).process(frames)
    assert len(store.events(T0 - 1, T0 + 8 * DAY, kinds=["xid"])) == 6002
    read: list[int] = []

    def counted(*args: object, **kw: object) -> list[Event]:
        got = store.events(*args, **kw)  # type: ignore[arg-type]
        read.append(len(got))
        return got

    rebuilt = LemonScore()
    rebuilt.use_events(counted)
    rebuilt.update([frame(T0 + 7 * DAY + 60, node=f"n{k}") for k in range(10)])
    assert sum(read) == 2  # the XID 79 and the loss, of 6,003 stored events
    at = T0 + 7 * DAY + 60
    assert rebuilt.score("c", "n3", at) == pytest.approx(live.score("c", "n3", at))
    assert rebuilt.score("c", "n3", at) == pytest.approx(5.0, rel=1e-3)
    store.close()


def test_a_store_whose_events_cannot_be_read_leaves_scores_in_memory(caplog) -> None:  # noqa: ANN001
    def broken(*args: object, **kw: object) -> list[Event]:
        raise RuntimeError("InfluxStore writes only")

    lemon = LemonScore()
    lemon.use_events(broken)
    lemon.update([frame(T0, {3: (48,)})])
    lemon.update([frame(T0 + 10, {3: (48,)}, node="n2")])  # a new node: asked (once)
    assert lemon.score("c", "n1", T0) == 3.0 and lemon.score("c", "n2", T0 + 10) == 3.0
    said = [r.getMessage() for r in caplog.records if "start from zero" in r.getMessage()]
    assert len(said) == 2 and "InfluxStore writes only" in said[0]


def test_a_loss_stored_at_the_time_of_its_xid_79_is_one_incident() -> None:
    # The store returns events of one instant in its own order: here the loss first.
    stored = [Event(T0, "gpu_state", "c", "r", "n1", "gpu5", value="lost"),
              Event(T0, "xid", "c", "r", "n1", "gpu5", code=79)]
    lemon = LemonScore()
    lemon.load_events(stored)
    assert lemon.score("c", "n1", T0) == 5.0
