"""Energy, carbon and money as people read them: three significant figures in a unit
that fits, the same on the dashboard, in the monthly report and on the command line.

A small fleet's first hours are tens of kWh and a few kg: "0.0 MWh" or "0.000 t"
would hide the number, and a large fleet's month is not better read in kWh.
"""

from __future__ import annotations

import math


def sig(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant figures (whole numbers shown whole), thousands
    separated: 0.490, 9.73, 26.3, 545, 1,394,360."""
    if x == 0 or not math.isfinite(x):
        return f"{x:,.0f}" if x == 0 else str(x)
    rounded = float(f"{x:.{digits}g}")  # 0.99996 -> 1.00, not 1.000
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{x:,.{decimals}f}"


def energy(kwh: float) -> str:
    """kWh below 1 MWh, MWh below 1 GWh, then GWh (as rounded: 999.96 kWh is 1.00 MWh);
    "unknown kWh" for NaN (a facility figure of refused carbon settings)."""
    if kwh != kwh:
        return "unknown kWh"
    shown = abs(float(f"{kwh:.3g}"))
    if shown >= 1e6:
        return f"{sig(kwh / 1e6)} GWh"
    if shown >= 1e3:
        return f"{sig(kwh / 1e3)} MWh"
    return f"{sig(kwh)} kWh"


def mass(kg: float) -> str:
    """CO2e in kg below a tonne, then in tonnes ("CO2e unknown": NaN, refused settings)."""
    if kg != kg:
        return "CO2e unknown"
    return f"{sig(kg / 1000)} t CO2e" if abs(float(f"{kg:.3g}")) >= 1000 else f"{sig(kg)} kg CO2e"


def money(amount: float, currency: str) -> str:
    """Cents below 1,000, whole units above ("unknown" for NaN)."""
    if amount != amount:
        return f"unknown {currency}"
    return f"{amount:,.2f} {currency}" if abs(amount) < 1000 else f"{amount:,.0f} {currency}"
