from __future__ import annotations

from fleetwatch.pipeline.store.base import Alert
from fleetwatch.scoring import Truth, false_alarms_per_1000_gpu_days, percentile, score


def alert(rule: str, node: str, device: str, fired: float | None, rack: str = "r1",
          aid: str | None = None) -> Alert:
    return Alert(aid or f"{rule}/{node}/{device}/{fired}", rule, "critical", "c", rack, node,
                 device, "firing" if fired is not None else "pending", 0.0,
                 fired or 0.0, 1.0, "m", fired_ts=fired)


def gpu_fault(kind: str = "cooling", node: str = "n1", gpu: int = 0, onset: float = 1000,
              end: float = 2000, mode: str = "drift", first: float | None = None) -> Truth:
    return Truth(kind, mode, "r1", node, gpu, onset, end, onset if first is None else first)


def test_recall_precision_and_delays_per_kind() -> None:
    truths = [gpu_fault(onset=1000), gpu_fault(node="n2", onset=1000),
              gpu_fault(node="n3", onset=1000)]
    alerts = [alert("temp", "n1", "gpu0", 1030), alert("temp", "n2", "gpu0", 1090),
              alert("temp", "n1", "gpu1", 1500)]  # n3 missed; n1/gpu1 is a false alarm
    s = score(truths, alerts)
    k = s["kinds"]["cooling"]
    assert (k["faults"], k["detected"]) == (3, 2)
    assert abs(k["recall"] - 2 / 3) < 1e-9
    assert k["delay_p50_s"] == 60 and abs(k["delay_p95_s"] - 87) < 1e-9
    assert abs(k["precision"] - 2 / 3) < 1e-9 and k["rules"] == ["temp"]
    assert abs(s["precision"] - 2 / 3) < 1e-9 and s["false_alarms"] == 1
    assert s["rules"]["temp"] == {"alerts": 3, "true": 2, "false": 1, "kinds": ["cooling"]}


def test_a_fault_no_reading_showed_counts_in_no_recall() -> None:
    # A GPU stuck while no job ran on it looks like any idle GPU: no detector could see it.
    hidden = Truth("stuck", "sudden", "r1", "n2", 0, 1000, 2000, 1000, visible=False)
    truths = [gpu_fault("stuck", mode="sudden"), hidden]
    s = score(truths, [alert("stuck", "n1", "gpu0", 1060)])
    k = s["kinds"]["stuck"]
    assert (k["faults"], k["never_visible"], k["detected"], k["recall"]) == (1, 1, 1, 1.0)
    assert k["modes"]["sudden"]["never_visible"] == 1 and k["delay_p50_s"] == 60


def test_time_window_is_onset_to_end_plus_grace() -> None:
    truths = [gpu_fault(onset=1000, end=2000)]
    early = alert("temp", "n1", "gpu0", 999)            # already firing before: not a detection
    late = alert("temp", "n1", "gpu0", 2000 + 301)
    s = score(truths, [early, late], grace_s=300)
    assert s["kinds"]["cooling"]["detected"] == 0 and s["false_alarms"] == 2
    assert score(truths, [alert("temp", "n1", "gpu0", 2300)], grace_s=300)[
        "kinds"]["cooling"]["detected"] == 1


def test_subjects_inside_a_node_or_rack_fault_match_it_but_not_the_other_way() -> None:
    rack = Truth("rack_cooling", "drift", "r1", "", None, 1000, 2000, 1000)
    node = Truth("node_silent", "sudden", "r2", "n9", None, 1000, 2000, 1000)
    alerts = [alert("rack_temp", "", "rack:r1", 1100), alert("temp", "n4", "gpu3", 1050),
              alert("silent", "n9", "host", 1020, rack="r2"),
              alert("xid", "n9", "gpu2", 1030, rack="r2"),
              alert("temp", "n5", "gpu0", 1100, rack="r3")]   # another rack: false
    s = score([rack, node], alerts)
    assert s["kinds"]["rack_cooling"]["detected"] == 1
    assert s["kinds"]["rack_cooling"]["delay_p50_s"] == 50   # the first alert inside it
    assert s["kinds"]["node_silent"]["delay_p50_s"] == 20
    assert s["false_alarms"] == 1
    # A node alert does not match a GPU fault on that node (it is not inside the GPU).
    # ... but it is no false alarm either: a node that keeps failing is about that fault.
    gpu = gpu_fault(node="n9")
    s = score([gpu], [alert("lemon", "n9", "", 1020), alert("lemon", "n8", "", 1020)])
    assert s["kinds"]["cooling"]["detected"] == 0
    assert s["false_alarms"] == 1 and s["rules"]["lemon"]["true"] == 1


def test_delay_from_first_faulty_sample_and_modes() -> None:
    truths = [gpu_fault(onset=1000, mode="sudden", first=1015),
              gpu_fault(node="n2", onset=1000, mode="drift")]
    s = score(truths, [alert("xid", "n1", "gpu0", 1020), alert("xid", "n2", "gpu0", 1200)])
    modes = s["kinds"]["cooling"]["modes"]
    assert modes["sudden"]["delay_first_sample_p50_s"] == 5
    assert modes["sudden"]["delay_p50_s"] == 20
    assert modes["drift"]["delay_p50_s"] == 200


def test_an_alert_counts_once_and_pending_alerts_do_not_count() -> None:
    truths = [gpu_fault()]
    a = alert("temp", "n1", "gpu0", 1100, aid="x")
    resolved = Alert("x", "temp", "critical", "c", "r1", "n1", "gpu0", "resolved", 0, 1500,
                     1, "m", fired_ts=1100, resolved_ts=1500)
    s = score(truths, [alert("temp", "n1", "gpu0", None), a, resolved])
    assert s["alerts"] == 1 and s["precision"] == 1.0


def test_a_rule_that_matched_nothing_lowers_only_the_overall_precision() -> None:
    truths = [gpu_fault()]
    s = score(truths, [alert("temp", "n1", "gpu0", 1010), alert("noisy", "n7", "gpu1", 1010)])
    assert s["kinds"]["cooling"]["precision"] == 1.0 and s["precision"] == 0.5
    assert s["rules"]["noisy"]["kinds"] == []


def test_false_alarm_rate_and_percentiles() -> None:
    alerts = [alert("temp", "n1", "gpu0", 10), alert("temp", "n1", "gpu1", None)]
    assert false_alarms_per_1000_gpu_days(alerts, gpus=1000, seconds=86400) == 1.0
    assert percentile([], 50) is None and percentile([5], 95) == 5
    assert percentile([0, 10], 50) == 5
