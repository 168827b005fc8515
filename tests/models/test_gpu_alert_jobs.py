"""A GPU's crash alerts (XID, lost, ECC) name the job that held the GPU, as the straggler and
stuck alerts do: the job's user looks for their job, and a lost GPU's frame names none."""

from __future__ import annotations

from fleetwatch.models.gpu_errors import GpuErrors
from fleetwatch.models.held_jobs import HeldJobs
from fleetwatch.models.xid_events import XidEvents
from tests.models.helpers import busy, node

T0 = 1_800_000_000.0


def test_an_xid_names_the_job_of_its_frame() -> None:
    (f,) = XidEvents().update([node(T0, [busy(60)] * 4, job="4000005", xids={2: (13,)})])
    assert f.message.startswith("GPU 2 on n1 (job 4000005): XID 13 ")


def test_a_gpu_lost_with_an_xid_79_names_the_job_it_held_before_its_frame_dropped_it() -> None:
    jobs = ["4000005"] * 4
    before = node(T0, [busy(60)] * 4, jobs=jobs)
    # The loss: the GPU reports no job any more (lost), its XID 79 with it.
    fell = node(T0 + 15, [busy(60)] * 4, jobs=[*jobs[:2], None, jobs[3]], lost=[2],
                xids={2: (79,)})
    xid, errors = XidEvents(), GpuErrors()
    xid.update([before])
    (x79,) = xid.update([fell])
    assert x79.message.startswith("GPU 2 on n1 (job 4000005): XID 79 ")
    # Both in one batch, as a replay hands them over.
    lost = [f for f in errors.update([before, fell]) if f.rule == "gpu_lost"]
    assert [f.message.split(" is lost")[0] for f in lost] == ["GPU 2 on n1 (job 4000005)"]
    assert lost[0].gpu == 2


def test_an_idle_gpu_names_no_job_and_an_old_job_is_not_kept() -> None:
    held = HeldJobs()
    held.see(node(T0, [busy(60)] * 2, job="j1"))
    held.see(node(T0 + 15, [busy(60)] * 2, job=None))   # the job ended normally
    lost = node(T0 + 30, [busy(60)] * 2, job=None, lost=[1])
    held.see(lost)
    assert held.of(lost, 1) == "" and held.where(lost, 1) == "GPU 1 on n1"
    held.see(node(T0 + 45, [busy(60)] * 2, job="j2"))
    held.drop(["n1"])
    assert held.of(node(T0 + 60, [busy(60)] * 2, job=None, lost=[0]), 0) == ""


def test_an_ecc_error_names_the_job() -> None:
    d = GpuErrors()
    d.update([node(T0, [busy(60, gpu_ecc_dbe_volatile_total=0.0)], job="4000007")])
    (f,) = d.update([node(T0 + 15, [busy(60, gpu_ecc_dbe_volatile_total=2.0)],
                          job="4000007")])
    assert f.rule == "gpu_ecc_dbe" and f.message.startswith("GPU 0 on n1 (job 4000007): ")


def test_a_second_gpu_lost_while_the_first_is_names_its_own_newest_job() -> None:
    held = HeldJobs()
    held.see(node(T0, [busy(60)] * 4, job="A"))
    held.see(node(T0 + 15, [busy(60)] * 4, jobs=["A", "A", None, "B"], lost=[2]))
    both = node(T0 + 30, [busy(60)] * 4, jobs=["A", "A", None, None], lost=[2, 3])
    held.see(both)
    assert (held.of(both, 2), held.of(both, 3), held.of(both, 0)) == ("A", "B", "A")
    back = node(T0 + 45, [busy(60)] * 4, jobs=["A", "A", None, None])  # back, idle
    held.see(back)
    assert held.of(back, 2) == "" and held.of(back, 3) == ""


def test_a_gpu_lost_after_its_samples_stopped_began_when_they_stopped() -> None:
    """Judged lost at the frame that says so (a recording: 5 minutes of silence on), its
    finding says the condition began at the first frame without a sample; one lost at
    once (XID 79, NVML) began at the frame that says so; one back and lost again began
    at its new silence."""
    d = GpuErrors()
    with_sample = [busy(60)] * 3
    silent = [busy(60), {}, busy(60)]   # GPU 1 listed with no metric: it missed the tick
    d.update([node(T0, with_sample), node(T0 + 15, silent), node(T0 + 30, silent)])
    (f,) = d.update([node(T0 + 315, with_sample, lost=[1])])
    assert (f.rule, f.ts, f.since) == ("gpu_lost", T0 + 315, T0 + 15)
    d.update([node(T0 + 330, with_sample), node(T0 + 345, silent)])
    (f,) = d.update([node(T0 + 360, with_sample, lost=[1])])
    assert f.since == T0 + 345
    d.update([node(T0 + 375, with_sample)])
    (f,) = d.update([node(T0 + 390, with_sample, lost=[1])])   # lost at once
    assert f.since == T0 + 390
