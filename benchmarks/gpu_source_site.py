"""Make the plugins in ``plugins/`` importable and discoverable from their source folders.

The device machine has no package index and no build backend, so instead of building wheels
this writes, for every ``plugins/<family>/pyproject.toml`` and for miocore's own, a minimal
``.dist-info`` (METADATA and entry_points.txt) into ``--site``; ``--print-path`` prints the
plugins' ``src`` folders for PYTHONPATH, so the entry points resolve to the working tree's code.

    python3 benchmarks/gpu_source_site.py --site /tmp/site
    export PYTHONPATH=$PWD:/tmp/site:$(python3 benchmarks/gpu_source_site.py --print-path)
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def plugin_projects() -> list[tuple[Path, dict]]:
    """(source folder, [project] table) of every first-party plugin."""
    out = []
    for pyproject in sorted(ROOT.glob("plugins/*/pyproject.toml")):
        if pyproject.parent.name.startswith("_"):
            continue
        project = tomllib.loads(pyproject.read_text())["project"]
        out.append((pyproject.parent / "src", project))
    return out


def core_project() -> dict:
    """The ``[project]`` table of miocore itself: its version and its own entry points (the
    learned heuristic), which a source checkout on PYTHONPATH would otherwise lack."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def write_site(site: Path) -> None:
    """Write one ``.dist-info`` per plugin, and one for miocore itself, into ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    for project in [core_project(), *(project for _, project in plugin_projects())]:
        name, version = project["name"], project["version"]
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        points = project.get("entry-points", {}).get("miocore", {})
        lines = ["[miocore]", *(f"{k} = {v}" for k, v in points.items())]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        print(f"{name} {version}: {points}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path)
    parser.add_argument("--print-path", action="store_true")
    args = parser.parse_args()
    if args.print_path:
        print(":".join(str(src) for src, _ in plugin_projects()))
        return
    if args.site is None:
        parser.error("--site or --print-path")
    write_site(args.site)


if __name__ == "__main__":
    main()
