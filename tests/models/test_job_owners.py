"""A GPU alert that names a job names whom it belongs to, as the agent read them from the
scheduler (``GpuReading.info`` user and team): the on-call tells them their run died.
Where the frames name no owner, nothing is said of one."""

from __future__ import annotations

import dataclasses

from fleetwatch.frame import Frame
from fleetwatch.models.gpu_errors import GpuErrors
from fleetwatch.models.held_jobs import job_words
from fleetwatch.models.xid_events import XidEvents
from tests.models.helpers import busy, node

T0 = 1_800_000_000.0
OWNER = {"user": "user-02", "team": "multimodal"}


def owned(f: Frame, info: dict[str, str] = OWNER) -> Frame:
    """``f`` with each GPU that holds a job owned by ``info``."""
    return dataclasses.replace(f, gpus=tuple(
        dataclasses.replace(g, info=info) if g.job else g for g in f.gpus))


def test_an_xid_79_and_the_lost_gpu_name_the_jobs_user_and_team() -> None:
    jobs = ["4000003"] * 4
    before = owned(node(T0, [busy(60)] * 4, jobs=jobs))
    # The loss: the GPU reports no job any more, nor its owner.
    fell = owned(node(T0 + 15, [busy(60)] * 4, jobs=[*jobs[:2], None, jobs[3]], lost=[2],
                      xids={2: (79,)}))
    xid, errors = XidEvents(), GpuErrors()
    xid.update([before])
    (x79,) = xid.update([fell])
    assert x79.message.startswith("GPU 2 on n1 (job 4000003, user-02, team multimodal): "
                                  "XID 79 ")
    assert (x79.jobs, x79.users, x79.teams) == (("4000003",), ("user-02",), ("multimodal",))
    (lost,) = [f for f in errors.update([before, fell]) if f.rule == "gpu_lost"]
    assert lost.message.startswith("GPU 2 on n1 (job 4000003, user-02, team multimodal) ")
    assert (lost.users, lost.teams) == (("user-02",), ("multimodal",))


def test_no_owner_is_said_where_the_frames_name_none() -> None:
    (f,) = XidEvents().update([node(T0, [busy(60)] * 2, job="4000005", xids={1: (13,)})])
    assert f.message.startswith("GPU 1 on n1 (job 4000005): XID 13 ")
    assert (f.users, f.teams) == ((), ())
    # An idle GPU's XID names no job, so no owner either.
    idle = owned(node(T0, [busy(60)] * 2, job=None, xids={0: (13,)}), OWNER)
    idle = dataclasses.replace(idle, gpus=tuple(dataclasses.replace(g, info=OWNER)
                                                for g in idle.gpus))
    (f,) = XidEvents().update([idle])
    assert f.message.startswith("GPU 0 on n1: XID 13 ") and f.users == f.teams == ()


def test_job_words_say_only_what_is_known() -> None:
    assert job_words("42", {"user": "alice", "team": "vision"}) == "job 42, alice, team vision"
    assert job_words("42", {"team": "vision"}) == "job 42, team vision"
    assert job_words("42", {"user": "alice"}) == "job 42, alice"
    assert job_words("42", {}) == job_words("42", None) == "job 42"
    assert job_words("", {"user": "alice"}) == ""
    # A shared GPU: its jobs' users, each once.
    assert job_words("1,2", {"user": "alice,bob", "team": "vision"}) == \
        "job 1,2, alice,bob, team vision"
    assert job_words("1,2", {"user": "alice", "team": "vision,vision"}) == \
        "job 1,2, alice, team vision"
