"""The time-series store: one ``Store`` protocol, a backend per server.

``sqlite`` (embedded, the default) and the line-protocol backends for
servers that speak the InfluxDB v2 write API. Dashboards and reports read
only through this protocol.
"""

from fleetwatch.pipeline.store.base import (
    ACTIVE_STATES,
    Alert,
    AlertState,
    AlertStore,
    Annotation,
    Event,
    EventStore,
    Point,
    SeriesKey,
    Store,
    StoreError,
    StoreRejected,
    gpu_device,
    gpu_index,
)

__all__ = ["ACTIVE_STATES", "Alert", "AlertState", "AlertStore", "Annotation", "Event",
           "EventStore", "Point", "SeriesKey", "Store", "StoreError", "StoreRejected",
           "gpu_device", "gpu_index"]
