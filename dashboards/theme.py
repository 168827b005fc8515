"""The dashboard's palette, shared by the figures; ``style.css`` uses the same values.

Dark and low-contrast for everything that is normal, so that the one thing
that is not (a hot GPU, a firing alert) is the only saturated colour on the
screen: readable at a glance at 3 a.m.
"""

from __future__ import annotations

BG = "#0d1117"
PANEL = "#161b22"
GRID = "#2a313c"
TEXT = "#e6edf3"
MUTED = "#8b949e"
FIRING = "#ff4d4f"
PENDING = "#f5a623"
OK = "#3fb950"
FAULT_FILL = "rgba(245, 166, 35, 0.12)"
FONT = "Inter, 'Segoe UI', 'DejaVu Sans', Helvetica, Arial, sans-serif"

# GPU temperature colour scale (°C). Fixed bounds, so that a colour means the
# same temperature on every refresh and every screen; the stops keep a loaded
# but healthy GPU (60-70 °C) in calm teal and spend the warm colours on the
# range where slowdown and alerts live (80 °C and up).
TEMP_MIN_C, TEMP_MAX_C = 20.0, 95.0
_TEMP_STOPS = ((20.0, "#0e2a47"), (45.0, "#15507a"), (62.0, "#1f7f86"), (72.0, "#3f9d77"),
               (78.0, "#d6b341"), (84.0, "#f07c2e"), (88.0, "#ff3b30"), (95.0, "#ff1f5a"))
TEMP_SCALE: list[list[float | str]] = [
    [(t - TEMP_MIN_C) / (TEMP_MAX_C - TEMP_MIN_C), colour] for t, colour in _TEMP_STOPS]

# One colour per GPU index on the node graphs: muted and distinct, with no reds
# or ambers, which belong to alerts: a GPU with an active alert is drawn in FIRING.
GPU_COLOURS = ("#56b4e9", "#009e73", "#cc79a7", "#7aa2f7", "#9ece6a", "#bb9af7", "#2ac3de",
               "#c0caf5", "#80b1d3", "#8dd3c7", "#bebada", "#b3de69", "#73daca", "#a9b1d6",
               "#ccebc5", "#7dcfff")
