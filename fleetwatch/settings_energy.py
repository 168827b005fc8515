"""What the energy ledger and the carbon report read: the [energy] and [carbon] sections,
their defaults and ranges, and the plausible range of a grid's intensity.

Part of ``fleetwatch.settings`` (whose ``Config`` holds both sections), kept apart because
only accounting reads them: ``fleetwatch.config`` loads and checks them with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fleetwatch.config_fields import ranged, required, time_zone, time_zone_or_off


@dataclass(frozen=True)
class EnergyConfig:
    # An interval between two samples longer than this is missing time, never filled.
    max_gap_s: float = ranged(60.0, 0.0, 86_400.0, above=True)
    # A GPU whose SM activity is under this ratio is idle (powered, doing no work).
    idle_sm_ratio: float = ranged(0.05, 0.0, 1.0)
    # Time with board power more than 2% above TDP counts as time above TDP. 0: each
    # GPU's own default power limit where NVML reports it, else its part's TDP (A100 SXM
    # 400 W, H100/H200 SXM 700 W, ...), else its power limit.
    tdp_w: float = ranged(0.0, 0.0, 100_000.0)
    # The rest of the node (fans, NICs, DRAM, disks), drawn while the node reports.
    node_static_w: float = ranged(0.0, 0.0, 1_000_000.0)
    price_per_kwh: float = ranged(0.15, 0.0, 1_000_000.0)
    # The currency of price_per_kwh: the report's cost, and its CSV's currency column.
    currency: str = required("USD")
    # IANA time zone (Europe/Berlin, Asia/Tokyo) whose calendar the monthly report's
    # month and days and the energy page's today and this month follow; UTC by default.
    # The ledger's hours stay UTC: an hour a half-hour offset cuts counts for its share.
    timezone: str = time_zone("UTC")


# gCO2e/kWh a grid's average can have: from a hydro or nuclear grid's few grams to lignite
# alone (about 1,100). Outside it is another unit: kg/kWh (0.2 to 0.9) under, lb/MWh of a
# coal-heavy grid (2,000) over (carbon_units).
PLAUSIBLE_G_PER_KWH = (1.0, 1500.0)
IntensityUnit = Literal["", "g/kWh", "kg/MWh", "lb/MWh", "kg/kWh", "t/MWh", "lb/kWh"]


@dataclass(frozen=True)
class CarbonConfig:
    # ISO 3166-1 alpha-3: the grid intensity default (CodeCarbon's table).
    country: str = "USA"
    # A site constant in gCO2e/kWh; 0 uses the country default. Under 1 or over 1500 is
    # refused at load: another unit (kg/kWh, lb/MWh), not a grid.
    intensity_g_per_kwh: float = ranged(0.0, 0.0, 10_000.0)
    intensity_csv: str = ""
    intensity_column: str = required("avg_CI")
    # The unit of intensity_column's values; "": the one its name spells (co2_lb_per_mwh,
    # gCO2eq/kWh), else g/kWh where the values are plausible for it (else refused).
    intensity_csv_unit: IntensityUnit = ""
    # The IANA zone of the intensity file's times that carry no UTC offset; "": such times
    # are refused unless the time column's name says UTC ("Datetime (UTC)").
    intensity_csv_timezone: str = time_zone_or_off("")
    pue: float = ranged(1.2, 1.0, 10.0)
    pue_csv: str = ""
    pue_column: str = required("pue")
    # As intensity_csv_timezone, for the PUE file.
    pue_csv_timezone: str = time_zone_or_off("")
    # Per cluster, by name ([carbon.clusters.NAME] tables in the file): each cluster's
    # grid and PUE. A cluster not listed, and a group of keys a table does not touch,
    # take the settings above (resolved at load: each value is a whole CarbonConfig).
    clusters: dict[str, CarbonConfig] = field(default_factory=dict)


# The keys of a [carbon.clusters.NAME] table, in two groups taken whole: a table that sets
# any key of a group takes that group from itself (keys it leaves out at their defaults),
# never mixed with the global ones: a cluster that names its own country must not keep
# the global intensity_csv, which would outrank it.
CARBON_GRID_KEYS = ("country", "intensity_g_per_kwh", "intensity_csv", "intensity_column",
                    "intensity_csv_unit", "intensity_csv_timezone")
CARBON_PUE_KEYS = ("pue", "pue_csv", "pue_column", "pue_csv_timezone")
