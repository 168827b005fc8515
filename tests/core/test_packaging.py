"""The wheel and the sdist as a packager builds them (``python -m build``), checked.

``test_project.py`` checks ``packages`` against the folders with an ``__init__.py``;
this builds both distributions from a copy of the checkout (what git tracks, and new
files it does not ignore) and checks what they hold: every data file of the package
folders in the wheel (``fleetwatch.data``, a folder without ``__init__.py``, was one
setuptools warned it "would ignore"), the licence in both, and in the sdist what the
README links to (``deploy/``, ``docs/``) and the tests.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
NAME, VERSION = "fleetwatch", "0.1.0"

pytest.importorskip("build", reason="python -m build is in fleetwatch[dev]")


def checkout_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in listed.decode().split("\0") if p and (ROOT / p).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(wheel, sdist, build log), built from a copy of the checkout."""
    src = tmp_path_factory.mktemp("src")
    for rel in checkout_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(src)],
                            capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    return (out / f"{NAME}-{VERSION}-py3-none-any.whl", out / f"{NAME}-{VERSION}.tar.gz", log)


def package_data_files() -> dict[str, str]:
    """Every non-Python file git has in a package folder, by its path in the wheel."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = project["tool"]["setuptools"]["package-dir"]
    want = {}
    for rel in checkout_files():
        if rel.endswith(".py"):
            continue
        for package, folder in mapping.items():
            if rel.startswith(folder + "/"):
                want[package.replace(".", "/") + rel[len(folder):]] = rel
    return want


def test_the_build_warns_of_nothing_ignored(built: tuple[Path, Path, str]) -> None:
    log = built[2]
    assert "would be ignored" not in log and "is absent from the `packages`" not in log, log


def test_the_wheel_holds_every_data_file_of_the_package_folders(
        built: tuple[Path, Path, str]) -> None:
    names = set(zipfile.ZipFile(built[0]).namelist())
    want = package_data_files()
    assert "fleetwatch/data/codecarbon_global_energy_mix.json" in want
    missing = sorted(rel for path, rel in want.items() if path not in names)
    assert not missing, f"not in the wheel: {missing}"


def test_the_wheel_and_the_sdist_carry_the_licence(built: tuple[Path, Path, str]) -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    wheel = zipfile.ZipFile(built[0])
    dist_info = f"{NAME}-{VERSION}.dist-info"
    assert wheel.read(f"{dist_info}/licenses/LICENSE").decode() == licence
    metadata = wheel.read(f"{dist_info}/METADATA").decode()
    assert "License-File: LICENSE" in metadata and "License-Expression: Apache-2.0" in metadata
    with tarfile.open(built[1]) as sdist:
        assert f"{NAME}-{VERSION}/LICENSE" in sdist.getnames()


def test_the_sdist_holds_what_the_readme_links_and_the_tests(
        built: tuple[Path, Path, str]) -> None:
    with tarfile.open(built[1]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    prefixes = ("deploy/", "docs/", "tests/", "scripts/", "benchmarks/")
    want = {rel for rel in checkout_files() if rel.startswith(prefixes)}
    assert {"deploy/cluster.toml", "docs/scale.md", "docs/screenshot.png",
            "tests/conftest.py"} <= want
    missing = sorted(want - names)
    assert not missing, f"not in the sdist: {missing[:20]} ({len(missing)})"
    assert "README.md" in names and "pyproject.toml" in names
