"""The store backends every contract test runs on (``tests/store/test_contract_*.py``): one
set of assertions for every Store backend, what the dashboards and the processor rely on.
The ``backend`` fixture (``tests/store/conftest.py``) gives each test one ``Backend``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from fleetwatch.pipeline.store.base import Acknowledgement, Alert, Event, Silence, Store
from fleetwatch.pipeline.store.lprecords import render_message
from tests.servers import Server


class Backend:
    def __init__(self, store: Store, settle: Callable[[], None], keeps_text: bool = True,
                 victoria: Server | None = None, v1: bool = False) -> None:
        self.store = store
        self.settle = settle  # make what was written readable, as time would
        # VictoriaMetrics keeps numbers only: no alert message/action, no event text.
        self.keeps_text = keeps_text
        self.victoria = victoria  # VictoriaMetrics: its counters say the lines it refused
        self.v1 = v1  # InfluxDB 1.x through its v1 /write: some names cannot be tag values

    def as_kept(self, a: Alert) -> Alert:
        """The alert as this backend gives it back."""
        if self.keeps_text:
            return a
        return dataclasses.replace(a, message=render_message(a), action="", jobs=(),
                                   users=())

    def event_as_kept(self, e: Event) -> Event:
        return e if self.keeps_text else dataclasses.replace(e, text="")

    def silence_as_kept(self, s: Silence) -> Silence:
        return s if self.keeps_text else dataclasses.replace(s, comment="")

    def ack_as_kept(self, a: Acknowledgement) -> Acknowledgement:
        return a if self.keeps_text else dataclasses.replace(a, comment="")
