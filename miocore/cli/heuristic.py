"""``miocore heuristic``: train a learned heuristic from a FindDb, and evaluate one.

``train --db FILE --out DIR`` writes ``<device>.heuristic.npz`` (and, where this machine is
the database's device, ``<device>.wti.json``: fitted WTI corrections) into DIR; put them in
the user database folder (or ``miocore/data/db/``) for immediate mode to use them.
``eval --db FILE`` scores the model, fitted WTI and plain WTI on the held-out problems.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

from miocore.db.packed import device_of
from miocore.errors import InvalidArgumentError
from miocore.values import asdict


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``heuristic`` with its ``train`` and ``eval`` subcommands."""
    parser = subparsers.add_parser(
        "heuristic",
        help="train or evaluate the learned immediate-mode heuristic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="heuristic_command", metavar="ACTION", required=True)
    train = sub.add_parser("train", help="train a model from a FindDb file", allow_abbrev=False)
    train.add_argument("--db", required=True, help="a FindDb file: <folder>/<device>.db")
    train.add_argument("--out", required=True, help="folder for the model and WTI table")
    train.add_argument("--holdout", type=float, default=0.2, help="share held out (default 0.2)")
    train.add_argument("--trees", type=int, default=60, help="trees per solver (default 60)")
    train.add_argument("--depth", type=int, default=3, help="tree depth (default 3)")
    train.add_argument(
        "--learning-rate", type=float, default=0.15, help="boosting step (default 0.15)"
    )
    train.add_argument(
        "--min-samples",
        type=int,
        default=8,
        help="times a solver needs to get a model (default 8; fewer: ranked by WTI)",
    )
    train.add_argument(
        "--backend", default=None, help="backend whose device fits WTI (default: from the db)"
    )
    train.add_argument(
        "--target",
        choices=("absolute", "relative"),
        default="absolute",
        help="what each solver's trees predict: log time (default) or log time over the "
        "problem's fastest",
    )
    train.add_argument(
        "--within-weight",
        type=float,
        default=0.1,
        help="also train per solver the odds of running within --within-tolerance of the "
        "fastest, and rank by log time less this weight times those log-odds (default 0.1, "
        "as the shipped models; 0: time alone)",
    )
    train.add_argument(
        "--within-tolerance",
        type=float,
        default=0.10,
        help="how near the fastest counts as near for --within-weight (default 0.10)",
    )
    train.add_argument(
        "--wti-only",
        action="store_true",
        help="fit only the WTI table (needs no scikit-learn; run it on the device)",
    )
    ev = sub.add_parser("eval", help="score rankings on held-out problems", allow_abbrev=False)
    ev.add_argument("--db", required=True, help="a FindDb file: <folder>/<device>.db")
    ev.add_argument("--model", default=None, help="model file (default: beside the db)")
    ev.add_argument("--wti-table", default=None, help="WTI table (default: beside the db)")
    ev.add_argument("--holdout", type=float, default=0.2, help="share held out (default 0.2)")
    ev.add_argument("--backend", default=None, help="backend for WTI (default: from the db)")
    ev.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace, registry: Any = None) -> int:
    """Run ``miocore heuristic train`` or ``eval``."""
    if args.heuristic_command == "train":
        return _train(args, registry)
    return _eval(args, registry)


def _backend_for(device: str, backend: str | None) -> str:
    if backend:
        return backend
    if device.startswith("cpu"):
        return "cpu"
    if device.startswith("sm"):
        return "cuda"
    if device.startswith("gfx"):
        return "hip"
    raise InvalidArgumentError("cannot tell the backend; pass --backend", field="db", value=device)


def _context(device: str, backend: str | None, registry: Any) -> tuple[Any, dict[str, Any]] | None:
    """This machine's context and solvers when it is the database's device, else None."""
    from miocore.find.handle import Handle

    try:
        handle = Handle(_backend_for(device, backend), registry=registry)
    except Exception:  # no such device here: WTI cannot be fitted or scored on this machine
        return None
    if handle.device.identity != device:
        return None
    return handle.context, {r.name: r.solver for r in handle.registry.solvers}


def _train(args: argparse.Namespace, registry: Any) -> int:
    from miocore.heuristic.train import DB_FILE_LAYER, open_db_file, read_samples, train
    from miocore.heuristic.wti import fit_wti
    from miocore.problem.conv import ConvProblem

    out = Path(args.out)
    device = device_of(args.db)  # sm90_132 of sm90_132.db or of the packed sm90_132.db.xz
    if not args.wti_only:
        model = train(
            args.db,
            holdout=args.holdout,
            trees=args.trees,
            depth=args.depth,
            learning_rate=args.learning_rate,
            min_samples=args.min_samples,
            target=args.target,
            within_weight=args.within_weight,
            within_tolerance=args.within_tolerance,
        )
        path = model.save(out / f"{model.device}.heuristic.npz")
        known = [s for s in model.solvers if model.knows(s)]
        print(f"model: {path} ({path.stat().st_size} bytes, {len(known)} solvers)")
    found = _context(device, args.backend, registry)
    if found is None:
        print(f"WTI table: skipped (this machine is not {device}); fit it on the device")
        return 1 if args.wti_only else 0
    ctx, solvers = found
    from miocore.db.mathkeys import split_record_key
    from miocore.heuristic.train import is_held_out

    db = open_db_file(args.db)
    try:
        samples = [
            (ConvProblem.from_key(base), s.times, math_mode)
            for s in read_samples(db.items(DB_FILE_LAYER))
            if not is_held_out(s.key, args.holdout)
            for base, math_mode in [split_record_key(s.key)]
        ]
    finally:
        db.close()
    table = fit_wti(samples, ctx, solvers, device=device)
    tpath = table.save(out / f"{device}.wti.json")
    print(f"WTI table: {tpath} ({len(table.by_solver)} solvers)")
    return 0


