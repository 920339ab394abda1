"""Offline: would DYNAMIC_HYBRID's decision for library-compiled candidates pick well?

Reads FindDb files written by finds that measured every candidate (``gpu_find_profile.py``
passes in the default mode, where cuDNN's run-time compiled engines are measured on every
problem) and replays the decision of ``MIOCORE_CUDNN_RUNTIME_COMPILED=compile`` on their
recorded times: a run-time compiled engine of a problem is measured only where its estimate
is within ``--margin`` of the best ready candidate's. Two estimates: a learned model (what
``miocore.find.dynamic`` asks first) and none (every such engine left out). For each: how
often the engines are measured (each costs its plan build, 10-260 ms on an H200), and the
picked solver's recorded time against the best recorded one.

    python benchmarks/library_compile_decision.py --db /tmp/fenv/db-efficientnet_b0-on \\
        --model miocore/data/db/sm90_132.heuristic.npz --margin 1 1.5 --out decision.json
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from miocore.db.packed import readable_db_file
from miocore.heuristic.features import problem_features
from miocore.heuristic.model import TreeModel
from miocore.heuristic.train import is_held_out
from miocore.problem.conv import ConvProblem

#: cuDNN engines whose plans compile per problem on sm90 with cuDNN 9.19 (their behaviour
#: note RUNTIME_COMPILATION, as ``gpu_find_profile.py``'s per-engine build times showed).
RUNTIME_COMPILED = frozenset(f"cudnn.eng{e}" for e in (5, 6, 16, 19, 20, 70, 71, 78))


def recorded_times(db: Path) -> dict[str, dict[str, float]]:
    """key -> solver -> recorded ms, from every ``*.db`` file in ``db`` (or its packed
    ``*.db.xz``, as shipped)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    names = {p.name.removesuffix(".xz") for p in [*db.glob("*.db"), *db.glob("*.db.xz")]}
    for name in sorted(names):
        with sqlite3.connect(f"file:{readable_db_file(db / name)}?mode=ro", uri=True) as con:
            for key, solver, time_ms in con.execute("select key, solver, time_ms from find_db"):
                out[key][solver] = float(time_ms)
    return out


def evaluate(
    times: dict[str, dict[str, float]],
    model: TreeModel,
    margin: float = 1.0,
    held_out: float | None = None,
    margins: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The decision replayed per problem with the model's estimates and without any: each
    run-time compiled engine is measured where its estimate is under ``margin`` times the
    best ready estimate (``miocore.find.dynamic.COMPILE_MARGIN``); one the model
    does not know counts as measured (find would ask WTI, which has no recorded stand-in).
    ``margins`` gives some engines their own margin instead."""
    margins = margins or {}
    rows = []
    for key, by_solver in times.items():
        if held_out is not None and not is_held_out(key, held_out):
            continue  # a problem the model trained on
        library = [s for s in by_solver if s in RUNTIME_COMPILED]
        ready = [s for s in by_solver if s not in RUNTIME_COMPILED]
        if not library or not ready:
            continue
        known = [s for s in by_solver if model.knows(s)]
        plain, _, mode = key.partition("_")  # records of the tf32 math mode end in _tf32
        features = problem_features(ConvProblem.from_key(plain), mode or "exact")
        estimate = dict(zip(known, model.predict_ms(features, known), strict=True))
        best_ready = min((estimate[s] for s in ready if s in estimate), default=None)
        measured = [
            s
            for s in library
            if best_ready is None
            or s not in estimate
            or estimate[s] < margins.get(s, margin) * best_ready
        ]
        best = min(by_solver.values())
        ready_best = min(by_solver[s] for s in ready)
        picked = min([ready_best, *(by_solver[s] for s in measured)])
        rows.append(
            {
                "key": key,
                "library_wins": min(by_solver[s] for s in library) < ready_best,
                "measured": bool(measured),
                "builds": len(measured),
                "library": len(library),
                "regret_model": picked / best,
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
        "margin": margin,
        "library_wins": sum(r["library_wins"] for r in rows),
        "measured_by_model": sum(r["measured"] for r in rows),
        "builds_by_model": sum(r["builds"] for r in rows),
        "builds_all": sum(r["library"] for r in rows),
        "wins_the_model_measures": sum(r["library_wins"] and r["measured"] for r in rows),
        "model": summary("regret_model"),
        "none": summary("regret_none"),
    }


def residual_spread(
    times: dict[str, dict[str, float]], model: TreeModel, held_out: float
) -> dict[str, float]:
    """Per solver, the standard deviation of log(recorded / estimated) time over the problems
    the model trained on (those not held out), for solvers with at least 20 of them."""
    logs: dict[str, list[float]] = defaultdict(list)
    for key, by_solver in times.items():
        if is_held_out(key, held_out):
            continue
        known = [s for s in by_solver if model.knows(s)]
        if not known:
            continue
        plain, _, mode = key.partition("_")
        features = problem_features(ConvProblem.from_key(plain), mode or "exact")
        for s, guess in zip(known, model.predict_ms(features, known), strict=True):
            if guess > 0:
                logs[s].append(math.log(by_solver[s] / guess))
    return {s: statistics.pstdev(v) for s, v in logs.items() if len(v) >= 20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, nargs="+", required=True, help="FindDb folders")
    parser.add_argument("--model", type=Path, required=True, help="a heuristic .npz")
    parser.add_argument("--margin", type=float, nargs="+", default=[1.0, 1.5])
    parser.add_argument(
        "--held-out",
        type=float,
        default=None,
        metavar="SHARE",
        help="only the problems a model trained with this holdout share did not see",
    )
    parser.add_argument(
        "--spread-k",
        type=float,
        nargs="*",
        default=[],
        help="also replay per-engine margins exp(K x the model's residual spread for the "
        "engine on its training problems) (needs --held-out)",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.spread_k and args.held_out is None:
        parser.error("--spread-k needs --held-out")
    model = TreeModel.load(args.model)
    results = {}
    for db in args.db:
        times = recorded_times(db)
        runs: list[tuple[str, float, dict[str, float] | None]] = [
            (f"margin {m:g}", m, None) for m in args.margin
        ]
        if args.spread_k:
            spread = residual_spread(times, model, args.held_out)
            print(f"{db}: residual spread " + ", ".join(
                f"{s.removeprefix('cudnn.')} {spread[s]:.2f}" for s in sorted(RUNTIME_COMPILED)
                if s in spread
            ))  # fmt: skip
            typical = statistics.median(spread.values())
            for k in args.spread_k:
                margins = {s: math.exp(k * spread.get(s, typical)) for s in RUNTIME_COMPILED}
                runs.append((f"spread x{k:g}", 1.0, margins))
        for label, margin, margins in runs:
            result = evaluate(times, model, margin, args.held_out, margins)
            results[f"{db} {label}"] = result
            print(
                f"{db}, {label}: {result['problems']} problems, run-time compiled "
                f"engines win {result['library_wins']}; the model measures them on "
                f"{result['measured_by_model']} ({result['wins_the_model_measures']} of the "
                f"wins), {result['builds_by_model']} of {result['builds_all']} engine builds"
            )
            for name in ("model", "none"):
                summary = result[name]
                print(
                    f"  {name:5s}: picked / best recorded, geomean {summary['geomean']:.4f}, "
                    f"within 5% {summary['within_5pct']}/{result['problems']}, "
                    f"worst {summary['worst']:.3g}"
                )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
