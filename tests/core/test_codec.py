from __future__ import annotations

import dataclasses
import math
import re

import msgpack
import pytest

from fleetwatch.codec import MAX_FRAME_BYTES, Decoder, FrameError, decode, encode
from fleetwatch.frame import Frame, GpuReading, HostReading, PortReading

TS = 1_763_800_000.0


def frame(**over) -> Frame:
    gpu = GpuReading(0, "GPU-0000", "NVIDIA A100-SXM4-80GB",
                     {"gpu_temp_c": 61.0, "gpu_power_w": 312.5, "gpu_util_pct": 97.0},
                     job="4000123", xids=(79,), info={"pci_bus_id": "00000000:07:00.0"})
    lost = GpuReading(1, "GPU-0001", "NVIDIA A100-SXM4-80GB", {}, state="lost")
    host = HostReading({"host_cpu_util_pct": 12.5},
                       (PortReading("mlx5_0/1", "ib", {"ib_rx_bytes_per_s": 1e9}),))
    base = Frame("c1", "r1", "n1", TS, (gpu, lost), host, seq=7)
    return dataclasses.replace(base, **over)


def raw(f: Frame) -> list:
    return msgpack.unpackb(encode(f), strict_map_key=False)


def pack(body) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


def test_round_trip_keeps_every_field() -> None:
    f = frame()
    assert decode(encode(f)) == f


def test_encoding_is_smaller_than_json() -> None:
    import json

    f = frame()
    assert len(encode(f)) < len(json.dumps(dataclasses.asdict(f))) / 2


@pytest.mark.parametrize("cut", [1, 5, 20, -1])
def test_truncated_frame_is_rejected(cut: int) -> None:
    data = encode(frame())
    with pytest.raises(FrameError, match="truncated or corrupt|8 fields|must be"):
        decode(data[:cut])


def test_empty_and_non_bytes() -> None:
    with pytest.raises(FrameError, match="empty"):
        decode(b"")
    with pytest.raises(FrameError, match="expected bytes"):
        decode("text")  # type: ignore[arg-type]


def test_unknown_version_names_the_field() -> None:
    body = raw(frame())
    body[0] = 99
    with pytest.raises(FrameError) as exc:
        decode(pack(body))
    assert exc.value.field == "v"
    assert "unknown frame version 99" in str(exc.value)


@pytest.mark.parametrize("index, value, field, message", [
    (1, 5, "cluster", "must be a string"),
    (3, "", "node", "1..256 characters"),
    (4, "yesterday", "ts", "must be a number"),
    (4, 1.7e12, "ts", "between 2000 and 2100"),  # milliseconds sent as seconds
    (5, -1, "seq", "non-negative integer"),
    (6, "gpus", "gpus", "must be an array"),
])
def test_wrong_types_name_the_field(index: int, value, field: str, message: str) -> None:
    body = raw(frame())
    body[index] = value
    with pytest.raises(FrameError, match=message) as exc:
        decode(pack(body))
    assert exc.value.field == field


@pytest.mark.parametrize("value, why", [
    (math.nan, "nan C is not finite"), (math.inf, "inf C is not finite"),
    (-math.inf, "-inf C is not finite"),
    (1000.0, r"1000.0 C is outside the possible range [-40, 255]")])
def test_an_impossible_reading_is_left_out_and_the_rest_of_the_frame_kept(
        value: float, why: str) -> None:
    """One glitching sensor must not cost the node's other readings (a dead-lettered
    frame blinds fleetwatch to all eight GPUs, every interval)."""
    body = raw(frame())
    body[6][0][5][13] = value  # gpu_temp_c has catalogue id 13
    d = Decoder()
    got = d.decode(pack(body))
    assert dict(got.gpus[0].metrics) == {"gpu_power_w": 312.5, "gpu_util_pct": 97.0}
    assert got.gpus[0].xids == (79,) and got.host.metrics == {"host_cpu_util_pct": 12.5}
    assert d.dropped == [("gpus[0].metrics.gpu_temp_c", why)]
    d.decode(encode(frame()))
    assert d.dropped == []                                   # of the last frame only


def test_a_failed_sensors_all_ones_reading_reaches_the_detectors() -> None:
    """An 8-bit sensor that fails reads 255: within range, so that the sensor rule sees it."""
    body = raw(frame())
    body[6][0][5][13] = 255
    assert decode(pack(body)).gpus[0].metrics["gpu_temp_c"] == 255.0


def test_a_metric_that_is_no_number_is_still_a_malformed_frame() -> None:
    body = raw(frame())
    body[6][0][5][13] = "hot"
    with pytest.raises(FrameError, match="must be a number, got str") as exc:
        decode(pack(body))
    assert exc.value.field == "gpus[0].metrics.gpu_temp_c"


