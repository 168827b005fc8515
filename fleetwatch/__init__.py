"""fleetwatch: real-time telemetry and failure observability for GPU datacenters."""

__version__ = "0.1.0"
