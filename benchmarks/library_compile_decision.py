"""Offline: would DYNAMIC_HYBRID's decision for library-compiled candidates pick well?

Reads FindDb files written by finds that measured every candidate (``gpu_find_profile.py``
passes in the default mode, where cuDNN's run-time compiled engines are measured on every
problem) and replays the decision of ``MIOCORE_CUDNN_RUNTIME_COMPILED=compile`` on their
recorded times: the run-time compiled engines of a problem are measured only where the
estimate says one beats every ready candidate. Two estimates: the learned model shipped for
the device (what ``miocore.find.dynamic`` asks first) and none (every such engine left out).
For each: how often the engines are measured (each costs its plan build, 13-130 ms on an
H200), and the picked solver's recorded time against the best recorded one.

    python benchmarks/library_compile_decision.py --db /tmp/fab/db-efficientnet_b0-old-1 \\
        --model miocore/data/db/sm90_132.heuristic.npz --out decision.json
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from miocore.heuristic.features import problem_features
from miocore.heuristic.model import TreeModel
from miocore.problem.conv import ConvProblem

#: cuDNN engines whose plans compile per problem on sm90 with cuDNN 9.19 (their behaviour
#: note RUNTIME_COMPILATION, as ``gpu_find_profile.py``'s per-engine build times showed).
RUNTIME_COMPILED = frozenset(f"cudnn.eng{e}" for e in (5, 6, 16, 19, 20, 70, 71, 78))


def recorded_times(db: Path) -> dict[str, dict[str, float]]:
    """key -> solver -> recorded ms, from every ``*.db`` file in ``db``."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for path in sorted(db.glob("*.db")):
        with sqlite3.connect(path) as con:
            for key, solver, time_ms in con.execute("select key, solver, time_ms from find_db"):
                out[key][solver] = float(time_ms)
    return out


def evaluate(times: dict[str, dict[str, float]], model: TreeModel) -> dict[str, Any]:
    """The decision replayed per problem with the model's estimates and without any."""
    rows = []
    for key, by_solver in times.items():
        library = [s for s in by_solver if s in RUNTIME_COMPILED]
        ready = [s for s in by_solver if s not in RUNTIME_COMPILED]
        if not library or not ready:
            continue
        known = [s for s in by_solver if model.knows(s)]
        features = problem_features(ConvProblem.from_key(key))
        estimate = dict(zip(known, model.predict_ms(features, known), strict=True))
        best_ready = min((estimate[s] for s in ready if s in estimate), default=None)
        measure = best_ready is not None and any(
            estimate[s] < best_ready for s in library if s in estimate
        )
        best = min(by_solver.values())
        ready_best = min(by_solver[s] for s in ready)
        rows.append(
            {
                "key": key,
                "library_wins": min(by_solver[s] for s in library) < ready_best,
                "measured": measure,
                "regret_model": (min(by_solver.values()) if measure else ready_best) / best,
                "regret_none": ready_best / best,
            }
        )

    def summary(name: str) -> dict[str, Any]:
        values = [r[name] for r in rows]
        return {
            "geomean": statistics.geometric_mean(values),
            "within_5pct": sum(v <= 1.05 for v in values),
            "worst": max(values),
        }

    return {
        "problems": len(rows),
        "library_wins": sum(r["library_wins"] for r in rows),
        "measured_by_model": sum(r["measured"] for r in rows),
        "wins_the_model_measures": sum(r["library_wins"] and r["measured"] for r in rows),
        "model": summary("regret_model"),
        "none": summary("regret_none"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, nargs="+", required=True, help="FindDb folders")
    parser.add_argument("--model", type=Path, required=True, help="a heuristic .npz")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    model = TreeModel.load(args.model)
    results = {}
    for db in args.db:
        results[str(db)] = result = evaluate(recorded_times(db), model)
        print(
            f"{db}: {result['problems']} problems, run-time compiled engines win "
            f"{result['library_wins']}; the model measures them on "
            f"{result['measured_by_model']} ({result['wins_the_model_measures']} of the wins)"
        )
        for name in ("model", "none"):
            s = result[name]
            print(
                f"  {name:5s}: picked / best recorded, geomean {s['geomean']:.4f}, "
                f"within 5% {s['within_5pct']}/{result['problems']}, worst {s['worst']:.3g}"
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
