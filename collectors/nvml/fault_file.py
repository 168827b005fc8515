"""``fleetwatch agent --fake-gpus N --fake-faults FILE``: faults a JSON file puts on a ``FakeNvml``.

    {"temp": {"3": 95}, "xid": [[4, 79]], "lost": [2]}

``temp``: GPU index -> die temperature in °C (GPUs not named: their usual 61 °C);
``lost``: GPUs that have fallen off the bus (every call GpuIsLost) while listed;
``xid``: [GPU, XID code] events, raised once each time the file is written.
The file is read again at every tick; a bad one at start stops the agent with what is
wrong, a bad one later is logged and the faults before it stay.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING

from fleetwatch.config import ConfigError

if TYPE_CHECKING:
    from fleetwatch.collectors.nvml.fake import FakeNvml

log = logging.getLogger(__name__)


class FaultFileError(ConfigError):
    """A ``--fake-faults`` file that cannot be used; the message names the key and value."""


FAULT_KEYS = ("temp", "xid", "lost")
TEMP_RANGE_C = (-40, 255)  # the catalogue's range of gpu_temp_c


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
        i = int(value) if isinstance(value, str) and value.isdigit() else value
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < gpus:
            raise ValueError(f"{key}: GPU {value!r} is not one of the {gpus} fake GPUs "
                             f"(0..{gpus - 1})")
        return i

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

    Temperatures and lost GPUs hold while the file says so; XIDs are events, raised
    once for each version of the file (a write: its modification time or content
    changed). Read at start it must be good (``FaultFileError``); later a bad or
    missing file (an edit half done) is logged once and the last good faults stay.
    """

    def __init__(self, path: str, nv: FakeNvml) -> None:
        self.path = path
        self.nv = nv
        self._base = [g.answers["temperature_c"] for g in nv.gpus]
        self._lost: set[int] = set()
        self._version: tuple[int, str] | None = None
        self._said = ""
        self._xids: list[tuple[int, int]] = []  # to raise at the next tick
        try:
            self._read(strict=True)
        except (OSError, ValueError) as exc:
            raise FaultFileError(f"--fake-faults {path}: {_reason(exc)}") from None

    def apply(self) -> None:
        """Read the file again if it changed; raise its XIDs if it did (or at the start)."""
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
        temp, xids, lost = parse_faults(text, len(self.nv.gpus))
        self._version, self._said = (mtime, text), ""
        nv = self.nv
        for i, g in enumerate(nv.gpus):
            g.answers["temperature_c"] = temp.get(i, self._base[i])
        for i in self._lost - lost:
            nv.restore(i)
        for i in lost:
            nv.lose(i)
        self._lost = lost
        self._xids = xids  # raised at the tick (the GPUs register for events at start)
        if not strict:
            log.info("--fake-faults %s: temp %s, lost %s, %d XIDs raised", self.path,
                     temp or "{}", sorted(lost), len(xids))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, OSError):
        return f"cannot read it: {exc.strerror or exc}"
    return str(exc)
