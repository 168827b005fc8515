"""The store as an alert sink: every change, written as the alert's row."""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.base import SinkError
from fleetwatch.pipeline.store.base import Store, StoreError


class StoreSink:
    """Writes alert changes to a store (for a second store, or a replay's store).

    The processor's own store record is not a sink: it is written before the
    alert book moves on (see ``AlertBook.observe``), so no sink failure loses it.
    """

    name = "store"
    notify_only = False

    def __init__(self, store: Store) -> None:
        self.store = store

    def send(self, changes: Sequence[Notice]) -> None:
        try:
            self.store.write_alerts([n.alert for n in changes])
        except StoreError as exc:
            raise SinkError(str(exc)) from exc

    def close(self) -> None:
        pass
