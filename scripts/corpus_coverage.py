"""Share of the real-problem corpus each installed solver family can solve, per direction.

Sizes only, nothing runs: for every consistent row and each direction, with every installed
solver that runs on the CPU (the row's sizes read as a
forward, backward-data and backward-weights problem), ask every installed solver
``is_applicable``. Prints a markdown table (families x directions) and the rows no solver covers.

    python scripts/corpus_coverage.py [--limit N]
"""

from __future__ import annotations

import argparse
import collections
import sys

import miocore
from miocore import corpus
from miocore.solver import normalize_applicability
from miocore.testing import cpu_context

DIRECTIONS = ("forward", "backward_data", "backward_weights")


def coverage(limit: int | None = None) -> tuple[dict, dict, int, list]:
    """Counts of covered rows per (family, direction) and per (solver, direction)."""
    ctx = cpu_context()
    # Only the solvers that run on this backend, as find would consider them.
    solvers = [r for r in miocore.default_registry().solvers if ctx.backend in r.solver.backends]
    by_family: dict[tuple[str, str], int] = collections.Counter()
    by_solver: dict[tuple[str, str], int] = collections.Counter()
    uncovered = []
    rows = [r for r in corpus.load_rows() if r["consistent"]][:limit]
    for row in rows:
        base = corpus.problem_from_row(row)
        for direction in DIRECTIONS:
            p = miocore.ConvProblem(direction, x=base.x, w=base.w, y=base.y, conv=base.conv)
            families = set()
            for reg in solvers:
                if normalize_applicability(reg.solver.is_applicable(ctx, p)):
                    families.add(reg.algorithm.value)
                    by_solver[(reg.name, direction)] += 1
            for family in families:
                by_family[(family, direction)] += 1
            if not families:
                uncovered.append((row["miopen_key"], direction))
    return by_family, by_solver, len(rows), uncovered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=None, help="only the first N consistent rows")
    args = parser.parse_args(argv)
    by_family, by_solver, total, uncovered = coverage(args.limit)
    families = sorted({f for f, _ in by_family})
    print(f"{total} consistent corpus rows, each read in 3 directions\n")
    print("| family | forward | backward data | backward weights |")
    print("|---|---|---|---|")
    for family in families:
        cells = [f"{100 * by_family[(family, d)] / total:.1f} %" for d in DIRECTIONS]
        print(f"| {family} | {' | '.join(cells)} |")
    print("\n| solver | forward | backward data | backward weights |")
    print("|---|---|---|---|")
    for name in sorted({s for s, _ in by_solver}):
        cells = [f"{100 * by_solver[(name, d)] / total:.1f} %" for d in DIRECTIONS]
        print(f"| {name} | {' | '.join(cells)} |")
    print(f"\nrows with no applicable solver in some direction: {len(uncovered)}")
    for key, direction in uncovered[:20]:
        print(f"  {key} ({direction})")
    return 1 if uncovered else 0


if __name__ == "__main__":
    sys.exit(main())