def _eval(args: argparse.Namespace, registry: Any) -> int:
    from miocore.heuristic.evaluate import quality
    from miocore.heuristic.model import TreeModel
    from miocore.heuristic.train import DB_FILE_LAYER, is_held_out, open_db_file, read_samples
    from miocore.heuristic.wti import WtiTable
    from miocore.values import evolve

    db_path = Path(args.db)
    device = device_of(db_path)
    model_path = Path(args.model) if args.model else db_path.with_name(f"{device}.heuristic.npz")
    table_path = Path(args.wti_table) if args.wti_table else db_path.with_name(f"{device}.wti.json")
    model = TreeModel.load(model_path) if model_path.is_file() else None
    table = WtiTable.load(table_path) if table_path.is_file() else None
    db = open_db_file(db_path)
    try:
        held = [
            s for s in read_samples(db.items(DB_FILE_LAYER)) if is_held_out(s.key, args.holdout)
        ]
    finally:
        db.close()
    results: dict[str, Any] = {}
    if model is not None:
        results["model"] = quality(held, lambda s: [n for n, _ in _model_rank(model, s)])
    found = _context(device, args.backend, registry)
    if found is not None:
        exact, solvers = found
        contexts = {"exact": exact, "tf32": evolve(exact, math_mode="tf32")}
        results["plain WTI"] = quality(held, immediate_ranking(None, None, contexts, solvers))
        if table is not None:
            results["fitted WTI"] = quality(held, immediate_ranking(None, table, contexts, solvers))
        if model is not None:
            results["model + fitted WTI"] = quality(
                held, immediate_ranking(model, table, contexts, solvers)
            )
    if args.json:
        print(
            json.dumps(
                {k: asdict(v) for k, v in results.items()},
                indent=2,
            )
        )
    else:
        print(f"{len(held)} held-out problems of {db_path}")
        for name, q in results.items():
            print(f"  {name:20s} {q.line()}")
    return 0


def immediate_ranking(
    model: Any, table: Any, contexts: dict[str, Any], solvers: dict[str, Any]
) -> Any:
    """A ranking of a record's solvers (``Sample`` -> names, best first) as immediate mode
    orders them on the device of ``contexts`` (one per math mode): ``model`` where it knows
    a solver, else ``table``'s fitted WTI (either may be None), the rest by plain WTI merged
    in by estimated time (``ImmediateRanker``'s fallback), those without a WTI last."""
    from miocore.db.mathkeys import split_record_key
    from miocore.find.ranker import merge_by_time
    from miocore.heuristic.plugin import rank_with
    from miocore.problem.conv import ConvProblem

    def ranking(s: Any) -> list[str]:
        base, math_mode = split_record_key(s.key)
        ctx = contexts[math_mode]
        problem = ConvProblem.from_key(base).canonical
        ranked = rank_with(model, table, ctx, problem, list(s.times), solvers)
        names = {n for n, _ in ranked}
        rest = _plain_wti(ctx, solvers, problem, [n for n in s.times if n not in names])
        estimated = [_Estimate(n, ctx.ideal_ms(problem) / score) for n, score in rest if score > 0]
        merged = merge_by_time([_Estimate(n, ms) for n, ms in ranked], estimated)
        return [e.solver for e in merged] + [n for n, score in rest if score <= 0]

    return ranking


def _model_rank(model: Any, sample: Any) -> list[tuple[str, float]]:
    known = [n for n in sample.times if model.knows(n)]
    if not known:
        return []
    log_ms, score = model.rank_log_ms(sample.features, known)
    ranked = sorted(zip(score, known, log_ms, strict=True))
    return [(name, math.exp(t)) for _, name, t in ranked]


class _Estimate(NamedTuple):
    """What :func:`~miocore.find.ranker.merge_by_time` reads of a solution."""

    solver: str
    time_ms: float


def _plain_wti(
    ctx: Any, solvers: dict[str, Any], problem: Any, names: list[str]
) -> list[tuple[str, float]]:
    """``names`` with their plain WTI (-1 where a solver has none), highest first."""
    scored = []
    for name in names:
        try:
            score = float(solvers[name].wti(ctx, problem)) if name in solvers else -1.0
        except Exception:
            score = -1.0
        if not math.isfinite(score):
            score = -1.0
        scored.append((-score, name))
    return [(n, -neg) for neg, n in sorted(scored)]
