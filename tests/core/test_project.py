"""The project's standing promises: docs generated from the code, packaging complete."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import tomllib

from fleetwatch.config import Config, load

ROOT = Path(__file__).resolve().parents[2]


def test_readme_reference_sections_are_generated_and_fresh() -> None:
    result = subprocess.run([sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    readme = (ROOT / "README.md").read_text()
    assert "`gpu_temp_c` | C | gauge | DCGM_FI_DEV_GPU_TEMP" in readme
    assert "| `nvml_policy` | `\"retry\"` |" in readme


def test_sample_config_holds_every_key_at_its_default() -> None:
    sample = load(ROOT / "deploy" / "fleetwatch.toml", env={})
    defaults = Config()
    for section in dataclasses.fields(Config):
        want = dataclasses.asdict(getattr(defaults, section.name))
        got = dataclasses.asdict(getattr(sample, section.name))
        if section.name == "node":
            want.pop("node"), got.pop("node")  # the host name
        assert got == want, section.name
        text = (ROOT / "deploy" / "fleetwatch.toml").read_text()
        for key in want:
            assert f"\n{key} = " in text, f"[{section.name}] {key} missing from the sample"


def test_every_package_folder_is_installed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    mapping = project["tool"]["setuptools"]["package-dir"]
    found = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]) if rel.parts else package)
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "```sh\nscripts/test\n```" in readme
    assert "exec scripts/test" in ci


def test_readme_lists_every_shipped_prometheus_rule_and_no_other() -> None:
    """"Watching fleetwatch itself" is written by hand: each alert of
    deploy/prometheus/fleetwatch-rules.yml has its row, with its severity."""
    import re

    import yaml

    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "fleetwatch-rules.yml").read_text())
    shipped = {r["alert"]: r["labels"]["severity"] for g in rules["groups"] for r in g["rules"]}
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Watching fleetwatch itself", 1)[1].split("\n#", 1)[0]
    listed = {m[0]: m[1] for m in re.findall(r"^\| `(Fleetwatch\w+)` \|.*\| (\w+) \|$",
                                              section, re.M)}
    assert listed == shipped
