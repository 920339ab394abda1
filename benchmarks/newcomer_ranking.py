"""How immediate mode should rank a solver its heuristic never saw (issue 14).

A solver installed after the shipped database was tuned (a new plugin, a new kernel family)
has no times in the learned model nor a fitted WTI correction. This simulates it on a
shipped database: for each of the most frequent winners, the model and the WTI table are
trained without that solver's times, then the held-out problems (whose records keep its
times) are ranked three ways:

* ``last``: as ``ImmediateRanker.fallback`` did up to the twenty-eighth session: the
  heuristic's solvers first, then every solver it does not know by raw WTI;
* ``merged``: the newcomer's WTI estimate placed among the heuristic's ranking by estimated
  time (``miocore.find.ranker.merge_by_time``);
* ``merged, corrected``: the same with the newcomer's estimate scaled by the WTI table's
  median correction over all fitted solvers;
* ``merged xF``: the newcomer placed as if F times slower than its WTI estimate (the ranker
  uses F = ``NEWCOMER_DOUBT``, 3);

and, as the ceiling, the shipped settings trained with every solver. Recorded times (no
re-timing): within 10% of the recorded best, mean regret; and how often the newcomer is the
best recorded solver of a held-out problem.

    python benchmarks/newcomer_ranking.py --db miocore/data/db/cpu_x86_64_2.db --solvers 8
    python benchmarks/newcomer_ranking.py --db miocore/data/db/sm90_132.db \
        --only triton.igemm_fwd triton.igemm_bwd gemm.gpu_im2col direct.gpu_depthwise

A database of another device is ranked with a context described from its attributes
(``DESCRIBED``; WTI needs only the device's rates), so the sm90 one runs on any machine.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import miocore.heuristic.train as train_mod
from miocore.cli.heuristic import _context, _plain_wti
from miocore.cli.heuristic import _Estimate as Estimate
from miocore.db.mathkeys import split_record_key
from miocore.db.packed import device_of
from miocore.find.ranker import merge_by_time
from miocore.heuristic.evaluate import quality
from miocore.heuristic.plugin import rank_with
from miocore.heuristic.train import DB_FILE_LAYER, is_held_out, open_db_file, read_samples, train
from miocore.heuristic.wti import fit_wti
from miocore.problem.conv import ConvProblem
from miocore.values import evolve

HOLDOUT = 0.2
POLICIES = ("last", "merged", "merged, corrected", "merged x1.5", "merged x2", "merged x3")


#: Devices described here so that their solvers' WTI can be asked on another machine: the
#: attributes an H100 SXM reports (132 SMs at 1.98 GHz, 5120-bit memory at 2.619 GHz), turned
#: into ceilings as ``miocore.backends.cuda`` does (the H200 shares the identity).
DESCRIBED = {"sm90_132": ("cuda", "sm90", 132, 1.98e9, 2 * 2.619e9 * 5120 / 8 / 1e9)}


def _described(device: str) -> tuple[Any, dict[str, Any]] | None:
    """A context for a described device (nothing runs on it) and every installed solver."""
    if device not in DESCRIBED:
        return None
    import miocore
    from miocore.problem.dtypes import DataType
    from miocore.solver.interface import Ceilings, DeviceInfo
    from miocore.solver.registry import default_registry

    backend, arch, sms, clock, gbps = DESCRIBED[device]
    fp32 = sms * 128 * 2 * clock / 1e9
    ceilings = Ceilings(
        gflops={DataType.FLOAT32: fp32, DataType.FLOAT16: 16 * fp32, DataType.BFLOAT16: 16 * fp32},
        gbps=gbps,
    )
    info = DeviceInfo(
        backend=backend, name=device, arch=arch, compute_units=sms, identity=device,
        measure_ceilings=lambda: ceilings,
    )  # fmt: skip
    ctx = miocore.ExecutionContext(device=info)
    return ctx, {r.name: r.solver for r in default_registry().solvers if backend in r.backends}


def _samples(db_path: Path) -> list[Any]:
    db = open_db_file(db_path)
    try:
        return list(read_samples(db.items(DB_FILE_LAYER)))
    finally:
        db.close()


def _without(samples: list[Any], solver: str) -> list[Any]:
    out = []
    for s in samples:
        times = {k: v for k, v in s.times.items() if k != solver}
        if times:
            out.append(evolve(s, times=times))
    return out


def _train_without(db_path: Path, solver: str | None) -> Any:
    """The shipped model settings, trained on the database less ``solver``'s times."""
    original = train_mod.read_samples
    if solver is not None:

        def dropped(records: Any) -> Any:
            return iter(_without(list(original(records)), solver))

        train_mod.read_samples = dropped
    try:
        return train(db_path, holdout=HOLDOUT)
    finally:
        train_mod.read_samples = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, default=Path("miocore/data/db/cpu_x86_64_2.db"))
    parser.add_argument("--solvers", type=int, default=6, help="most frequent winners tried")
    parser.add_argument("--only", nargs="*", default=[], help="these solvers instead")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = device_of(args.db)
    found = _context(device, None, None) or _described(device)
    if found is None:
        sys.exit(f"this machine is not {device}: WTI needs the database's device")
    exact, solvers = found
    contexts = {"exact": exact, "tf32": evolve(exact, math_mode="tf32")}
    samples = _samples(args.db)
    training = [s for s in samples if not is_held_out(s.key, HOLDOUT)]
    held = [s for s in samples if is_held_out(s.key, HOLDOUT)]
    wins = Counter(min(s.times, key=s.times.get) for s in samples)
    problems = {s.key: ConvProblem.from_key(split_record_key(s.key)[0]).canonical for s in samples}

    def wti_ms(ctx: Any, name: str, problem: Any) -> float:
        ((_, score),) = _plain_wti(ctx, solvers, problem, [name])
        return ctx.ideal_ms(problem) / score if score > 0 else math.inf

    def ranking(model: Any, table: Any, newcomer: str | None, policy: str) -> Any:
        typical = statistics.median(table.by_solver.values()) if table.by_solver else 0.0

        def rank(s: Any) -> list[str]:
            ctx = contexts[split_record_key(s.key)[1]]
            problem = problems[s.key]
            names = list(s.times)
            known = [n for n in names if n != newcomer]
            ranked = [
                Estimate(n, ms) for n, ms in rank_with(model, table, ctx, problem, known, solvers)
            ]
            others = []
            doubt = 1.0
            if newcomer in s.times and policy != "last":
                ms = wti_ms(ctx, newcomer, problem)
                if policy == "merged, corrected":
                    ms *= math.exp(typical)
                elif policy.startswith("merged x"):
                    doubt = float(policy.removeprefix("merged x"))
                if math.isfinite(ms):
                    others.append(Estimate(newcomer, ms))
            first = [e.solver for e in merge_by_time(ranked, others, doubt)]
            rest = _plain_wti(ctx, solvers, problem, [n for n in names if n not in first])
            return first + [n for n, _ in rest]

        return rank

    full_model = _train_without(args.db, None)
    full_table = fit_wti(
        [(problems[s.key], s.times, split_record_key(s.key)[1]) for s in training],
        exact, solvers, device=device,
    )  # fmt: skip
    rows = []
    ceiling = quality(held, ranking(full_model, full_table, None, "last"))
    print(f"{len(held)} held-out problems; every solver known: {ceiling.line()}", flush=True)
    chosen = [(n, wins[n]) for n in args.only] or wins.most_common(args.solvers)
    for newcomer, count in chosen:
        model = _train_without(args.db, newcomer)
        table = fit_wti(
            [(problems[s.key], s.times, split_record_key(s.key)[1])
             for s in _without(training, newcomer)],
            exact, solvers, device=device,
        )  # fmt: skip
        best_held = sum(min(s.times, key=s.times.get) == newcomer for s in held)
        row: dict[str, Any] = {"newcomer": newcomer, "wins": count, "best_in_held": best_held}
        for policy in POLICIES:
            q = quality(held, ranking(model, table, newcomer, policy))
            row[policy] = {"within_10pct": q.within_10pct, "mean_regret": q.mean_regret}
            print(f"{newcomer:22s} best in {best_held:3d}  {policy:10s} {q.line()}", flush=True)
        rows.append(row)
    if args.out:
        args.out.write_text(json.dumps({"held": len(held), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
