"""How raw WTI would have chosen among the solvers a GPU find measured (issue 14's fallback).

Reads ``gpu_vs_cudnn.py`` result files, whose rows keep every candidate's find time on the
device (``candidates``), and asks each candidate's WTI for the same problem on a described
sm90 context (no GPU needed: ``newcomer_ranking.DESCRIBED``). Per file: how often WTI's first
choice is within 10% of the measured best, and the geometric mean and worst of its regret
(its measured time over the best's). Only the measured candidates compete, so this isolates
WTI's ordering from applicability.

    python benchmarks/wti_vs_found.py benchmarks/results/gpu_h200x4_vs_cudnn_grid_session32.json

A file is one run's output, or a ``vstable`` collection of them (``jobs``: one per job).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from newcomer_ranking import _described

import miocore


def rows_of(path: Path) -> list[dict[str, Any]]:
    """The rows with at least two measured candidates, of one result file."""
    data = json.loads(path.read_text())
    runs = list(data["jobs"].values()) if "jobs" in data else [data]
    rows = [row for run in runs for row in run.get("layers", [])]
    return [r for r in rows if len(r.get("candidates") or {}) >= 2 and "key" in r]


def choices(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, float]]:
    """(row, WTI's first choice, its regret) for every row whose candidates WTI knows."""
    described = _described("sm90_132")
    assert described is not None
    ctx, solvers = described
    out = []
    for row in rows:
        found = {n: ms for n, ms in row["candidates"].items() if n in solvers and ms > 0}
        if len(found) < 2:
            continue
        tf32 = row.get("precision") == "tf32"
        context = dataclasses.replace(ctx, math_mode="tf32") if tf32 else ctx
        problem = miocore.ConvProblem.from_key(row["key"]).canonical
        score = {n: solvers[n].wti(context, problem) for n in found}
        first = max(found, key=lambda n: score[n])
        out.append((row, first, found[first] / min(found.values())))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--worst", type=int, default=5, help="list this many worst choices")
    args = parser.parse_args()
    for path in args.files:
        picked = choices(rows_of(path))
        if not picked:
            print(f"{path.name}: no rows with measured candidates")
            continue
        regrets = [r for _, _, r in picked]
        geomean = math.exp(sum(math.log(r) for r in regrets) / len(regrets))
        within = sum(r <= 1.1 for r in regrets)
        print(
            f"{path.name}: {len(picked)} rows, WTI's first within 10% of the best in {within} "
            f"({100 * within / len(picked):.0f}%), regret geomean {geomean:.2f}, "
            f"worst {max(regrets):.2f}"
        )
        for row, first, regret in sorted(picked, key=lambda t: -t[2])[: args.worst]:
            best = min(row["candidates"], key=row["candidates"].get)
            print(
                f"  x{regret:5.2f} {row.get('suite', '')} {row.get('layer', '')} "
                f"{row.get('precision', '')} {row['direction']}: {first}, best {best}"
            )


if __name__ == "__main__":
    main()
