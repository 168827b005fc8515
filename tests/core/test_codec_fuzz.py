"""The decoder judges every malformed input as ``FrameError``, and nothing else.

Anything else escaping ``decode`` (a ``TypeError`` from an unhashable map
value, say) crashes the processor on that message, and again after every
restart: a poison message. Random MessagePack structures, and valid frames
with one random part replaced, must only ever raise ``FrameError``.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import msgpack
import pytest

from fleetwatch.codec import Decoder, FrameError, encode
from tests.core.test_codec import frame, pack, raw


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["nil", "bool", "int", "bigint", "float", "nan", "str", "bytes"]
    if depth < 4:
        kinds += ["list", "map", "list", "map"]
    kind = rng.choice(kinds)
    if kind == "nil":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.randint(-5, 70)
    if kind == "bigint":
        return rng.choice([-(2**63), 2**64 - 1, 2**31, -(2**31) - 1])
    if kind == "float":
        return rng.choice([0.0, -1.0, 1.763e9, 1e308, -1e308, 5e-324, rng.uniform(-1e3, 1e3)])
    if kind == "nan":
        return rng.choice([float("nan"), float("inf"), float("-inf")])
    if kind == "str":
        return rng.choice(["", "gpu", "a" * 300, "\x00\n", "é", "x\\,y=1"])
    if kind == "bytes":
        return rng.randbytes(rng.randint(0, 8))
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 9))]
    out: dict[Any, Any] = {}
    for _ in range(rng.randint(0, 5)):
        key = random_value(rng, 5)  # scalars only: msgpack itself refuses unhashable keys
        out[key] = random_value(rng, depth + 1)
    return out


def mutate(rng: random.Random, body: Any) -> Any:
    """``body`` with one part (at any depth) replaced by a random value."""
    if not isinstance(body, (list, dict)) or not body or rng.random() < 0.25:
        return random_value(rng)
    if isinstance(body, list):
        i = rng.randrange(len(body))
        return body[:i] + [mutate(rng, body[i])] + body[i + 1:]
    key = rng.choice(list(body))
    if rng.random() < 0.2:
        out = {k: v for k, v in body.items() if k != key}
        out[random_value(rng, 5)] = body[key]
        return out
    return {**body, key: mutate(rng, body[key])}


def judge(decoder: Decoder, data: bytes | None) -> None:
    with contextlib.suppress(FrameError):
        decoder.decode(data)


def test_a_list_in_a_gpu_info_map_is_a_frame_error_naming_it() -> None:
    body = raw(frame())
    body[6][0][7] = {"pci_bus_id": ["00000000:07:00.0"]}
    decoder = Decoder()
    decoder.decode(encode(frame()))  # the key is known good now: the quick check sees the list
    with pytest.raises(FrameError) as err:
        decoder.decode(pack(body))
    assert err.value.field.startswith("gpus[0].info")


def test_a_tombstone_is_a_frame_error() -> None:
    with pytest.raises(FrameError, match="tombstone"):
        Decoder().decode(None)


@pytest.mark.parametrize("seed", range(4))
def test_random_structures_only_ever_raise_frame_errors(seed: int) -> None:
    rng = random.Random(seed)
    decoder = Decoder()
    for _ in range(3000):
        judge(decoder, msgpack.packb(random_value(rng), use_bin_type=True))


@pytest.mark.parametrize("seed", range(4))
def test_valid_frames_with_one_random_part_only_ever_raise_frame_errors(seed: int) -> None:
    rng = random.Random(seed)
    decoder = Decoder()
    good = raw(frame())
    for _ in range(5000):
        judge(decoder, pack(mutate(rng, good)))
    decoder.decode(encode(frame()))  # and a good frame still decodes after all that


def test_random_bytes_only_ever_raise_frame_errors() -> None:
    rng = random.Random(7)
    decoder = Decoder()
    valid = encode(frame())
    for _ in range(3000):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        judge(decoder, bytes(data))
