"""The keys of a configuration, before their values: unknown, moved and retired keys.

``key_problems`` names every key of a TOML file or the environment that is no setting,
each with its fix; ``refuse_keys`` raises them, and every other problem found with
them, as one ``ConfigError``, so an old config is corrected in one edit. ``MOVED`` and
``RETIRED`` say where a key went and why one no longer does anything.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from typing import Any

from fleetwatch.config_fields import ConfigError
from fleetwatch.settings import Config

# Keys that moved, and where to. alerts.gpu_temp_limit_c and alerts.for_s were read by no
# detector (only the dashboard drew the line), while the config said they raised an alert.
MOVED = {("alerts", "gpu_temp_limit_c"): "detectors.site_temp_limit_c (0 for none)",
         ("alerts", "for_s"): "detectors.site_temp_for_s"}
# Keys that no longer do anything, and why: a config that has one still starts, with a
# warning that names it.
RETIRED = {("detectors", "straggler_gap"):
           "a GPU with less SM activity than its job peers is the one waiting for them, not "
           "the one they wait for (a pipeline stage with more bubbles, a rank that finished "
           "early): stragglers are judged by their SM clock (detectors.straggler_clock_frac)"}


def key_problems(raw: Mapping[str, Mapping[str, tuple[Any, str]]]) -> list[str]:
    """Every unknown section, moved key and unknown key of ``raw``, each with its fix, so
    that an old config is corrected in one edit rather than one key per run."""
    hints = typing.get_type_hints(Config)
    out: list[str] = []
    for section, values in raw.items():
        if section not in hints:
            out.append(f"{next(iter(values.values()))[1]}: unknown section [{section}]")
            continue
        fields = typing.get_type_hints(hints[section])
        for key, (_, origin) in values.items():
            if key.endswith("_file") and key[:-5] in fields or (section, key) in RETIRED:
                continue
            if (section, key) in MOVED:
                out.append(f"{origin}: {section}.{key} is now {MOVED[section, key]}: "
                           "move it there")
            elif key not in fields:
                out.append(f"{origin}: unknown key {section}.{key} (known: "
                           f"{', '.join(sorted(fields))})")
    return out


def refuse_keys(problems: list[str],
                 raws: Iterable[Mapping[str, Mapping[str, tuple[Any, str]]]]) -> None:
    """One ``ConfigError`` naming every problem (and the retired keys to remove while the
    file is open), or nothing when there is none."""
    if not problems:
        return
    if len(problems) == 1:
        raise ConfigError(problems[0])
    retired = [f"{values[key][1]}: {section}.{key} is no longer used: remove it"
               for raw in raws for (section, key) in RETIRED
               for values in [raw.get(section, {})] if key in values]
    lines = [*problems, *retired]
    raise ConfigError(f"{len(problems)} settings to change (all of them, in one edit):\n  "
                      + "\n  ".join(lines))
