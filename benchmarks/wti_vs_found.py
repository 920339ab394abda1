"""How raw WTI would have chosen among the solvers a GPU find measured (issue 14's fallback).

Reads ``gpu_vs_cudnn.py`` result files, whose rows keep every candidate's find time on the
device (``candidates``), and asks each candidate's WTI for the same problem on a described
sm90 context (no GPU needed: ``newcomer_ranking.DESCRIBED``). Per file: how often WTI's first
choice is within 10% of the measured best, and the geometric mean and worst of its regret
(its measured time over the best's). Only the measured candidates compete, so this isolates
WTI's ordering from applicability.

    python benchmarks/wti_vs_found.py benchmarks/results/gpu_h200x4_vs_cudnn_grid_session32.json

A file is one run's output, or a ``vstable`` collection of them (``jobs``: one per job).

``--compile-decision`` replays instead DYNAMIC_HYBRID's choice on a cold binary cache
(``miocore.find.dynamic._worth_compiling``) with the shipped learned model: dynamic candidates
measured, the others where predicted to beat them, under the rule as it is (a solver the model
does not know: its WTI time times ``NEWCOMER_DOUBT`` against the model's best ready estimate)
and as it was (its WTI against the ready ones' WTI). Rows keep only the top few candidates,
so a ready solver outside them is missing from both replays alike.
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


def sm90() -> tuple[Any, dict[str, Any]]:
    """The described sm90 context (nothing runs on it) and its GPU solvers by name."""
    described = _described("sm90_132")
    assert described is not None
    return described


def case(ctx: Any, row: dict[str, Any]) -> tuple[Any, miocore.ConvProblem]:
    """A row's context (its math mode) and canonical problem."""
    tf32 = row.get("precision") == "tf32"
    context = dataclasses.replace(ctx, math_mode="tf32") if tf32 else ctx
    return context, miocore.ConvProblem.from_key(row["key"]).canonical


def rows_of(path: Path) -> list[dict[str, Any]]:
    """The rows with at least two measured candidates, of one result file."""
    data = json.loads(path.read_text())
    runs = list(data["jobs"].values()) if "jobs" in data else [data]
    rows = [row for run in runs for row in run.get("layers", [])]
    return [r for r in rows if len(r.get("candidates") or {}) >= 2 and "key" in r]


def choices(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, float]]:
    """(row, WTI's first choice, its regret) for every row whose candidates WTI knows."""
    ctx, solvers = sm90()
    out = []
    for row in rows:
        found = {n: ms for n, ms in row["candidates"].items() if n in solvers and ms > 0}
        if len(found) < 2:
            continue
        context, problem = case(ctx, row)
        score = {n: solvers[n].wti(context, problem) for n in found}
        first = max(found, key=lambda n: score[n])
        out.append((row, first, found[first] / min(found.values())))
    return out


def replay(rows: list[dict[str, Any]], newcomer_rule: bool) -> list[float]:
    """The regret of DYNAMIC_HYBRID's choice per row (see the module docstring)."""
    from miocore.find.dynamic import COMPILE_MARGIN
    from miocore.find.ranker import NEWCOMER_DOUBT
    from miocore.solver.registry import default_registry

    ctx, solvers = sm90()
    heuristics = [h for _, h in default_registry().heuristics]
    out = []
    for row in rows:
        found = row["candidates"]
        if any(n not in solvers for n in found):
            continue
        context, problem = case(ctx, row)
        ideal = context.ideal_ms(problem)
        wti_ms = {n: ideal / max(solvers[n].wti(context, problem), 1e-12) for n in found}
        ready = [n for n in found if solvers[n].is_dynamic]
        estimates: dict[str, float] = {}
        for h in heuristics:
            if h.is_applicable(context, problem):
                estimates = dict(h.rank(context, problem, list(found)))
                break
        best_ready = min((wti_ms[n] for n in ready), default=math.inf)
        best_known = min((estimates[n] for n in ready if n in estimates), default=None)
        measured = list(ready)
        for name in (n for n in found if n not in ready):
            guess = estimates.get(name)
            if guess is not None and best_known is not None:
                worth = guess < COMPILE_MARGIN * best_known
            elif newcomer_rule and best_known is not None:
                worth = NEWCOMER_DOUBT * wti_ms[name] < COMPILE_MARGIN * best_known
            else:
                worth = wti_ms[name] < best_ready
            if worth:
                measured.append(name)
        if measured:
            out.append(min(found[n] for n in measured) / min(found.values()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--worst", type=int, default=5, help="list this many worst choices")
    parser.add_argument("--compile-decision", action="store_true", help="see the docstring")
    args = parser.parse_args()
    for path in args.files:
        if args.compile_decision:
            for label, rule in (("as it is", True), ("WTI against WTI", False)):
                regrets = replay(rows_of(path), rule)
                geomean = math.exp(sum(math.log(r) for r in regrets) / len(regrets))
                print(
                    f"{path.name}, {label}: {len(regrets)} finds, within 5% of the best in "
                    f"{sum(r <= 1.05 for r in regrets)}, regret geomean {geomean:.3f}, "
                    f"worst {max(regrets):.2f}"
                )
            continue
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
