"""The record itself: the decoder's fast constructor builds the same frozen reading."""

from __future__ import annotations

import dataclasses

import pytest

from fleetwatch.frame import GpuReading, gpu_reading


def test_gpu_reading_fast_constructor_equals_the_dataclass() -> None:
    args = (3, "GPU-1", "NVIDIA H100 80GB HBM3", {"gpu_temp_c": 61.0}, "job-7", "lost", (79, 48),
            {"serial": "1650"})
    fast = gpu_reading(*args)
    assert type(fast) is GpuReading
    assert fast == GpuReading(*args)
    assert [getattr(fast, f.name) for f in dataclasses.fields(GpuReading)] == list(args)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.index = 4  # type: ignore[misc]
