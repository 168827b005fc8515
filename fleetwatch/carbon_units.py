"""What a grid carbon file's header says about its values: the intensity column's unit
and the time column's zone (``carbon.read_intensity_csv``, ``carbon.read_hourly_csv``).

A unit is never guessed: lb/MWh (US EPA eGRID, WattTime's MOER) read as g/kWh is 2.2 x
the CO2e, kg/kWh a thousandth of it. The unit is the one ``carbon.intensity_csv_unit``
declares, else the one the column's name spells (``co2_lb_per_mwh``, ``Carbon Intensity
gCO₂eq/kWh (direct)``); a file that declares none is read as g/kWh only where its values
are plausible for it (``PLAUSIBLE_G_PER_KWH``). Pure: names and numbers."""

from __future__ import annotations

import re
from datetime import datetime

from fleetwatch.settings_energy import PLAUSIBLE_G_PER_KWH

LB_KG = 0.45359237  # the international avoirdupois pound, exactly (1959)
# gCO2e/kWh per one of each unit. kg/MWh and g/kWh are the same quantity.
G_PER_KWH = {"g/kWh": 1.0, "kg/MWh": 1.0, "lb/MWh": LB_KG, "kg/kWh": 1000.0,
             "t/MWh": 1000.0, "lb/kWh": 1000.0 * LB_KG}
_MASS = {"g": "g", "kg": "kg", "lb": "lb", "lbs": "lb", "t": "t", "tonne": "t", "tonnes": "t"}
_UNIT = re.compile(r"(?<![a-z])(lbs|lb|kg|tonnes|tonne|t|g)/(kwh|mwh)(?![a-z])")
_GAS = re.compile(r"co[2₂]\s*-?\s*(?:eq|e)?")
TIME_COLUMN = "timestamp"
# EIA-930's files (the US grid monitor's balance files) write "01/01/2022 1:00:00 AM":
# month/day/year on a 12-hour clock, fixed by EIA for its "UTC Time at End of Hour" column
# (the one ``time_column`` picks: "Local Time at End of Hour" does not say UTC). Only there
# is that form read: elsewhere 05/01 could be the 5th of January as well as May the 1st.
EIA_TIME_COLUMN = "utc time at end of hour"
EIA_TIME_FORMAT = "%m/%d/%Y %I:%M:%S %p"
FORMS = ("ISO 8601 (2022-01-01 01:00:00+00:00), or, in EIA-930's 'UTC Time at End of Hour' "
         "column only, EIA's month/day/year 12-hour form '01/01/2022 1:00:00 AM'")


def unit_in_name(name: str) -> str | None:
    """The unit a column's name spells ("g/kWh", "lb/MWh", ...), or None where it spells
    none or one this table does not know (``G_PER_KWH``)."""
    text = _GAS.sub("", name.lower())
    text = re.sub(r"[\s_]*(?:/|\bper\b|_per_)[\s_]*", "/", text)
    found = _UNIT.search(text)
    if found is None:
        return None
    unit = f"{_MASS[found.group(1)]}/{'kWh' if found.group(2) == 'kwh' else 'MWh'}"
    return unit if unit in G_PER_KWH else None


def time_column(fields: list[str]) -> tuple[str, bool, int] | None:
    """(the time column, whether its name says UTC, seconds to add to a row's time for its
    hour's start): ``timestamp``, else a column whose name says UTC and time or date (an
    ElectricityMaps export's ``Datetime (UTC)``, EIA-930's ``UTC time``; "at end of hour"
    stamps an hour by its end). None where there is neither."""
    if TIME_COLUMN in fields:
        return TIME_COLUMN, False, 0
    for name in fields:
        low = name.lower()
        if re.search(r"(?<![a-z])utc(?![a-z])", low) and ("time" in low or "date" in low):
            return name, True, -3600 if "end of hour" in low else 0
    return None


def parse_time(raw: str, column: str) -> datetime:
    """A time cell of ``column``: ISO 8601, or EIA-930's form in EIA's UTC column (naive, as
    EIA writes it). ValueError saying which forms are read, where it is neither."""
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        pass
    if column.strip().lower() == EIA_TIME_COLUMN:
        try:
            return datetime.strptime(raw, EIA_TIME_FORMAT)
        except ValueError:
            raise ValueError("is not EIA-930's form 'MM/DD/YYYY H:MM:SS AM' (month/day/year, "
                             "12-hour clock, e.g. '01/01/2022 1:00:00 AM') nor ISO 8601 "
                             "(2022-01-01 01:00:00+00:00); correct the row or re-export the "
                             "file from EIA") from None
    if re.search(r"\d/\d{1,2}/\d", raw):
        raise ValueError("is not ISO 8601: a date with slashes is read only from EIA-930's "
                         "'UTC Time at End of Hour' column (month/day/year, '01/01/2022 1:00:00 "
                         "AM'), where EIA fixes the order; elsewhere 05/01 could be the 5th of "
                         "January or May the 1st. Write the times as ISO 8601 "
                         "(2022-05-01 01:00:00+00:00)")
    raise ValueError(f"is not a time fleetwatch reads: {FORMS}")


def implausible(mean_g_per_kwh: float, top: float) -> str | None:
    """Why values read as g/kWh cannot be (the unit they look like), or None."""
    lo, hi = PLAUSIBLE_G_PER_KWH
    if top < lo:
        return (f"every hour is under {lo:g} (the largest is {top:g}): is the column in "
                "kg/kWh? multiply it by 1000, or set carbon.intensity_csv_unit = \"kg/kWh\"")
    if mean_g_per_kwh > hi:
        return (f"its mean is {mean_g_per_kwh:g}, above any grid's average in gCO2e/kWh "
                f"(at most about {hi:g}, lignite alone): is the column in lb/MWh? set "
                "carbon.intensity_csv_unit = \"lb/MWh\" (or the unit it is in)")
    return None
