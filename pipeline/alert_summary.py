"""Firing alerts in a few words, for a terminal line (``fleetwatch up``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from fleetwatch.pipeline.store.base import Alert

RULES_SHOWN = 3  # per subject in ``summary``; the rest are counted


def summary(alerts: Iterable[Alert], subjects: int = 2) -> str:
    """Firing alerts in a few words for a terminal line, worst first, by subject:
    ``node-001 gpu3: gpu_temp_critical, gpu_hot_vs_peers, gpu_hw_slowdown +2;
    node-004 host: node_silent; +3 more``. Empty when nothing fires."""
    rank = {"critical": 0, "warning": 1, "info": 2}
    by_subject: dict[tuple[str, str], list[Alert]] = defaultdict(list)
    for a in alerts:
        if a.state == "firing":
            by_subject[(a.node or a.device.removeprefix("rack:"), a.device)].append(a)

    def worst(item: tuple[tuple[str, str], list[Alert]]) -> tuple[int, float, tuple[str, str]]:
        subject, group = item
        return (min(rank.get(a.severity, 3) for a in group),
                min(a.fired_ts or a.started_ts for a in group), subject)

    ranked = sorted(by_subject.items(), key=worst)
    parts = []
    for (where, device), group in ranked[:subjects]:
        worst_of: dict[str, int] = {}
        for a in group:
            worst_of[a.rule] = min(worst_of.get(a.rule, 3), rank.get(a.severity, 3))
        rules = sorted(worst_of, key=lambda r: (worst_of[r], r))
        name = f"rack {where}" if device.startswith("rack:") else f"{where} {device}"
        more = f" +{len(rules) - RULES_SHOWN}" if len(rules) > RULES_SHOWN else ""
        parts.append(f"{name}: {', '.join(rules[:RULES_SHOWN])}{more}")
    rest = sum(len(g) for _, g in ranked[subjects:])
    if rest:
        parts.append(f"+{rest} more")
    return "; ".join(parts)