def test_unknown_metric_id_and_wrong_scope() -> None:
    """A number under an id this catalogue lacks (a later agent's metric) is left out and
    named in ``unknown``, the rest of the frame decoded (deploy finding 2, r22); a value
    that is no number, or a key that is no id, still rejects the frame."""
    body = raw(frame())
    body[6][0][5][9999] = 1.0
    body[7][0][106_000] = 7  # a host metric of a later release, an integer
    decoder = Decoder()
    got = decoder.decode(pack(body))
    assert got == frame() and decoder.unknown == [("gpu", 9999), ("host", 106_000)]
    assert decoder.decode(encode(frame())) == frame() and decoder.unknown == []
    for key, value, said in [(9999, "hot", "unknown metric id with a value that is no number"),
                             (9999, None, "unknown metric id with a value"),
                             (9999, True, "unknown metric id with a value"),
                             (-1, 1.0, "unknown metric id (an id is a non-negative"),
                             (1 << 40, 1.0, "unknown metric id (an id is a non-negative"),
                             ("gpu_temp_c", 1.0, "unknown metric id")]:
        body = raw(frame())
        body[6][0][5][key] = value
        with pytest.raises(FrameError, match=re.escape(said)):
            decode(pack(body))
    body = raw(frame())
    body[6][0][5][100] = 5.0  # host_cpu_util_pct inside a GPU
    with pytest.raises(FrameError, match="is a host metric, not a gpu one"):
        decode(pack(body))


def test_duplicate_gpu_index_and_bad_state() -> None:
    body = raw(frame())
    body[6][1][0] = 0
    with pytest.raises(FrameError, match="GPU 0 appears twice"):
        decode(pack(body))
    body = raw(frame())
    body[6][0][4] = 7
    with pytest.raises(FrameError, match="0 \\(ok\\) or 1 \\(lost\\)"):
        decode(pack(body))


def test_bad_xid_is_rejected() -> None:
    body = raw(frame())
    body[6][0][6] = [79, "boom"]
    with pytest.raises(FrameError) as exc:
        decode(pack(body))
    assert exc.value.field == "gpus[0].xids[1]"


def test_oversized_frame_is_rejected_before_parsing() -> None:
    with pytest.raises(FrameError, match="over the limit"):
        decode(b"\x90" * (MAX_FRAME_BYTES + 1))
    small = Decoder(max_bytes=100)
    with pytest.raises(FrameError, match="over the limit of 100"):
        small.decode(encode(frame()))


def test_too_many_gpus() -> None:
    body = raw(frame())
    body[6] = [[i, f"GPU-{i}", "m", None, 0, {}, [], {}] for i in range(65)]
    with pytest.raises(FrameError, match="over the limit of 64"):
        decode(pack(body))


@pytest.mark.parametrize("index, value, field", [(4, 0.0, "gpus[0].state"),
                                                 (4, True, "gpus[0].state")])
def test_float_or_bool_where_an_enum_belongs(index: int, value, field: str) -> None:
    body = raw(frame())
    body[6][0][index] = value
    with pytest.raises(FrameError) as exc:
        decode(pack(body))
    assert exc.value.field == field


def test_float_port_kind_is_rejected() -> None:
    body = raw(frame())
    body[7][1][0][1] = 1.0
    with pytest.raises(FrameError) as exc:
        decode(pack(body))
    assert exc.value.field == "host.ports[0].kind"


@pytest.mark.parametrize("slot, value, field, message", [
    (1, 7, "gpus[1].uuid", "must be a string"),
    (2, "", "gpus[1].model", "1..256 characters"),
    (3, 4000123, "gpus[1].job", "must be a string"),
    (3, "job\x00", "gpus[1].job", "printable"),
    (5, [1.0], "gpus[1].metrics", "map of metric id"),
    (7, {"serial": 5}, "gpus[1].info.serial", "must be a string"),
    (7, [], "gpus[1].info", "map of at most"),
])
def test_bad_gpu_fields_are_named_even_after_good_frames(slot: int, value, field: str,
                                                         message: str) -> None:
    # The decoder remembers strings it has seen pass, so the same decoder
    # first sees good frames: a bad value must not slip through that memory.
    decoder = Decoder()
    for _ in range(3):
        decoder.decode(encode(frame()))
    body = raw(frame())
    body[6][1][slot] = value
    with pytest.raises(FrameError, match=message) as exc:
        decoder.decode(pack(body))
    assert exc.value.field == field


def test_known_strings_are_still_checked_as_strings_of_their_field() -> None:
    # "GPU-0000" has passed as a uuid; as a job it is still a fine string, and
    # the same text as an info key is fine too: known-good strings are reused.
    decoder = Decoder()
    decoder.decode(encode(frame()))
    body = raw(frame())
    body[6][1][3] = "GPU-0000"
    body[6][1][7] = {"GPU-0000": "c1"}
    got = decoder.decode(pack(body))
    assert got.gpus[1].job == "GPU-0000" and got.gpus[1].info == {"GPU-0000": "c1"}


# -- what a rejection quotes of the message, and the field's shape (hostile senders) --

