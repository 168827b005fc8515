"""NVML behind a narrow backend: the real library, or FakeNvml for tests and --fake-gpus."""

from fleetwatch.collectors.nvml.backend import NvmlBackend
from fleetwatch.collectors.nvml.fake import FakeNvml
from fleetwatch.collectors.nvml.fake_gpus import FakeGpu
from fleetwatch.collectors.nvml.pynvml_backend import PynvmlBackend
from fleetwatch.collectors.nvml.reader import (
    NvmlDriverGone,
    NvmlRead,
    NvmlReader,
    NvmlUnavailable,
)

__all__ = ["FakeGpu", "FakeNvml", "NvmlBackend", "NvmlDriverGone", "NvmlRead", "NvmlReader",
           "NvmlUnavailable", "PynvmlBackend"]
