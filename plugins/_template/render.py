"""Render this template into a new miocore plugin: ``python render.py NAME DEST``.

Copies every file of the template (this script and build debris excepted) into ``DEST``,
replacing ``{{name}}`` with NAME (the family: a lowercase identifier such as ``sliding``) and
``{{Name}}`` with its CamelCase form, in file contents and in paths. The result is a plugin
distribution ``miocore-NAME`` with package ``miocore_NAME``, entry point ``NAME`` and solver
``NAME.direct``, ready for ``pip install DEST``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent
SKIP = {"render.py", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist"}
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


class RenderError(Exception):
    """The name or destination cannot be used; the message says why."""


def camel(name: str) -> str:
    """``sliding_window`` -> ``SlidingWindow``."""
    return "".join(part.capitalize() for part in name.split("_"))


def substitute(text: str, values: dict[str, str], where: str) -> str:
    """Replace every ``{{key}}``; an unknown placeholder is an error naming the file."""

    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise RenderError(f"{where}: unknown placeholder {match.group(0)}")
        return values[key]

    return PLACEHOLDER.sub(one, text)


def render(name: str, dest: Path, *, force: bool = False) -> list[Path]:
    """Write the plugin ``name`` into ``dest``; returns the files written."""
    if not NAME_RE.match(name):
        raise RenderError(f"name={name!r}: use a lowercase identifier such as 'sliding'")
    if dest.exists() and any(dest.iterdir()):
        if not force:
            raise RenderError(f"dest={str(dest)!r}: not empty (pass --force to replace it)")
        shutil.rmtree(dest)
    values = {"name": name, "Name": camel(name)}
    written = []
    for src in sorted(TEMPLATE.rglob("*")):
        rel = src.relative_to(TEMPLATE)
        if src.is_dir() or SKIP.intersection(rel.parts) or src.suffix == ".pyc":
            continue
        target = dest / substitute(str(rel), values, str(rel))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(substitute(src.read_text(), values, str(rel)))
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: ``render.py NAME DEST [--force]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the family name: a lowercase identifier")
    parser.add_argument("dest", type=Path, help="the folder to create")
    parser.add_argument("--force", action="store_true", help="replace a non-empty DEST")
    args = parser.parse_args(argv)
    try:
        files = render(args.name, args.dest, force=args.force)
    except RenderError as exc:
        print(f"render.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files of miocore-{args.name} into {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