@pytest.mark.parametrize("index, value", [
    (0, "X" * 1_000_000),           # an unknown version of a megabyte
    (5, "X" * 1_000_000),           # a seq that is a megabyte of text
    (5, [["X" * 1000] * 1000]),     # a seq that is a nested list of a megabyte
    (5, b"X" * 1_000_000),          # bytes
])
def test_a_rejection_quotes_at_most_a_few_hundred_characters_of_the_message(
        index: int, value) -> None:
    body = raw(frame())
    body[index] = value
    with pytest.raises(FrameError) as exc:
        Decoder(max_bytes=4 << 20).decode(pack(body))
    text = str(exc.value)
    assert len(text) < 600, len(text)
    assert "XXXX" in text  # still shows what came


def test_an_unknown_metric_key_of_200_kb_is_cut_in_field_and_reason() -> None:
    body = raw(frame())
    body[6][0][5]["k" * 200_000] = 1.0
    with pytest.raises(FrameError, match="unknown metric id") as exc:
        decode(pack(body))
    assert len(exc.value.field) < 400 and len(str(exc.value)) < 600
    assert exc.value.field.startswith("gpus[0].metrics['kkkk")


@pytest.mark.parametrize("field, shape", [
    ("", "frame"),
    ("v", "v"),
    ("ts", "ts"),
    ("seq", "seq"),
    ("node", "node"),
    ("gpus", "gpus"),
    ("gpus[3]", "gpus"),
    ("gpus[0].metrics[10001]", "gpus.metrics"),
    ("gpus[0].metrics['" + "k" * 300 + "']", "gpus.metrics"),
    ("gpus[0].metrics['a.b]c.uuid']", "gpus.metrics"),
    ("gpus[0].metrics.gpu_temp_c", "gpus.metrics"),
    ("gpus[7].index", "gpus.index"),
    ("gpus[0].info key", "gpus.info"),
    ("gpus[0].info.some key of the sender", "gpus.info"),
    ("gpus[1].xids[4]", "gpus.xids"),
    ("host", "host"),
    ("host.metrics[4242]", "host.metrics"),
    ("host.ports[12].kind", "host.ports.kind"),
    ("host.ports[0].metrics['x']", "host.ports.metrics"),
    ("gpus[0].metrics.gpu_temp_c.extra", "gpus.metrics"),
    ("something else", "frame"),
])
def test_the_shape_of_a_field_is_one_of_a_fixed_few(field: str, shape: str) -> None:
    from fleetwatch.frame_checks import field_shape

    assert field_shape(field) == shape


def test_every_rejection_of_random_keys_has_a_shape_from_the_fixed_set() -> None:
    """2,000 frames each with a metric id of its own: one label value, not 2,000."""
    from fleetwatch.frame_checks import field_shape

    shapes = set()
    for i in range(2000):
        body = raw(frame())
        body[6][0][5][10_000 + i] = "x"  # a later id, but no number: malformed
        with pytest.raises(FrameError) as exc:
            decode(pack(body))
        shapes.add(field_shape(exc.value.field))
    assert shapes == {"gpus.metrics"}


@pytest.mark.parametrize("data, looks", [
    (b'{"node": "x", "ts": 1763800000, "gpus": []}', "JSON"),
    (b'  [1, 2, 3]\n', "JSON"),
    (b"hello world", "text"),
    (b"42", "JSON"),  # MessagePack reads the first byte as a whole message: an integer
    (b"cpu,host=a usage=1.5 1763800000000000000\n", "text"),  # Telegraf's line protocol
])
def test_json_or_text_says_what_it_looks_like_and_what_a_frame_is(
        data: bytes, looks: str) -> None:
    with pytest.raises(FrameError) as exc:
        decode(data)
    text = str(exc.value)
    assert f"looks like {looks}" in text, text
    assert "not a fleetwatch frame" in text
    assert "MessagePack" in text and "fleetwatch agent" in text
    assert "truncated or corrupt" not in text


def test_binary_garbage_is_still_truncated_or_corrupt_messagepack() -> None:
    with pytest.raises(FrameError, match="truncated or corrupt") as exc:
        decode(encode(frame())[:20])
    assert "looks like" not in str(exc.value)
    with pytest.raises(FrameError, match="truncated or corrupt"):
        decode(b"\xc1")


def test_a_job_name_longer_than_the_codec_takes_is_cut_with_a_marker() -> None:
    """Another producer's 304-character job id: the node's readings are kept, the job
    cut to 256 characters ending in "…" (it used to cost the whole frame)."""
    long_job = "slurm-" + "x" * 298
    f = frame()
    body = raw(f)
    body[6][0][3] = long_job
    got = Decoder().decode(pack(body))
    job = got.gpus[0].job
    assert job is not None and len(job) == 256 and job.endswith("…")
    assert job[:-1] == long_job[:255]
    assert got.gpus[0].metrics == f.gpus[0].metrics
