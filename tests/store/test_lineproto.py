"""The line layout: catalogue names survive the trip, text is escaped, no NaN reaches a server."""

from __future__ import annotations

import pytest

from fleetwatch.frame import Frame, GpuReading, HostReading, PortReading
from fleetwatch.pipeline.store.base import Alert, Annotation
from fleetwatch.pipeline.store.lineproto import FrameEncoder, split_metric
from fleetwatch.pipeline.store.lprecords import alert_line, annotation_line


def lines_of(frames: list[Frame], encoder: FrameEncoder | None = None) -> list[str]:
    encoded = (encoder or FrameEncoder()).encode(frames)
    lines = encoded.body.decode().split("\n") if encoded.body else []
    assert encoded.lines == len(lines)
    return lines


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
    assert FrameEncoder().encode([frame]).points == 3
    assert lines_of([frame]) == [
        r"gpu,cluster=c,device=gpu0,node=n\,1,rack=r power_w=300.0 1500",
        r"ib,cluster=c,device=mlx5_0/1,node=n\,1,rack=r rx_bytes_per_s=5.0 1500",
        r"nic,cluster=c,device=mlx5_0/1,node=n\,1,rack=r rx_bytes_per_s=7.0 1500"]


def test_huge_finite_values_are_kept_even_when_their_sum_overflows() -> None:
    frame = Frame("c", "r", "n", 1.0, (GpuReading(0, "u", "m", {
        "gpu_nvlink_tx_bytes_total": 1.5e308, "gpu_nvlink_rx_bytes_total": 1.5e308}),))
    assert FrameEncoder().encode([frame]).points == 2
    lines = lines_of([frame])
    assert "nvlink_tx_bytes_total=1.5e+308,nvlink_rx_bytes_total=1.5e+308" in lines[0]


def test_alert_text_is_never_a_tag_and_travels_as_a_string_field_where_kept() -> None:
    alert = Alert("r/n/gpu1/5", "r", "critical", "c", "rk", "n", "gpu1", "firing", 1.0, 2.5,
                  91.0, 'GPU 1 at 91 °C, limit=85 "C:\\"', fired_ts=2.0,
                  evidence={"gpu_temp_c": 91.0, "limit c": 85.0}, action="drain")
    assert alert_line(alert) == (
        r"fleetwatch_alert,cluster=c,device=gpu1,id=r/n/gpu1/5,node=n,rack=rk,rule=r,"
        r"severity=critical state=1.0,started_ts=1.0,updated_ts=2.5,value=91.0,fired_ts=2.0,"
        r"evidence:gpu_temp_c=91.0,evidence:limit%20c=85.0 2500")  # a key's space: %20
    with_text = alert_line(alert, text=True)
    assert r'message="GPU 1 at 91 °C, limit=85 \"C:\\\""' in with_text
    assert with_text.endswith(',action="drain" 2500')
    no_value = Alert("x", "r", "w", "c", "rk", "n", "host", "pending", 1.0, 1.0, float("nan"), "m")
    assert "value=" not in alert_line(no_value)  # a NaN would get the whole request refused
    note = Annotation("fault", 10.0, None, "n", "", "fan")
    assert annotation_line(note) == "fleetwatch_annotation,kind=fault,node=n,text=fan " \
                                    "start_ts=10.0 10000"


def test_every_name_is_escaped_backslash_first_in_both_paths() -> None:
    """A node ``x\\,evil\\=1`` stays one tag value; a trailing backslash does not swallow the
    next tag: the template path and the careful (NaN) path write the same escapes."""
    port = PortReading("p\\", "nic", {"nic_rx_bytes_per_s": 1.0})
    frames = [Frame("c\\", "r", "x\\,evil\\=1", 1.0, (GpuReading(0, "u", "m", {
        "gpu_temp_c": 50.0}),), HostReading({}, (port,))),
        Frame("c\\", "r", "x\\,evil\\=1", 2.0, (GpuReading(0, "u", "m", {
            "gpu_temp_c": float("nan")}),), HostReading({}, (port,)))]
    assert lines_of(frames) == [
        r"gpu,cluster=c\\,device=gpu0,node=x\\\,evil\\\=1,rack=r temp_c=50.0 1000",
        r"nic,cluster=c\\,device=p\\,node=x\\\,evil\\\=1,rack=r rx_bytes_per_s=1.0 1000",
        r"nic,cluster=c\\,device=p\\,node=x\\\,evil\\\=1,rack=r rx_bytes_per_s=1.0 2000"]


def test_values_are_written_as_text_that_reads_back_to_the_same_double() -> None:
    import random
    import struct

    rng = random.Random(7)
    values = [0.0, -0.0, 1.0, 71.0, 0.1, 1e16, 1e-7, 5e-324, 1.7976931348623157e308,
              4168543714.393, 2.0**53 + 2]
    values += [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(300)]
    values = [v for v in values if v == v and abs(v) != float("inf")]
    metrics = {f"gpu_m{i}": v for i, v in enumerate(values)}
    lines = lines_of([Frame("c", "r", "n", 1.0, (GpuReading(0, "u", "m", metrics),))])
    fields = lines[0].split(" ")[1].split(",")
    assert [float(f.split("=")[1]) for f in fields] == values
    assert all(f.split("=")[1].lstrip("-")[0].isdigit() for f in fields)  # no "null", no "nan"


