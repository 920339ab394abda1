"""Immediate mode's first choice on real network layers, offline, against their measured times.

``gpu_vs_cudnn.py`` keeps, per layer, every candidate solver's time from a NORMAL find on the
GPU (``candidates``). This replays immediate mode's ranking of those same candidates (the
model where it knows a solver, the fitted WTI table, plain WTI merged in by time: the ranking
``miocore heuristic eval`` scores) on an offline context with the device's ceilings, and
scores its first choice against the fastest measured: the share within 10%, mean and worst
regret, per suite, type and direction, and which solvers the misses chose over which. No
device is needed: it shows how a model and WTI table would choose among today's solvers on
layers the database never held, before any re-timing (``find_quality.py`` re-times both on
the device).

    python benchmarks/immediate_offline.py \
        benchmarks/results/gpu_h200x4_vs_cudnn_grid_session32.json
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import miocore
from miocore.cli.heuristic import immediate_ranking
from miocore.db.mathkeys import record_key
from miocore.heuristic.evaluate import quality
from miocore.heuristic.features import problem_features
from miocore.heuristic.model import TreeModel
from miocore.heuristic.train import Sample
from miocore.heuristic.wti import WtiTable
from miocore.solver import Ceilings, DeviceInfo, ExecutionContext

DB = Path(__file__).resolve().parent.parent / "miocore" / "data" / "db"


def sm90_context(fp32_gflops: float, gbps: float) -> ExecutionContext:
    """An offline sm_90 context with the ceilings the CUDA backend reads from an H200's
    attributes (tensor cores at 16x the fp32 rate)."""
    half = 16 * fp32_gflops
    ceilings = Ceilings(
        gflops={
            miocore.DataType.FLOAT32: fp32_gflops,
            miocore.DataType.FLOAT16: half,
            miocore.DataType.BFLOAT16: half,
        },
        gbps=gbps,
    )
    device = DeviceInfo(
        backend="cuda",
        name="sm_90 (offline)",
        arch="sm90",
        compute_units=132,
        identity="sm90_132",
        measure_ceilings=lambda: ceilings,
    )
    return ExecutionContext(device=device)


def layer_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """Every measured layer of the files with at least two candidates' times: the layers of
    ``gpu_vs_cudnn.py`` runs, or the problems of ``find_quality.py`` runs (``suite`` their
    kind: held-out or untuned)."""
    rows = []
    for path in paths:
        data = json.loads(path.read_text())
        if "summary" in data:  # find_quality.py: every plugin, one math mode
            run_mode = data["summary"].get("math_mode")
            for row in data.get("rows", []):
                times = {k: v for k, v in (row.get("candidates") or {}).items() if _time(v)}
                if len(times) < 2:
                    continue
                problem = miocore.ConvProblem.from_key(row["key"])
                tf32 = row.get("math_mode", run_mode) == "tf32"  # a row's own, since 2026-11-29
                precision = "tf32" if tf32 and problem.dtype == "float32" else problem.dtype.value
                direction = problem.direction.value
                rows.append(
                    {"key": row["key"], "suite": row["kind"], "precision": precision,
                     "direction": direction, "candidates": times, "plugins": "all"}
                )  # fmt: skip
            continue
        # a vs_cudnn_grid file holds several runs' files under "jobs"
        for run in [data, *(data.get("jobs") or {}).values()]:
            plugins = "own" if "cudnn" in (run.get("disabled_plugins") or []) else "all"
            for row in run.get("layers", []):
                times = {k: v for k, v in (row.get("candidates") or {}).items() if _time(v)}
                if len(times) >= 2 and row.get("key"):
                    rows.append({**row, "candidates": times, "plugins": plugins})
    return rows


def _time(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "files", nargs="+", type=Path, help="gpu_vs_cudnn.py --out or find_quality.py --json files"
    )
    parser.add_argument("--model", type=Path, default=DB / "sm90_132.heuristic.npz")
    parser.add_argument("--wti-table", type=Path, default=DB / "sm90_132.wti.json")
    parser.add_argument("--fp32-gflops", type=float, default=66_900.0, help="H200: 132 SMs")
    parser.add_argument("--gbps", type=float, default=4_800.0, help="H200's HBM3e")
    parser.add_argument("--suites", nargs="+", default=None, help="only these suites")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    model = TreeModel.load(args.model) if args.model.is_file() else None
    table = WtiTable.load(args.wti_table) if args.wti_table.is_file() else None
    exact = sm90_context(args.fp32_gflops, args.gbps)
    contexts = {"exact": exact, "tf32": dataclasses.replace(exact, math_mode="tf32")}
    solvers = {r.name: r.solver for r in miocore.Handle("cpu").registry.solvers}
    groups: dict[str, list[Sample]] = collections.defaultdict(list)
    seen = set()
    for row in layer_rows(args.files):
        if args.suites and row["suite"] not in args.suites:
            continue
        mode = "tf32" if row["precision"] in ("tf32", "tfloat32") else "exact"
        problem = miocore.ConvProblem.from_key(row["key"])
        key = record_key(problem, mode)
        if (key, row["plugins"]) in seen:  # a layer in several files or suites: once
            continue
        seen.add((key, row["plugins"]))
        sample = Sample(key=key, features=problem_features(problem, mode), times=row["candidates"])
        label = f"{row['plugins']} {row['suite']} {row['precision']} {row['direction']}"
        groups[label].append(sample)
    rankings = {
        "plain WTI": immediate_ranking(None, None, contexts, solvers),
        "fitted WTI": immediate_ranking(None, table, contexts, solvers),
        "model + fitted WTI": immediate_ranking(model, table, contexts, solvers),
    }
    everything = [s for samples in groups.values() for s in samples]
    report: dict[str, Any] = {"problems": len(everything), "overall": {}, "groups": {}}
    print(f"{len(everything)} layers of {len(args.files)} files")
    for name, ranking in rankings.items():
        q = quality(everything, ranking)
        report["overall"][name] = dataclasses.asdict(q)
        print(f"  {name:20s} {q.line()}")
    ranking = rankings["model + fitted WTI"]
    misses: collections.Counter[tuple[str, str]] = collections.Counter()
    print("per group, model + fitted WTI:")
    for group, samples in sorted(groups.items()):
        q = quality(samples, ranking)
        report["groups"][group] = dataclasses.asdict(q)
        print(f"  {group:40s} {q.line()}")
        for s in samples:
            order = [n for n in ranking(s) if n in s.times]
            best = min(s.times, key=s.times.__getitem__)
            if order and s.times[order[0]] > 1.1 * s.times[best]:
                misses[(order[0], best)] += 1
    print("misses (chosen over the fastest):")
    for (chosen, best), count in misses.most_common(15):
        print(f"  {count:4d}  {chosen} over {best}")
    report["misses"] = [[c, b, n] for (c, b), n in misses.most_common()]
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
