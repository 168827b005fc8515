from __future__ import annotations

import dataclasses

from fleetwatch.pipeline.store.base import Alert
from fleetwatch.scoring import Truth
from fleetwatch.scoring_noise import noise, refires


def changes(rule: str, fired: float, resolved: float | None, node: str = "n1",
            device: str = "gpu0", severity: str = "warning") -> list[Alert]:
    """An alert's stored changes: pending, firing, and resolved if it did."""
    a = Alert(f"{rule}/c/{node}/{device}/{fired}", rule, severity, "c", "r1", node, device,
              "pending", fired - 10, fired - 10, 1.0, "m")
    out = [a, dataclasses.replace(a, state="firing", updated_ts=fired, fired_ts=fired)]
    if resolved is not None:
        out.append(dataclasses.replace(out[-1], state="resolved", updated_ts=resolved,
                                       resolved_ts=resolved))
    return out


def test_refires_are_firings_of_one_rule_on_one_gpu_within_an_hour_of_its_last_end() -> None:
    flap = (changes("gpu_temp_high", 1000, 1500) + changes("gpu_temp_high", 1620, 2000)
            + changes("gpu_temp_high", 9000, None)            # 7,000 s later: a new episode
            + changes("gpu_temp_high", 1700, 1800, device="gpu1")   # another GPU
            + changes("gpu_temp_critical", 1650, 1700))       # another rule
    assert refires(flap) == ["gpu_temp_high/c/n1/gpu0/1620"]


def test_noise_counts_alerts_and_notified_alerts_per_incident_and_refires() -> None:
    truths = [Truth("cooling", "sudden", "r1", "n1", 0, 1000, 5000, 1000),
              Truth("cooling", "sudden", "r1", "n2", 0, 1000, 5000, 1000),
              Truth("xid79", "sudden", "r1", "n3", 0, 1000, 5000, 1000)]
    faulty = (changes("gpu_temp_high", 1100, 1500) + changes("gpu_temp_high", 1600, None)
              + changes("gpu_temp_critical", 1200, None, severity="critical")
              + changes("gpu_temp_high", 1100, None, node="n2"))
    healthy = changes("gpu_temp_high", 100, 200, node="n9") + changes("gpu_temp_high", 900,
                                                                      None, node="n9")
    n = noise(truths, faulty, healthy)
    cooling = n["kinds"]["cooling"]
    # n1: 3 alerts; the re-fired warning came under the firing critical: not notified.
    assert (cooling["alerts_per_incident_p50"], cooling["alerts_per_incident_max"]) == (2, 3)
    assert (cooling["notified_per_incident_p50"], cooling["notified_per_incident_max"]) == (
        1.5, 2)
    assert cooling["refires"] == 1
    assert n["kinds"]["xid79"]["alerts_per_incident_max"] is None   # not detected
    assert n["healthy"] == {"alerts": 2, "notified": 2, "refires": 1}


def test_a_rack_alert_firing_for_hours_still_covers_its_gpus_thermal_alerts() -> None:
    # The stored changes keep the rack alert's firing form (updated then); a live processor
    # re-writes it every minute, so it is judged (inhibition.judged) as long as it fires: a
    # GPU warming an hour into the rack's incident is no second page.
    rack = changes("rack_cooling", 1000, None, node="", device="rack:r1", severity="critical")
    gpu = changes("gpu_temp_high", 1000 + 3600, None)
    truths = [Truth("rack_cooling", "sudden", "r1", "", None, 990, 9000, 990)]
    n = noise(truths, rack + gpu, [])
    kind = n["kinds"]["rack_cooling"]
    assert (kind["alerts_per_incident_max"], kind["notified_per_incident_max"]) == (2, 1)
