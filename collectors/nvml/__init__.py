"""NVML behind a narrow backend: the real library, or FakeNvml for tests and --fake-gpus."""

from fleetwatch.collectors.nvml.backend import NvmlBackend, PynvmlBackend
from fleetwatch.collectors.nvml.fake import FakeGpu, FakeNvml
from fleetwatch.collectors.nvml.reader import NvmlRead, NvmlReader, NvmlUnavailable

__all__ = ["FakeGpu", "FakeNvml", "NvmlBackend", "NvmlRead", "NvmlReader", "NvmlUnavailable",
           "PynvmlBackend"]
