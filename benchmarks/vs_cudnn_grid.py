"""Issue 13's table from ``gpu_vs_cudnn.py`` results: one grid per layout and plugin set.

    python benchmarks/vs_cudnn_grid.py results/a.json results/grid.json > grid.md

Each input is a ``gpu_vs_cudnn.py`` output or a ``gpu_session.sh vstable`` archive merged into
one file (``{"jobs": {tag: output, ...}}``); a later file's case replaces an earlier one. A
cell is suite x precision: the geometric mean of cuDNN time / miocore time forward / backward
data / backward weights, **bold** under the target (0.95 for miocore's own kernels, 1.05 for
every plugin), then the share of cases faster than cuDNN and the fraction of the dense-matmul
rate each side reaches (geomean over the cell's cases, miocore / cuDNN).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import geomean

DIRECTIONS = ("forward", "backward_data", "backward_weights")
PRECISIONS = ("float16", "bfloat16", "tf32", "float32")
#: The issue's targets: own kernels, and Find-best with every plugin (cuDNN's engines too).
TARGET = {"own": 0.95, "all": 1.05}


def runs(path: Path) -> list[dict[str, Any]]:
    """The ``gpu_vs_cudnn.py`` outputs a file holds (one, or a vstable archive's jobs)."""
    data = json.loads(path.read_text())
    return list(data["jobs"].values()) if "jobs" in data else [data]


def load(
    paths: list[Path], assume: str | None = None
) -> dict[tuple[str, str], dict[tuple, dict[str, Any]]]:
    """Cases by (layout, plugin set), keyed by suite, precision, direction and layer; a run
    whose header does not say which plugins ran (older results) counts as ``assume``."""
    grids: dict[tuple[str, str], dict[tuple, dict[str, Any]]] = {}
    for path in paths:
        for run in runs(path):
            if "disabled_plugins" in run:
                plugins = "own" if "cudnn" in run["disabled_plugins"].split(",") else "all"
            elif assume:
                plugins = assume
            else:
                raise SystemExit(f"{path}: which plugins ran is not recorded (pass --assume)")
            cases = grids.setdefault((run["layout"], plugins), {})
            for row in run.get("layers", []):
                key = (row["suite"], row["precision"], row["direction"], row["layer"])
                cases[key] = row
    return grids


def cell(rows: list[dict[str, Any]], target: float) -> tuple[str, int, int, str]:
    """F / B / W text, cases faster, cases, and the matmul fractions."""
    parts, faster, count, ours, theirs = [], 0, 0, [], []
    for direction in DIRECTIONS:
        sel = [r for r in rows if r["direction"] == direction and "speedup" in r]
        if not sel:
            parts.append("–")
            continue
        g = geomean([r["speedup"] for r in sel])
        parts.append(f"**{g:.2f}**" if g < target else f"{g:.2f}")
        faster += sum(r["speedup"] > 1 for r in sel)
        count += len(sel)
        ours += [r["miocore_of_matmul"] for r in sel if r.get("miocore_of_matmul")]
        theirs += [r["cudnn_of_matmul"] for r in sel if r.get("cudnn_of_matmul")]
    rate = f"{geomean(ours):.2f} / {geomean(theirs):.2f}" if ours and theirs else "–"
    return " / ".join(parts), faster, count, rate


def report(grids: dict[tuple[str, str], dict[tuple, dict[str, Any]]]) -> str:
    out = []
    for (layout, plugins), cases in sorted(grids.items()):
        target = TARGET[plugins]
        suites = list(dict.fromkeys(k[0] for k in cases))
        precisions = [p for p in PRECISIONS if any(k[1] == p for k in cases)]
        who = "own kernels" if plugins == "own" else "every plugin (cuDNN's engines too)"
        out += [f"### {layout}, {who}: cuDNN / miocore, F / B / W (bold: under {target})", ""]
        out.append("| suite | " + " | ".join(precisions) + " |")
        out.append("|---|" + "---|" * len(precisions))
        notes = []
        for suite in suites:
            line = [suite]
            for p in precisions:
                rows = [r for k, r in cases.items() if k[0] == suite and k[1] == p]
                if not rows:
                    line.append("")
                    continue
                text, faster, count, rate = cell(rows, target)
                line.append(f"{text} ({faster}/{count} faster)")
                notes.append(f"{suite} {p}: {rate}")
            out.append("| " + " | ".join(line) + " |")
        out += ["", "Fraction of the matmul rate, miocore / cuDNN: " + "; ".join(notes) + ".", ""]
    return "\n".join(out)


def gaps(grids: dict[tuple[str, str], dict[tuple, dict[str, Any]]]) -> str:
    """Per winning solver: how much longer its timed run (``run_solution``, a replayed graph)
    took than find's own measurement of it, median and how many cases by over 1 µs."""
    by: dict[str, list[float]] = {}
    for cases in grids.values():
        for row in cases.values():
            found = row.get("candidates", {}).get(row.get("solver"))
            if found and "miocore_ms" in row:
                by.setdefault(row["solver"], []).append(1e3 * (row["miocore_ms"] - found))
    out = ["| solver | cases | run - find, median µs | over 1 µs |", "|---|---|---|---|"]
    for solver, diffs in sorted(by.items(), key=lambda kv: -len(kv[1])):
        diffs.sort()
        median = diffs[len(diffs) // 2]
        over = sum(d > 1.0 for d in diffs)
        out.append(f"| {solver} | {len(diffs)} | {median:.2f} | {over} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "--assume", choices=("own", "all"), help="the plugin set of results that do not say"
    )
    parser.add_argument(
        "--gaps", action="store_true", help="also each winner's timed run against its find time"
    )
    args = parser.parse_args()
    grids = load(args.files, args.assume)
    print(report(grids))
    if args.gaps:
        print(gaps(grids))


if __name__ == "__main__":
    main()
