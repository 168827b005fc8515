"""Cross-field rules of the configuration: what one value's type and range cannot say.

Pure checks of a built ``Config`` section, each returning its broken rules as messages
that name the key, where its value came from (``origins``: "section.key" -> the file
line or the environment variable) and what to set. ``config.load`` gathers them into
one error with the bad values; ``carbon.model_from_config`` refuses on
``carbon_problems``, which only warns at load.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetwatch.carbon_units import LB_KG
from fleetwatch.settings import INSTANCE_NAME, AlertsConfig
from fleetwatch.settings_backends import StoreConfig
from fleetwatch.settings_energy import PLAUSIBLE_G_PER_KWH, CarbonConfig


def carbon_problems(c: CarbonConfig, origins: Mapping[str, str] | None = None,
                    key: str = "carbon") -> list[str]:
    """A site intensity no grid has is another unit typed into the g/kWh key: a kg/kWh
    figure (0.42) would give a thousandth of the CO2e, a lb/MWh one twice it. Not a load
    error (alerting must not stop for it): logged at load, refused by
    ``carbon.model_from_config``."""
    origins = origins or {}
    lo, hi = PLAUSIBLE_G_PER_KWH
    v = c.intensity_g_per_kwh
    out = []
    if 0 < v < lo or v > hi:
        hint = ("did you mean kg/kWh (or t/MWh)? multiply by 1000" if v < lo else
                f"did you mean lb/MWh? multiply by {LB_KG:g}")
        where = origins.get(f"{key}.intensity_g_per_kwh")
        message = (f"{key}.intensity_g_per_kwh = {v:g} is no grid's gCO2e/kWh (they "
                   f"average {lo:g} to {hi:g}, most 10 to 1000): {hint}")
        out.append(f"{where}: {message}" if where else message)
    for name, cluster in c.clusters.items():
        out += carbon_problems(cluster, origins, f"carbon.clusters.{name}")
    return out


def store_problems(s: StoreConfig, origins: Mapping[str, str]) -> list[str]:
    """Roll-ups shorter-lived than raw samples: upkeep would delete the roll-ups, events and
    alert history of days whose raw samples are still kept, and a month's report would lose
    its repeat offenders while the samples that showed them are still in the store. Both
    keys are the SQLite store's own: other stores keep what their server keeps."""
    if s.kind != "sqlite" or s.rollup_retention_d * 24 >= s.raw_retention_h:
        return []
    where = origins.get("store.rollup_retention_d") or origins.get("store.raw_retention_h")
    days = s.rollup_retention_d
    message = (f"store.rollup_retention_d = {days:g} ({days * 24:g} h) is shorter than "
               f"store.raw_retention_h = {s.raw_retention_h:g}: roll-ups, events "
               "and the alert history would be deleted before the raw samples they summarise "
               "(month reports would lose their repeat offenders); set store.rollup_retention_d "
               f"to at least {s.raw_retention_h / 24:g} (days), or lower store.raw_retention_h")
    return [f"{where}: {message}" if where else message]


def rule_problems(a: AlertsConfig, origins: Mapping[str, str]) -> list[str]:
    """The alert rules ``config`` checks, broken, each said with where its value came from
    (``origins``: "section.key" -> the file line or the environment variable)."""
    rules: list[tuple[bool, str, str]] = [
        (not a.instance or bool(INSTANCE_NAME.match(a.instance)), "alerts.instance",
         f"alerts.instance = {a.instance!r}; must be 1 to 64 letters, digits, '.', '_' or "
         "'-', starting with a letter or digit (e.g. the deployment's name, \"prod-east\"), "
         "or \"\" to derive it from the store"),
    ]
    return [f"{origins[key]}: {message}" if key in origins else message
            for ok, key, message in rules if not ok]
