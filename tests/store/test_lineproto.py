"""The line layout: catalogue names survive the trip, text is escaped, no NaN reaches a server."""

from __future__ import annotations

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading, PortReading
from fleetwatch.pipeline.store.base import Alert, Annotation
from fleetwatch.pipeline.store.lineproto import (
    FrameEncoder,
    alert_line,
    annotation_line,
    split_metric,
)


def test_a_metric_splits_at_its_first_underscore() -> None:
    assert split_metric("gpu_temp_c") == ("gpu", "temp_c")
    assert split_metric("ib_symbol_errors_total") == ("ib", "symbol_errors_total")
    with pytest.raises(ValueError, match="prefix"):
        split_metric("temperature")


def test_non_finite_values_are_left_out_and_measurements_split() -> None:
    port = PortReading("mlx5_0/1", "ib", {"ib_rx_bytes_per_s": 5.0, "nic_rx_bytes_per_s": 7.0})
    frame = Frame("c", "r", "n,1", 1.5, (GpuReading(0, "u", "m", {
        "gpu_temp_c": float("nan"), "gpu_power_w": 300.0, "gpu_util_pct": float("inf")}),),
        HostReading({}, (port,)))
    lines: list[str] = []
    assert FrameEncoder().lines([frame], lines) == 3
    assert lines == [
        r"gpu,cluster=c,device=gpu0,node=n\,1,rack=r power_w=300.0 1500",
        r"ib,cluster=c,device=mlx5_0/1,node=n\,1,rack=r rx_bytes_per_s=5.0 1500",
        r"nic,cluster=c,device=mlx5_0/1,node=n\,1,rack=r rx_bytes_per_s=7.0 1500"]


def test_huge_finite_values_are_kept_even_when_their_sum_overflows() -> None:
    frame = Frame("c", "r", "n", 1.0, (GpuReading(0, "u", "m", {
        "gpu_nvlink_tx_bytes_total": 1.5e308, "gpu_nvlink_rx_bytes_total": 1.5e308}),))
    lines: list[str] = []
    assert FrameEncoder().lines([frame], lines) == 2
    assert "nvlink_tx_bytes_total=1.5e+308,nvlink_rx_bytes_total=1.5e+308" in lines[0]


def test_alert_and_annotation_text_travels_in_escaped_tags() -> None:
    alert = Alert("r/n/gpu1/5", "r", "critical", "c", "rk", "n", "gpu1", "firing", 1.0, 2.5,
                  91.0, "GPU 1 at 91 °C, limit=85\nsee runbook", fired_ts=2.0)
    assert alert_line(alert) == (
        r"fleetwatch_alert,id=r/n/gpu1/5,rule=r,severity=critical,cluster=c,rack=rk,node=n,"
        r"device=gpu1,message=GPU\ 1\ at\ 91\ °C\,\ limit\=85\ see\ runbook "
        "state=1.0,started_ts=1.0,updated_ts=2.5,value=91.0,fired_ts=2.0 2500")
    no_value = Alert("x", "r", "w", "c", "rk", "n", "host", "pending", 1.0, 1.0, float("nan"), "m")
    assert "value=" not in alert_line(no_value)  # a NaN would get the whole request refused
    note = Annotation("fault", 10.0, None, "n", "", "fan")
    assert annotation_line(note) == "fleetwatch_annotation,kind=fault,node=n,text=fan " \
                                    "start_ts=10.0 10000"


def test_values_are_written_as_text_that_reads_back_to_the_same_double() -> None:
    import random
    import struct

    rng = random.Random(7)
    values = [0.0, -0.0, 1.0, 71.0, 0.1, 1e16, 1e-7, 5e-324, 1.7976931348623157e308,
              4168543714.393, 2.0**53 + 2]
    values += [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(300)]
    values = [v for v in values if v == v and abs(v) != float("inf")]
    metrics = {f"gpu_m{i}": v for i, v in enumerate(values)}
    lines: list[str] = []
    FrameEncoder().lines([Frame("c", "r", "n", 1.0, (GpuReading(0, "u", "m", metrics),))],
                         lines)
    fields = lines[0].split(" ")[1].split(",")
    assert [float(f.split("=")[1]) for f in fields] == values
    assert all(f.split("=")[1].lstrip("-")[0].isdigit() for f in fields)  # no "null", no "nan"


def test_values_orjson_does_not_take_fall_back_to_repr() -> None:
    import numpy as np

    frame = Frame("c", "r", "n", 1.0, (GpuReading(0, "u", "m", {
        "gpu_temp_c": np.float64(61.5), "gpu_power_w": 300.0}),))
    lines: list[str] = []
    assert FrameEncoder().lines([frame], lines) == 2
    assert lines == ["gpu,cluster=c,device=gpu0,node=n,rack=r temp_c=61.5,power_w=300.0 1000"]
