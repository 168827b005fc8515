"""The dashboard: Dash pages over the store (read only). ``serve`` runs it."""

from fleetwatch.dashboards.app import create_app, serve

__all__ = ["create_app", "serve"]