def test_values_orjson_does_not_take_fall_back_to_repr() -> None:
    import numpy as np

    frame = Frame("c", "r", "n", 1.0, (GpuReading(0, "u", "m", {
        "gpu_temp_c": np.float64(61.5), "gpu_power_w": 300.0}),))
    assert FrameEncoder().encode([frame]).points == 2
    assert lines_of([frame]) == [
        "gpu,cluster=c,device=gpu0,node=n,rack=r temp_c=61.5,power_w=300.0 1000"]


def parse_points(lines: list[str]) -> list[tuple[str, str, str, float, int]]:
    """(node, device, metric, value, ms) of each field, the way VictoriaMetrics names them."""
    out = []
    for line in lines:
        head, fields, ts = line.split(" ")
        measurement, *tag_pairs = head.split(",")
        tag = dict(p.split("=") for p in tag_pairs)
        for f in fields.split(","):
            key, value = f.split("=")
            out.append((tag["node"], tag["device"], f"{measurement}_{key}", float(value), int(ts)))
    return out


def expected_points(frames: list[Frame]) -> list[tuple[str, str, str, float, int]]:
    out = []
    for f in frames:
        devices = [(f"gpu{g.index}", g.metrics) for g in f.gpus] + [("host", f.host.metrics)]
        devices += [(p.name, p.metrics) for p in f.host.ports]
        out += [(f.node, device, name, value, round(f.ts * 1000))
                for device, metrics in devices for name, value in metrics.items()
                if value == value and abs(value) != float("inf")]
    return out


def random_frames(seed: int, n: int) -> list[Frame]:
    """Frames of a few nodes whose shapes repeat and change: GPUs lost, metrics
    missing, ports coming and going, the odd NaN."""
    import random

    rng = random.Random(seed)
    gpu_names = ["gpu_temp_c", "gpu_power_w", "gpu_sm_active", "gpu_mem_used_bytes"]
    frames = []
    for i in range(n):
        node = f"node-{rng.randrange(4)}"
        gpus = []
        for index in range(rng.choice([1, 2, 8])):
            names = gpu_names if rng.random() < 0.8 else rng.sample(gpu_names, rng.randrange(4))
            metrics = {m: rng.choice([rng.uniform(-1e6, 1e6), float(rng.randrange(100)), 1e-7])
                       for m in names}
            if rng.random() < 0.02:
                metrics[names[0] if names else "gpu_temp_c"] = float("nan")
            gpus.append(GpuReading(index, f"uuid-{index}", "H100", metrics))
        host = {"host_cpu_util_pct": rng.uniform(0, 100)} if rng.random() < 0.9 else {}
        ports = tuple(PortReading(f"mlx5_{k}/1", "ib", {"ib_rx_bytes_per_s": rng.uniform(0, 1e9)})
                      for k in range(rng.randrange(3)))
        frames.append(Frame("c", "r", node, 1.7e9 + i * 0.25, tuple(gpus),
                            HostReading(host, ports)))
    return frames


@pytest.mark.parametrize("max_templates", [50_000, 3])
def test_every_value_of_every_device_arrives_once_whatever_the_shapes(max_templates: int) -> None:
    encoder = FrameEncoder(max_templates=max_templates)  # 3: caches are cleared all along
    for seed in range(5):
        frames = random_frames(seed, 300)
        # Slices reuse the templates the earlier ones made, with new numbers in them.
        lines = [line for i in range(0, 300, 50) for line in lines_of(frames[i:i + 50], encoder)]
        assert sorted(parse_points(lines)) == sorted(expected_points(frames))
        assert encoder.encode(frames).points == len(expected_points(frames))


def test_a_frame_its_template_cannot_take_goes_line_by_line_among_others() -> None:
    import numpy as np

    def frame(ts: float, temp: object) -> Frame:
        return Frame("c", "r", "n", ts, (GpuReading(0, "u", "m", {
            "gpu_temp_c": temp, "gpu_power_w": 300.0}),))

    frames = [frame(1.0, 61.0), frame(2.0, float("inf")), frame(3.0, np.float64(62.5)),
              frame(4.0, 63.0)]
    assert lines_of(frames) == [
        "gpu,cluster=c,device=gpu0,node=n,rack=r temp_c=61.0,power_w=300.0 1000",
        "gpu,cluster=c,device=gpu0,node=n,rack=r power_w=300.0 2000",
        "gpu,cluster=c,device=gpu0,node=n,rack=r temp_c=62.5,power_w=300.0 3000",
        "gpu,cluster=c,device=gpu0,node=n,rack=r temp_c=63.0,power_w=300.0 4000"]
    assert FrameEncoder().encode(frames).points == 7
