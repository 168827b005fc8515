"""MetricsQL text for the VictoriaMetrics store: selectors, quoting, and rows read back.

Shared by ``victoria`` (samples, alerts, events, silences) and ``energy_victoria``
(the energy ledger).
"""

from __future__ import annotations

import re
from typing import Any

from fleetwatch.pipeline.store.base import SeriesKey

SERIES_LABELS = ("cluster", "rack", "node", "device")


def series_selector(metric: str, **labels: str | None) -> str:
    """``{__name__="metric",label="value",...}``, each value quoted; None: not matched."""
    matchers = [f'__name__="{quote(metric)}"']
    matchers += [f'{k}="{quote(v)}"' for k, v in labels.items() if v is not None]
    return "{" + ",".join(matchers) + "}"


def quote(text: str) -> str:
    """``text`` inside a double-quoted MetricsQL string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def regex_literal(text: str) -> str:
    """``text`` matched literally inside a MetricsQL regex."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)


def join_rows(measurement: str, result: list[dict[str, Any]]
               ) -> list[tuple[dict[str, str], dict[str, float]]]:
    """Rows of a measurement from per-field series: fields that share tags and a
    timestamp were written on one line. Takes instant vectors (``value``) or
    range vectors (``values``)."""
    rows: dict[tuple[object, ...], tuple[dict[str, str], dict[str, float]]] = {}
    skip = len(measurement) + 1
    for r in result:
        labels = dict(r["metric"])
        field = labels.pop("__name__", "")[skip:]
        tag_key = tuple(sorted(labels.items()))
        samples = r["values"] if "values" in r else [(None, r["value"][1])]
        for t, v in samples:
            row = rows.setdefault((tag_key, t), (labels, {}))
            row[1][field] = float(v)
    return list(rows.values())


def series_key(metric: str, labels: dict[str, str]) -> SeriesKey:
    return SeriesKey(metric, *(labels.get(k, "") for k in SERIES_LABELS))
