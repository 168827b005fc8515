"""The real pynvml backend on a driver before R535, and after GPUs come back re-enumerated."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TypeAlias

import pynvml
import pytest

from fleetwatch.collectors.nvml import PynvmlBackend

Driver: TypeAlias = Callable[[object], None]  # puts a stand-in libnvidia-ml under pynvml


class OldLib:
    """libnvidia-ml.so of driver 515: only the pre-R535 name of the clock reasons call."""

    def __init__(self) -> None:
        self.calls = 0

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object, ref: object) -> int:
        self.calls += 1
        ref._obj.value = 0x4 | 0x20  # type: ignore[attr-defined]  # SW power cap, SW thermal
        return pynvml.NVML_SUCCESS


class NewLib:
    """R535 and later: the new name (and the old one, still exported)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object, ref: object) -> int:
        self.calls.append("event")
        ref._obj.value = 0x8  # type: ignore[attr-defined]  # HW slowdown
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object, ref: object) -> int:
        self.calls.append("throttle")
        return pynvml.NVML_SUCCESS


class NoLib:
    """A driver with neither (not expected, but then the reasons are simply absent)."""


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Driver:
    def use(lib: object) -> None:
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    return use


def backend() -> PynvmlBackend:
    be = PynvmlBackend()
    be._h[0] = ctypes.c_void_p(1)
    return be


def test_clock_reasons_on_a_driver_before_r535_use_the_old_call(driver: Driver) -> None:
    lib = OldLib()
    driver(lib)
    be = backend()
    assert be.clocks_event_reasons(0) == 0x24
    assert be.clocks_event_reasons(0) == 0x24
    assert lib.calls == 2


def test_clock_reasons_on_r535_and_later_use_the_new_call(driver: Driver) -> None:
    lib = NewLib()
    driver(lib)
    be = backend()
    assert be.clocks_event_reasons(0) == 0x8
    assert lib.calls == ["event"]


def test_clock_reasons_with_neither_call_are_function_not_found(driver: Driver) -> None:
    driver(NoLib())
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        backend().clocks_event_reasons(0)


def test_the_choice_is_made_again_after_nvml_initialises_again(
        driver: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver upgraded under the agent (R515 -> R550): the new call is tried again."""
    driver(OldLib())
    be = backend()
    assert be.clocks_event_reasons(0) == 0x24
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    new = NewLib()
    driver(new)
    be.init()
    assert be.clocks_event_reasons(0) == 0x8 and new.calls == ["event"]


def address(h: object) -> int | None:
    return ctypes.cast(h, ctypes.c_void_p).value


def test_xid_events_find_gpus_re_opened_in_another_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVML hands out one handle per physical GPU; after a reset GPUs 2 and 3 swap indices.
    handles = {k: ctypes.c_void_p(0x1000 + k) for k in range(4)}
    order = [0, 1, 2, 3]
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: handles[order[i]])
    be = PynvmlBackend()
    for i in range(4):
        be.open(i)
    order[2], order[3] = 3, 2
    be.open(2)
    # Index 3 not re-opened yet: its board's handle (now index 2's) is no longer its own,
    # and the board now at index 3 is unknown until it is opened.
    assert {i: be._by_address.get(address(handles[p]), -1) for i, p in enumerate(order)} == {
        0: 0, 1: 1, 2: 2, 3: -1}
    be.open(3)
    assert be._by_address == {0x1000: 0, 0x1001: 1, 0x1003: 2, 0x1002: 3}

    events = []
    for index in (2, 3):
        e = pynvml.c_nvmlEventData_t()
        e.device = ctypes.cast(be._h[index], pynvml.c_nvmlDevice_t)
        e.eventType, e.eventData = 0x8, 48
        events.append(e)

    def wait(event_set: object, timeout_ms: int) -> pynvml.c_nvmlEventData_t:
        if not events:
            raise pynvml.NVMLError_Timeout()
        return events.pop(0)

    monkeypatch.setattr(pynvml, "nvmlEventSetWait", wait)
    be._events = object()
    assert be.xid_events_drain(10) == [(2, 48), (3, 48)]


def test_re_opening_the_same_gpu_keeps_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    handles = iter([ctypes.c_void_p(0x2000), ctypes.c_void_p(0x2010)])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: next(handles))
    be = PynvmlBackend()
    be.open(0)
    be.open(0)  # a new handle after a reset
    assert be._by_address == {0x2010: 0}
