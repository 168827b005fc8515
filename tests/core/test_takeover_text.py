"""An open alert taken over from a store that keeps no text (VictoriaMetrics gives back
``rule on node: value (evidence)``) is described again by its detector at once: its first
finding after the takeover is written (and so re-sent to Alertmanager) with the detector's
message, not up to ``refresh_s`` later (round 25, k8s run: "node_silent on a1 host: 39.99
(...)" in Alertmanager after every processor rollout). Times in the evidence read as dates,
a rack's ``last_frame_ts.<node>`` too (they read 1.79584e+09)."""

from __future__ import annotations

import dataclasses

from fleetwatch.frame import Frame, GpuReading
from fleetwatch.models import Finding
from fleetwatch.pipeline.alerts import AlertBook
from fleetwatch.pipeline.store.base import Alert, evidence_value
from fleetwatch.pipeline.store.lprecords import render_message

T = 1_795_840_000.0


def stored(message: str | None) -> Alert:
    a = Alert(id=f"node_silent/c/a1/host/{int(T * 1000)}", rule="node_silent",
              severity="critical", cluster="c", rack="r1", node="a1", device="host",
              state="firing", started_ts=T, updated_ts=T + 10, value=39.99, message="",
              evidence={"silent_s": 39.99, "keep_firing_s": 0.0}, fired_ts=T)
    return dataclasses.replace(a, message=render_message(a) if message is None else message)


def judged(message: str | None) -> list[Alert]:
    book = AlertBook(requirements={"node_silent": ()})
    book.load([stored(message)], T + 20)
    ts = T + 25  # within refresh_s of its last update
    finding = Finding("node_silent", "c", "r1", "a1", None, ts, 55.0,
                      "a1 has sent nothing for 55 s (its last frame: ...)", "critical",
                      evidence={"silent_s": 55.0, "keep_firing_s": 0.0}, scope="node")
    frame = Frame("c", "r1", "b2", ts, (GpuReading(0, "GPU-b2", "H100", {"gpu_temp_c": 50}),))
    return book.observe([frame], [finding])


def test_a_taken_over_alert_without_its_text_is_described_again_at_once() -> None:
    (changed,) = judged(None)
    assert changed.message == "a1 has sent nothing for 55 s (its last frame: ...)"
    assert changed.state == "firing" and changed.fired_ts == T


def test_one_that_kept_its_text_is_written_at_its_usual_pace() -> None:
    assert judged("a1 has sent nothing for 40 s (its last frame: ...)") == []


def test_a_racks_last_frame_times_read_as_dates() -> None:
    assert evidence_value("last_frame_ts.gpu-017", T) == "2026-11-28T04:26:40Z"
