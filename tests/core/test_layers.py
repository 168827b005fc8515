"""Imports run one way: app (fleetwatch/*) → stages → core, never back.

No module of a stage (``pipeline``, ``collectors``, ``models``,
``dashboards``) may import the app's composition root or its entry points:
``fleetwatch.wiring``, ``fleetwatch.cli``, ``fleetwatch.up``,
``fleetwatch.service`` or any ``fleetwatch.*_service`` (``process_service``,
``agent_service``). Checked on the source, imports inside functions
included, so a lazy import cannot hide one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("pipeline", "collectors", "models", "dashboards")
FORBIDDEN = re.compile(r"^fleetwatch\.(wiring|cli|up|service|\w+_service)(\.|$)")
# Entry points on the stage side that may import the app: none.
KNOWN: set[str] = set()


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_no_stage_imports_the_app() -> None:
    wrong = {}
    for stage in STAGES:
        for path in sorted((ROOT / stage).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            bad = sorted(n for n in imported(path) if FORBIDDEN.match(n))
            if bad and rel not in KNOWN:
                wrong[rel] = bad
    assert not wrong, f"stages importing the app: {wrong}"


def test_the_check_sees_what_it_must() -> None:
    assert {"fleetwatch.wiring", "fleetwatch.process_service", "fleetwatch.agent_service",
            "fleetwatch.up", "fleetwatch.cli.main", "fleetwatch.service"} == {
        n for n in ("fleetwatch.wiring", "fleetwatch.process_service",
                    "fleetwatch.agent_service", "fleetwatch.up", "fleetwatch.cli.main",
                    "fleetwatch.service", "fleetwatch.upgrade", "fleetwatch.config",
                    "fleetwatch.pipeline.processor") if FORBIDDEN.match(n)}
    assert all((ROOT / s).is_dir() for s in STAGES)


def test_the_processor_entry_point_is_on_the_app_side() -> None:
    assert not (ROOT / "pipeline" / "run.py").exists()
    assert not (ROOT / "collectors" / "run.py").exists()
    assert "run_processor" in (ROOT / "fleetwatch" / "process_service.py").read_text()
