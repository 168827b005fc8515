"""Generate the README's reference sections from the catalogue and the sample config.

    python scripts/gen_docs.py           rewrite README.md in place
    python scripts/gen_docs.py --check   exit 1 if README.md is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fleetwatch.catalogue import catalogue

ROOT = Path(__file__).resolve().parents[1]  # the checkout
SAMPLE_CONFIG = ROOT / "deploy" / "fleetwatch.toml"


def metrics_table() -> str:
    lines = ["| metric | unit | kind | DCGM field | what |", "|---|---|---|---|---|"]
    for m in catalogue().metrics:
        lines.append(f"| `{m.name}` | {m.unit} | {m.kind} | {m.dcgm or '–'} | {m.help} |")
    return "\n".join(lines)


def config_reference(sample: Path = SAMPLE_CONFIG) -> str:
    """A table per section: key, default, and the comment lines above it in the sample."""
    out: list[str] = []
    comment: list[str] = []
    for line in sample.read_text("utf-8").splitlines():
        stripped = line.strip()
        if m := re.fullmatch(r"\[(\w+)\]", stripped):
            out += ["", f"**[{m[1]}]**", "", "| key | default | meaning |", "|---|---|---|"]
            comment = []
        elif (m := re.fullmatch(r"#\s*(\w+) = <(.+)>", stripped)) and out:
            # A key whose default is worked out at run time (the host name).
            out.append(f"| `{m[1]}` | ({m[2]}) | {' '.join(comment)} |")
            comment = []
        elif stripped.startswith("#") and out:
            comment.append(stripped.lstrip("# "))
        elif "=" in stripped and out:
            key, value = (s.strip() for s in stripped.split("=", 1))
            out.append(f"| `{key}` | `{value}` | {' '.join(comment)} |")
            comment = []
    return "\n".join(out).strip()


def render(readme: str) -> str:
    for name, body in (("metrics", metrics_table()), ("config", config_reference())):
        readme = re.sub(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)",
                        lambda m, body=body: m[1] + body + "\n" + m[2], readme, flags=re.S)
    return readme


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Rewrite README.md's metric and config reference tables from the "
                    "catalogue and deploy/fleetwatch.toml.")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if README.md is out of date")
    args = parser.parse_args(argv)
    path = ROOT / "README.md"
    current = path.read_text("utf-8")
    wanted = render(current)
    if args.check:
        if current != wanted:
            print("README.md is out of date: run `python scripts/gen_docs.py`", file=sys.stderr)
            return 1
        return 0
    path.write_text(wanted, "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
