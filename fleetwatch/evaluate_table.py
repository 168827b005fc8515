"""The text ``fleetwatch evaluate`` prints of its result (``evaluate.evaluate``): per fault
kind and mode, each detector set's recall, precision and delays; then each set's false
alarms and alert noise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if pct else f"{v:.0f}"


def table(result: Mapping[str, Any]) -> str:
    """The result as text: per kind and mode, one block of columns per detector set."""
    cols = result["columns"]
    head = f"{'kind':<14}{'mode':<8}{'faults':>7}"
    for name in cols:
        head += f" | {name[:26]:<26}"
    sub = " " * 29 + "".join(" | recall prec  p50s  p95s  1st" for _ in cols)
    lines = [f"{result['gpus']} GPUs ({result.get('part', 'a100')}), {result['hours']:g} h, "
             f"a sample every {result['interval_s']:g} s, {result['faults']} faults, "
             f"{result['seconds']:.0f} s", head, sub]
    first = next(iter(cols.values()))
    for kind, row in first["kinds"].items():
        for mode in ["all", *row["modes"]]:
            line = f"{kind:<14}{mode:<8}"
            for i, c in enumerate(cols.values()):
                r = c["kinds"][kind] if mode == "all" else c["kinds"][kind]["modes"][mode]
                if i == 0:
                    line += f"{r['faults']:>7}"
                prec = c["kinds"][kind]["precision"] if mode == "all" else None
                line += (f" | {_fmt(r['recall'], True):>6} {_fmt(prec, True):>4} "
                         f"{_fmt(r['delay_p50_s']):>5} {_fmt(r['delay_p95_s']):>5} "
                         f"{_fmt(r['delay_first_sample_p50_s']):>4}")
            lines.append(line)
    hidden = {k: r["never_visible"] for k, r in first["kinds"].items() if r.get("never_visible")}
    if hidden:
        lines.append("not counted, no reading ever showed them (e.g. a GPU stuck while no job "
                     "ran): " + ", ".join(f"{k} {n}" for k, n in hidden.items()))
    for name, c in cols.items():
        lines.append(f"{name}: precision {_fmt(c['precision'], True)} ({c['alerts']} alerts, "
                     f"{c['false_alarms']} false); false alarms on a healthy fleet: "
                     f"{c['false_alarms_per_1000_gpu_days']:.2f} per 1,000 GPU-days "
                     f"{c['healthy_alarms'] or ''}")
        lines.extend(_noise_lines(name, c["noise"]))
        hot = c.get("hot_room")
        if hot:
            lines.append(f"{name}: healthy fleet in a {hot['inlet_c']:g} °C room: "
                         f"{hot['false_alarms_per_1000_gpu_days']:.2f} false alarms per 1,000 "
                         f"GPU-days {hot['alarms'] or ''}, of them notified (not inhibited by "
                         f"a node, rack or room alert) {hot['notified_per_1000_gpu_days']:.2f} "
                         f"{hot['notified'] or ''}")
    return "\n".join(lines)


def _noise_lines(name: str, n: Mapping[str, Any]) -> list[str]:
    """Alerts per detected incident (all fired / notified: median, max) and re-fires of
    one rule on one subject within an hour, per kind and on the healthy fleet."""
    def one(r: Mapping[str, Any]) -> str:
        return (f"{_fmt(r['alerts_per_incident_p50'], True)}/"
                f"{_fmt(r['alerts_per_incident_max'])} "
                f"({_fmt(r['notified_per_incident_p50'], True)}/"
                f"{_fmt(r['notified_per_incident_max'])} notified), "
                f"{r['refires']} re-fires")
    h = n["healthy"]
    return [f"{name}: alerts per incident, median/max (notified), re-fires within 1 h: "
            + "; ".join(f"{k} {one(r)}" for k, r in n["kinds"].items()),
            f"{name}: healthy fleet: {h['alerts']} alerts, {h['notified']} notified, "
            f"{h['refires']} re-fires"]
