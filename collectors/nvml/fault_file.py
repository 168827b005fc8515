"""``fleetwatch agent --fake-gpus N --fake-faults FILE``: faults a JSON file puts on a ``FakeNvml``.

    {"temp": {"3": 95}, "xid": [[4, 79]], "lost": [2],
     "counters": {"1": {"gpu_ecc_dbe_volatile_total": 1, "gpu_row_remap_pending": 1}},
     "per_min": {"0": {"gpu_pcie_replay_total": 20}}}

``temp``: GPU index -> die temperature in °C (GPUs not named: their usual 61 °C);
``lost``: GPUs that have fallen off the bus (every call GpuIsLost) while listed;
``xid``: [GPU, XID code] events, raised once each time the file is written;
``counters``: GPU index -> {error counter or flag (``COUNTERS``): value} the GPU's NVML
field answers while listed (not listed: its usual value);
``per_min``: GPU index -> {counter: rise per minute}: the counter climbs at that rate
from its value when listed (ECC, PCIe replay, NVLink error rates).
The file is read again at every tick; a bad one at start stops the agent with what is
wrong, a bad one later is logged and the faults before it stay.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetwatch.collectors.nvml import backend as b
from fleetwatch.config import ConfigError

if TYPE_CHECKING:
    from fleetwatch.collectors.nvml.fake import FakeNvml

log = logging.getLogger(__name__)


class FaultFileError(ConfigError):
    """A ``--fake-faults`` file that cannot be used; the message names the key and value."""


FAULT_KEYS = ("temp", "xid", "lost", "counters", "per_min")
TEMP_RANGE_C = (-40, 255)  # the catalogue's range of gpu_temp_c
# The error counters and flags a fault file may set: our metric name -> NVML field id
# (collectors/nvml/fields.py reads them back under these names). The H100 fake answers
# "not supported" for the retired-page fields (Hopper remaps rows): set, they answer.
COUNTERS: dict[str, int] = {
    "gpu_ecc_sbe_volatile_total": b.FI_ECC_SBE_VOL_TOTAL,
    "gpu_ecc_dbe_volatile_total": b.FI_ECC_DBE_VOL_TOTAL,
    "gpu_ecc_sbe_aggregate_total": b.FI_ECC_SBE_AGG_TOTAL,
    "gpu_ecc_dbe_aggregate_total": b.FI_ECC_DBE_AGG_TOTAL,
    "gpu_retired_pages_sbe": b.FI_RETIRED_SBE, "gpu_retired_pages_dbe": b.FI_RETIRED_DBE,
    "gpu_retired_pages_pending": b.FI_RETIRED_PENDING,
    "gpu_remapped_rows_correctable": b.FI_REMAPPED_COR,
    "gpu_remapped_rows_uncorrectable": b.FI_REMAPPED_UNC,
    "gpu_row_remap_pending": b.FI_REMAPPED_PENDING,
    "gpu_row_remap_failure": b.FI_REMAPPED_FAILURE,
    "gpu_pcie_replay_total": b.FI_PCIE_REPLAY_COUNTER,
    "gpu_nvlink_crc_errors_total": b.FI_NVLINK_CRC_FLIT_ERROR_TOTAL,
    "gpu_nvlink_replay_errors_total": b.FI_NVLINK_REPLAY_ERROR_TOTAL,
    "gpu_nvlink_recovery_errors_total": b.FI_NVLINK_RECOVERY_ERROR_TOTAL,
}
COUNTER_MAX = 1e15  # the catalogue's range of the counters
Fields = dict[tuple[int, int], float]  # (GPU index, NVML field id) -> value


def parse_counters(doc: dict, key: str, gpus: int) -> Fields:
    """``counters`` or ``per_min``: {GPU: {counter: value}} as (GPU, field id) -> value;
    raises ``ValueError`` naming the key, the GPU, the counter and the value."""
    by_gpu = doc.get(key, {})
    if not isinstance(by_gpu, dict):
        raise ValueError(f"{key}: expected an object of GPU index -> {{counter: value}}, got "
                         f"{by_gpu!r}")
    out: Fields = {}
    for gpu, values in by_gpu.items():
        i = _index(key, gpu, gpus)
        if not isinstance(values, dict):
            raise ValueError(f"{key}.{gpu}: expected an object of counter -> value, got "
                             f"{values!r}")
        for name, v in values.items():
            if name not in COUNTERS:
                raise ValueError(f"{key}.{gpu}: unknown counter {name!r} (the counters are "
                                 f"{', '.join(COUNTERS)})")
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= COUNTER_MAX:
                raise ValueError(f"{key}.{gpu}.{name}: {v!r} is not a number 0..{COUNTER_MAX:g}")
            out[i, COUNTERS[name]] = float(v)
    return out


def _index(key: str, value: object, gpus: int) -> int:
    i = int(value) if isinstance(value, str) and value.isdigit() else value
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < gpus:
        raise ValueError(f"{key}: GPU {value!r} is not one of the {gpus} fake GPUs "
                         f"(0..{gpus - 1})")
    return i


def parse_faults(text: str, gpus: int) -> tuple[dict[int, int], list[tuple[int, int]],
                                                 set[int]]:
    """The file's (temp, xid, lost); raises ``ValueError`` naming the key and value."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"expected an object such as {{\"temp\": {{\"3\": 95}}}}, got "
                         f"{text.strip()[:40]!r}")
    unknown = sorted(set(doc) - set(FAULT_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (the keys are {', '.join(FAULT_KEYS)})")

    def index(key: str, value: object) -> int:
        return _index(key, value, gpus)

    temp: dict[int, int] = {}
    temps = doc.get("temp", {})
    if not isinstance(temps, dict):
        raise ValueError(f"temp: expected an object of GPU index -> °C, got {temps!r}")
    for k, v in temps.items():
        low, high = TEMP_RANGE_C
        if isinstance(v, bool) or not isinstance(v, int | float) or not low <= v <= high:
            raise ValueError(f"temp.{k}: {v!r} is not a temperature in °C ({low}..{high})")
        temp[index("temp", k)] = round(v)
    xids: list[tuple[int, int]] = []
    listed = doc.get("xid", [])
    if not isinstance(listed, list):
        raise ValueError(f"xid: expected a list of [GPU, XID code] pairs, got {listed!r}")
    for n, pair in enumerate(listed):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise ValueError(f"xid[{n}]: {pair!r} is not a [GPU, XID code] pair")
        code = pair[1]
        if isinstance(code, bool) or not isinstance(code, int) or not 0 < code < 1 << 16:
            raise ValueError(f"xid[{n}]: XID code {code!r} is not a whole number 1..65535")
        xids.append((index(f"xid[{n}]", pair[0]), code))
    lost = doc.get("lost", [])
    if not isinstance(lost, list):
        raise ValueError(f"lost: expected a list of GPU indices, got {lost!r}")
    return temp, xids, {index("lost", i) for i in lost}


class FaultFile:
    """``--fake-faults FILE``: faults a JSON file puts on a ``FakeNvml``, read every tick.

    Temperatures, lost GPUs and counters hold while the file says so; a ``per_min``
    counter climbs at every tick from its value when first listed; XIDs are events,
    raised once for each version of the file (a write: its modification time or content
    changed). Read at start it must be good (``FaultFileError``); later a bad or
    missing file (an edit half done) is logged once and the last good faults stay.
    """

    def __init__(self, path: str, nv: FakeNvml,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.nv = nv
        self.clock = clock
        self._base = [g.answers["temperature_c"] for g in nv.gpus]
        self._base_fields = [dict(g.fields) for g in nv.gpus]
        self._set: set[tuple[int, int]] = set()   # fields the file changed, to restore
        self._per_min: Fields = {}
        self._climb: Fields = {}    # the climbing counters' values now
        self._t = clock()
        self._lost: set[int] = set()
        self._version: tuple[int, str] | None = None
        self._said = ""
        self._xids: list[tuple[int, int]] = []  # to raise at the next tick
        try:
            self._read(strict=True)
        except (OSError, ValueError) as exc:
            raise FaultFileError(f"--fake-faults {path}: {_reason(exc)}") from None

    def apply(self) -> None:
        """Read the file again if it changed; raise its XIDs if it did (or at the start).
        The counters that climb do so first, by the time since the last tick."""
        now = self.clock()
        minutes, self._t = (now - self._t) / 60.0, now
        for (i, fid), rate in self._per_min.items():
            self._climb[i, fid] += rate * minutes
            self.nv.gpus[i].fields[fid] = self._climb[i, fid]
        try:
            self._read(strict=False)
        except (OSError, ValueError) as exc:
            said = f"--fake-faults {self.path}: {_reason(exc)}; the faults before stay"
            if said != self._said:
                self._said = said
                log.warning("%s", said)
        for i, code in self._xids:
            self.nv.inject_xid(i, code)
        self._xids = []

    def _read(self, strict: bool) -> None:
        mtime = os.stat(self.path).st_mtime_ns
        with open(self.path, encoding="utf-8") as fh:
            text = fh.read()
        if self._version == (mtime, text):
            return
        n = len(self.nv.gpus)
        temp, xids, lost = parse_faults(text, n)
        counters = parse_counters(json.loads(text), "counters", n)
        per_min = parse_counters(json.loads(text), "per_min", n)
        self._version, self._said = (mtime, text), ""
        nv = self.nv
        self._counters(counters, per_min)
        for i, g in enumerate(nv.gpus):
            g.answers["temperature_c"] = temp.get(i, self._base[i])
        for i in self._lost - lost:
            nv.restore(i)
        for i in lost:
            nv.lose(i)
        self._lost = lost
        self._xids = xids  # raised at the tick (the GPUs register for events at start)
        if not strict:
            log.info("--fake-faults %s: temp %s, lost %s, %d XIDs raised, %d counters set, "
                     "%d climbing", self.path, temp or "{}", sorted(lost), len(xids),
                     len(counters), len(per_min))

    def _counters(self, counters: Fields, per_min: Fields) -> None:
        """Set the file's counters, start (or go on climbing) its ``per_min`` ones, and
        give the fields it no longer names their usual answers back."""
        gpus = self.nv.gpus
        for i, fid in self._set - set(counters) - set(per_min):
            if fid in self._base_fields[i]:
                gpus[i].fields[fid] = self._base_fields[i][fid]
            else:
                gpus[i].fields.pop(fid, None)
        for (i, fid), v in counters.items():
            gpus[i].fields[fid] = v
        climb = {}
        for (i, fid) in per_min:
            now = gpus[i].fields.get(fid)
            climb[i, fid] = self._climb.get((i, fid), now if isinstance(now, int | float)
                                            else 0.0)
            if (i, fid) not in self._per_min and (i, fid) in counters:
                climb[i, fid] = counters[i, fid]
            gpus[i].fields[fid] = climb[i, fid]
        self._climb, self._per_min = climb, per_min
        self._set = set(counters) | set(per_min)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, OSError):
        return f"cannot read it: {exc.strerror or exc}"
    return str(exc)
