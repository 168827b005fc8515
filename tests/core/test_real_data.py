"""tests/data holds real captures byte for byte, each with its licence and origin."""

from __future__ import annotations

import hashlib

from tests.conftest import REAL_DATA


def test_every_capture_is_checksummed_licensed_and_documented() -> None:
    sums = dict(reversed(line.split(maxsplit=1)) for line in
                (REAL_DATA / "SHA256SUMS").read_text().splitlines() if line.strip())
    readme = (REAL_DATA / "README.md").read_text()
    files = sorted(p for p in REAL_DATA.rglob("*") if p.is_file()
                   and p.name not in ("README.md", "SHA256SUMS"))
    assert files
    for path in files:
        name = "./" + path.relative_to(REAL_DATA).as_posix()
        assert sums.get(name) == hashlib.sha256(path.read_bytes()).hexdigest(), name
        if not path.name.startswith("LICENSE"):
            assert name[2:] in readme, f"{name}: origin missing from tests/data/README.md"
            assert any(p.name.startswith("LICENSE") for p in path.parent.iterdir()), name
    assert set(sums) == {"./" + p.relative_to(REAL_DATA).as_posix() for p in files}
