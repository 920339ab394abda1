"""Immediate mode against NORMAL find on held-out problems (issue 14's measure).

For each problem held out from the heuristic's training (a hash split of a tuned FindDb's keys,
:func:`miocore.heuristic.train.is_held_out`), and optionally layers of MIOpenDriver files that
were never tuned: NORMAL find (every applicable solver measured, no pruning) gives the best
solver; ``get_solutions()[0]`` on an empty user database gives immediate mode's choice, once
with the learned heuristic (model and fitted WTI in the system folder, but not the database,
so the chain itself answers), once with plain WTI, and with ``--fitted-wti`` once with the
fitted WTI table alone (the fallback where no model applies). The choice and the best are then
re-timed head to head in the same run (alternating, median of ``--reps``, each timed as
find times it: device time on a GPU), and regret is
``time(choice) / time(best) - 1``.

    python benchmarks/find_quality.py --db runs/cpu/cpu_x86_64_2.db \\
        --model-dir miocore/data/db --device cpu --limit 120 --json out.json

Each held-out record is found in its own math mode (an fp32 record keyed ``_tf32`` in the
tf32 mode; ``--held-out-mode fixed``: every held-out problem once in ``--math-mode``, as the
runs before 2026-11-29 did, which measured the channels-last twins tuned in tf32 alone in the
exact mode the database had no record of); the untuned layers in ``--math-mode``.

``--shard I/N`` measures every N-th problem from the I-th (one process per GPU), and
``--merge A.json B.json ... --json out.json`` joins such runs' rows into one summary.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Single-threaded BLAS, as on Dask's tuning workers (its nanny sets these): the same conditions
# the database was measured under, and stable times on a shared machine.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402


def head_to_head(handle: Any, a: Any, b: Any, reps: int) -> tuple[float, float]:
    """Median times of solutions ``a`` and ``b`` on the same buffers, runs interleaved, each
    timed as find times it (``backend.time_ms``: device time on a GPU, wall time on the CPU)."""
    problem = a.problem
    rng = np.random.default_rng(0)
    backend = handle.backend
    arrays = {n: backend.random(getattr(problem, n), rng) for n in ("x", "w", "y")}
    sync = getattr(backend, "synchronize", None) or (lambda: None)
    run_a, run_b = handle.prepare(a), handle.prepare(b)
    for run in (run_a, run_b):  # warm up
        run(**arrays)
    sync()
    ta, tb = [], []
    for _ in range(reps):
        ta.append(backend.time_ms(lambda: run_a(**arrays)))
        tb.append(backend.time_ms(lambda: run_b(**arrays)))
    return statistics.median(ta), statistics.median(tb)


def _shrunk(problem: Any) -> Any:
    """``problem`` cut down like the corpus sample (at most 2 images, 16 channels per group,
    10 pixels a side), keeping its filter, pads, strides, dilations, groups, layout, type."""
    from miocore.corpus import shrink_row

    x, w, y, conv = problem.x, problem.w, problem.y, problem.conv
    row = {
        "n": x.lengths[0],
        "c": x.lengths[1],
        "k": y.lengths[1],
        "x": list(x.lengths[2:]),
        "filt": list(w.lengths[2:]),
        "pad": list(conv.pads),
        "stride": list(conv.strides),
        "dil": list(conv.dilations),
        "groups": conv.groups,
        "dtype": {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}[str(x.dtype)],
        "layout": x.layout,
        "dir": problem.direction.value,
    }
    return shrink_row(row, max_channels_per_group=16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the tuned FindDb file (for the split)")
    parser.add_argument("--model-dir", required=True, help="folder with the model + WTI table")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--holdout", type=float, default=0.2)
    parser.add_argument("--limit", type=int, default=100, help="held-out problems measured")
    parser.add_argument("--driver-file", action="append", default=[], help="untuned layers")
    parser.add_argument(
        "--shrink",
        action="store_true",
        help="shrink the untuned layers as the CPU database's problems were (corpus.shrink_row)",
    )
    parser.add_argument(
        "--max-gflop",
        type=float,
        help="cut the batch of heavier untuned layers to this much work (as the GPU sample)",
    )
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument(
        "--math-mode", default="exact", help="the math mode of the untuned layers (exact, tf32)"
    )
    parser.add_argument(
        "--held-out-mode",
        choices=("record", "fixed"),
        default="record",
        help="record (default): each held-out record found in its own math mode (an fp32 "
        "record keyed _tf32 in tf32, the channels-last twins were tuned in tf32 alone); "
        "fixed: every held-out problem once, in --math-mode (the runs before 2026-11-29)",
    )
    parser.add_argument("--dtype", help="only problems of this data type (e.g. float32)")
    parser.add_argument(
        "--seconds", type=float, help="stop measuring after this long and report what was done"
    )
    parser.add_argument("--json", help="write the per-problem results here")
    parser.add_argument(
        "--shard", help="I/N: measure only problems I, I+N, I+2N, ... of the list (0 <= I < N)"
    )
    parser.add_argument(
        "--merge", nargs="+", help="join these runs' --json files into one summary, measure nothing"
    )
    parser.add_argument(
        "--fitted-wti",
        action="store_true",
        help="also rank by the fitted WTI table alone (no model): the fallback's own quality",
    )
    args = parser.parse_args()
    if args.merge:
        return _merge(args.merge, args.json)

    os.environ["MIOCORE_FIND_PRUNE_FACTOR"] = "0"
    import miocore
    from miocore.db.mathkeys import split_record_key
    from miocore.heuristic.plugin import MODEL_SUFFIX, WTI_SUFFIX
    from miocore.heuristic.train import DB_FILE_LAYER, is_held_out, open_db_file
    from miocore.problem.conv import ConvProblem

    db = open_db_file(args.db)
    records = [split_record_key(k) for k in db.keys(DB_FILE_LAYER)]
    db.close()
    tuned = list(dict.fromkeys(base for base, _ in records))
    if args.held_out_mode == "fixed":  # a problem's records of both math modes count once
        records = [(base, args.math_mode) for base in tuned]
    held_out = (
        (ConvProblem.from_key(base), mode)
        for base, mode in records
        if is_held_out(base, args.holdout)
    )
    if args.dtype:
        held_out = (q for q in held_out if q[0].dtype.value == args.dtype)
    problems = [("held-out", p, m) for p, m in itertools.islice(held_out, args.limit)]
    if args.driver_file:
        from miocore.cli.tune import problems_from_driver_file
        from miocore.tune.sources import cap_work

        seen = set(tuned)  # an untuned layer is one the database does not hold
        for f in args.driver_file:
            for p in problems_from_driver_file(f):
                p = _shrunk(p) if args.shrink else p
                p = cap_work(p, args.max_gflop) if args.max_gflop else p
                if p.key not in seen and args.dtype in (None, p.dtype.value):
                    seen.add(p.key)
                    problems.append(("untuned", p, args.math_mode))

        # Alternate the two kinds, so that a run cut short by --seconds has measured both.
        held = [q for q in problems if q[0] == "held-out"]
        new = [q for q in problems if q[0] == "untuned"]
        problems = [q for pair in zip(held, new, strict=False) for q in pair]
        problems += held[len(new) :] + new[len(held) :]

    if args.shard:
        index, count = _shard(args.shard)
        problems = problems[index::count]

    tmp = Path(tempfile.mkdtemp(prefix="find-quality-"))
    device_id = miocore.Handle(args.device).device.identity
    learned = tmp / "learned"
    learned.mkdir()
    for suffix in (MODEL_SUFFIX, WTI_SUFFIX):
        src = Path(args.model_dir) / f"{device_id}{suffix}"
        if src.is_file():
            (learned / src.name).write_bytes(src.read_bytes())
    empty = tmp / "empty"
    empty.mkdir()
    # each ranking's system folder: the heuristic's (model and table), none, the table alone
    folders = {"heuristic": learned, "plain WTI": empty}
    table_file = Path(args.model_dir) / f"{device_id}{WTI_SUFFIX}"
    if args.fitted_wti and table_file.is_file():
        folders["fitted WTI"] = tmp / "fitted"
        folders["fitted WTI"].mkdir()
        (folders["fitted WTI"] / table_file.name).write_bytes(table_file.read_bytes())
    os.environ["MIOCORE_USER_DB_PATH"] = str(tmp / "user")
    os.environ["MIOCORE_SYSTEM_DB_PATH"] = str(learned)  # the plug-in reads the env's folder
    by_mode: dict[str, tuple[Any, dict[str, Any]]] = {}  # math mode: finder, ranking handles

    def handles_for(mode: str) -> tuple[Any, dict[str, Any]]:
        if mode not in by_mode:
            finder = miocore.Handle(
                args.device, user_db_path=tmp / "finder", system_db_path=empty, math_mode=mode
            )
            ranked = {
                label: miocore.Handle(args.device, system_db_path=folder, math_mode=mode)
                for label, folder in folders.items()
            }
            by_mode[mode] = finder, ranked
        return by_mode[mode]

    rows = []
    started = time.perf_counter()
    for i, (kind, problem, mode) in enumerate(problems):
        finder, handles = handles_for(mode)
        if args.seconds is not None and time.perf_counter() - started > args.seconds:
            print(f"stopped after {args.seconds} s: {i} of {len(problems)}", file=sys.stderr)
            break
        try:
            found = finder.find_solutions(problem, find_mode="NORMAL")
        except miocore.MiocoreError as exc:
            print(f"skip {problem.key}: {exc}", file=sys.stderr)
            continue
        best = found[0]
        row: dict[str, Any] = {
            "key": problem.key,
            "kind": kind,
            "math_mode": mode,
            "best": best.solver,
        }
        # every candidate's time from the find, for replaying other rankings offline
        # (benchmarks/immediate_offline.py reads these files too)
        row["candidates"] = {
            s.solver: s.time_ms for s in found if not s.is_estimate and math.isfinite(s.time_ms)
        }
        for label, h in handles.items():
            os.environ["MIOCORE_SYSTEM_DB_PATH"] = str(folders[label])  # the plug-in reads it
            first = h.get_solutions(problem)[0]
            calls = []
            for _ in range(20):
                start = time.perf_counter()
                h.get_solutions(problem)
                calls.append((time.perf_counter() - start) * 1e3)
            failed = None
            if first.solver == best.solver:
                regret = 0.0
            else:
                try:
                    t_choice, t_best = head_to_head(finder, first, best, args.reps)
                    regret = max(0.0, t_choice / t_best - 1.0)
                except miocore.MiocoreError as exc:  # a choice find refuses (wrong answers)
                    failed, regret = str(exc)[:200], math.inf
            row[label] = {
                "choice": first.solver,
                "source": first.source,
                "regret": regret,
                **({"failed": failed} if failed else {}),
                "get_solutions_ms": statistics.median(calls),
            }
        rows.append(row)
        print(
            f"{i + 1}/{len(problems)} {problem.key}: best {best.solver}; "
            + "; ".join(f"{k} {row[k]['choice']} +{100 * row[k]['regret']:.0f}%" for k in handles),
            file=sys.stderr,
            flush=True,
        )
    summary: dict[str, Any] = {
        "device": device_id,
        "host": platform.node(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "math_mode": args.math_mode,
        "held_out_mode": args.held_out_mode,
        **({"shard": args.shard} if args.shard else {}),
    }
    summary.update(_summarize(rows, list(folders)))
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


def _shard(text: str) -> tuple[int, int]:
    """``I/N`` as two integers, 0 <= I < N."""
    try:
        index, count = (int(v) for v in text.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise SystemExit(f"--shard: expected I/N with 0 <= I < N, got {text!r}")
    return index, count


def _summarize(rows: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    """Per kind of problem and ranking: the share within 10%, mean and worst regret, failures
    and the median ``get_solutions`` time."""
    out: dict[str, Any] = {"problems": len(rows)}
    for kind in sorted({r["kind"] for r in rows}):
        subset = [r for r in rows if r["kind"] == kind]
        for label in labels:
            # a choice that could not run counts as a miss; the mean is over those that ran
            regrets = [r[label]["regret"] for r in subset]
            ran = [x for x in regrets if math.isfinite(x)] or [0.0]
            gs = sorted(r[label]["get_solutions_ms"] for r in subset)
            out[f"{kind} / {label}"] = {
                "problems": len(subset),
                "within_10pct": sum(x <= 0.10 for x in regrets) / len(regrets),
                "mean_regret": sum(ran) / len(ran),
                "worst_regret": max(ran),
                "failed": len(regrets) - sum(map(math.isfinite, regrets)),
                "get_solutions_ms_median": gs[len(gs) // 2],
            }
    return out


def _merge(files: list[str], out: str | None) -> int:
    """One summary over several runs' rows (``--shard`` runs of one list)."""
    runs = [json.loads(Path(f).read_text()) for f in files]
    rows = [r for run in runs for r in run["rows"]]
    labels = [k for k in (rows[0] if rows else {}) if isinstance(rows[0][k], dict)]
    labels = [k for k in labels if "regret" in rows[0][k]]
    first = runs[0]["summary"]
    keep = ("device", "host", "date", "math_mode", "held_out_mode")
    summary = {k: first[k] for k in keep if k in first}
    summary["merged"] = [run["summary"].get("shard", f) for run, f in zip(runs, files, strict=True)]
    summary.update(_summarize(rows, labels))
    print(json.dumps(summary, indent=2))
    if out:
        Path(out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
