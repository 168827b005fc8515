"""A frame cannot split one job's energy among users made up by commas, nor name a node
or job no dashboard page can be addressed by."""

from __future__ import annotations

import dataclasses

import pytest

from fleetwatch.codec import Decoder, FrameError, encode
from fleetwatch.frame import Frame, GpuReading, HostReading
from fleetwatch.pipeline.energy_owners import split_owner

TS = 1_763_800_000.0


def frame(job: str | None, **info: str) -> Frame:
    gpu = GpuReading(0, "GPU-0000", "NVIDIA A100-SXM4-80GB", {"gpu_power_w": 300.0},
                     job=job, info=info)
    return Frame("c1", "r1", "n1", TS, (gpu,), HostReading({}, ()), seq=1)


@pytest.mark.parametrize("job,info,field", [
    ("500", {"user": "alice,bob"}, "gpus[0].info.user"),
    ("500", {"user": "alice", "team": "physics,chem"}, "gpus[0].info.team"),
    ("111,222", {"user": "a,b,c"}, "gpus[0].info.user"),
    (None, {"user": "x,y"}, "gpus[0].info.user"),
])
def test_more_owners_than_jobs_are_refused_naming_the_field(job, info, field) -> None:
    with pytest.raises(FrameError) as e:
        Decoder().decode(encode(frame(job, **info)))
    assert e.value.field == field and "at most one per job" in e.value.reason


def test_paired_owners_of_a_shared_gpu_pass() -> None:
    f = frame("111,222", user="alice,bob", team="vision,")
    assert Decoder().decode(encode(f)) == f


def test_split_owner_never_invents_owners_by_splitting_a_name() -> None:
    assert split_owner(("777", "alice,bob", "physics,chem")) == ((("777", "", ""), 1.0),)
    assert split_owner(("111,222", "alice,bob", "x")) == (
        (("111", "alice", "x"), 0.5), (("222", "bob", "x"), 0.5))


@pytest.mark.parametrize("node,job,field", [
    ("..", "42", "node"), (".", None, "node"), ("n1", "..", "gpus[0].job"),
    ("n1", "111,.", "gpus[0].job")])
def test_dot_names_no_page_can_address_are_refused(node, job, field) -> None:
    f = dataclasses.replace(frame(job), node=node)
    with pytest.raises(FrameError) as e:
        Decoder().decode(encode(f))
    assert e.value.field == field and "must not be '.' or '..'" in e.value.reason


def test_names_with_dots_inside_pass() -> None:
    f = dataclasses.replace(frame("1.2,..x"), node="n1.example.com")
    assert Decoder().decode(encode(f)) == f
