"""Build a device's system database with ``miocore tune`` over a stratified corpus sample.

    python benchmarks/build_system_db.py --device cpu --per-direction 300 --out runs/cpu

The run folder keeps the merged database (``<device id>.db``), the shards with their logs and
``manifest.json`` (provenance); running again resumes. ``--heldout`` tasks (every problem whose
key hashes into the held-out share) are still tuned: the heuristic's training leaves them out
and ``benchmarks/find_quality.py`` measures on them.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from miocore.cli.tune import problems_from_driver_file
from miocore.problem.conv import ConvProblem
from miocore.tune import expand, problems_from_corpus, tune
from miocore.tune.sources import cap_work, unique


class _Deadline(Exception):
    """``--seconds`` ran out (raised from the progress callback; the run resumes later)."""


def _keys_of(path: str, dtype: str | None) -> list[ConvProblem]:
    """The problems of a FindDb file's keys (of ``dtype`` only, when given)."""
    from miocore.db.mathkeys import split_record_key
    from miocore.heuristic.train import DB_FILE_LAYER, open_db_file

    db = open_db_file(path)
    try:
        # each problem once, whichever math modes its records are of (a channels-last fp32
        # twin has a tf32 record alone: taking exact-mode keys only, a refresh never saw them)
        keys = list(dict.fromkeys(split_record_key(k)[0] for k in db.keys(DB_FILE_LAYER)))
        problems = [ConvProblem.from_key(k) for k in keys]
    finally:
        db.close()
    return [p for p in problems if dtype in (None, p.dtype.value)]


def _stale(
    path: str, problems: list[ConvProblem], device: str, modes: list[str]
) -> tuple[list[ConvProblem], dict[str, list[str]]]:
    """The problems of ``path`` whose records predate a solver that applies on ``device``
    (``miocore.tune.stale``), each with the math modes in which it is stale (a refresh finds
    it in those alone), and a count per solver."""
    import collections

    import miocore
    from miocore.heuristic.train import DB_FILE_LAYER, open_db_file
    from miocore.tune.stale import stale_solvers

    handle = miocore.Handle(device)
    db = open_db_file(path)
    counts: collections.Counter[str] = collections.Counter()
    out, modes_of = [], {}
    try:
        for p in problems:
            by_mode = {
                mode: stale_solvers(db, DB_FILE_LAYER, p, handle.registry, handle.context, mode)
                for mode in modes
            }
            names = {name for found in by_mode.values() for name in found}
            counts.update(names)
            if names:
                out.append(p)
                modes_of[p.key] = [mode for mode, found in by_mode.items() if found]
    finally:
        db.close()
    finds = sum(map(len, modes_of.values()))
    print(
        f"{len(out)} of {len(problems)} problems stale ({finds} finds over the math modes): "
        f"{dict(counts.most_common())}"
    )
    return out, modes_of


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--per-direction", type=int, default=300)
    parser.add_argument("--max-channels", type=int, default=8, help="per group, after shrinking")
    parser.add_argument("--max-spatial", type=int, default=None)
    parser.add_argument("--no-shrink", action="store_true", help="full-size problems (GPU)")
    parser.add_argument("--dtypes", default=None, help="e.g. float32,float16,bfloat16")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--math-modes", default="exact")
    parser.add_argument("--max-gflop", type=float, help="full size: batch cut to this work")
    parser.add_argument("--skip-db", help="a FindDb file whose problems are already tuned")
    parser.add_argument(
        "--driver-file", action="append", default=[], help="MIOpenDriver lines to tune too"
    )
    parser.add_argument(
        "--skip-driver-file",
        action="append",
        default=[],
        help="MIOpenDriver lines kept out (the untuned layers find_quality.py measures on)",
    )
    parser.add_argument(
        "--keys-of",
        help="tune the problems of this FindDb file instead of a corpus sample (e.g. the "
        "shipped database's fp32 keys again with --math-modes tf32)",
    )
    parser.add_argument("--keys-dtype", help="with --keys-of: only problems of this data type")
    parser.add_argument(
        "--stale-only",
        action="store_true",
        help="with --keys-of: only problems whose record lacks an entry of an enabled solver "
        "that applies on --device, or holds one of an older revision (a refresh: merge the "
        "run's database into the file by solver)",
    )
    parser.add_argument(
        "--groups-of-one",
        action="store_true",
        help="only problems of one group (solvers that take no grouped layers, tuned alone)",
    )
    parser.add_argument(
        "--layouts",
        help="every problem in each of these layouts (NCHW,NHWC; e.g. the shipped database's "
        "keys channels-last, with --skip-db the same file for those it holds already)",
    )
    parser.add_argument(
        "--fp32-modes",
        help="the math modes of fp32 problems alone (e.g. tf32: PyTorch's default for fp32 "
        "convolutions), out of --math-modes; other types are found once in the exact mode",
    )
    parser.add_argument("--seconds", type=float, help="stop after this long (the run resumes)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    modes_of = None  # every problem in every math mode, unless a refresh narrows it
    if args.keys_of:
        problems = _keys_of(args.keys_of, args.keys_dtype)
        if args.stale_only:
            problems, modes_of = _stale(
                args.keys_of, problems, args.device, args.math_modes.split(",")
            )
    else:
        problems = problems_from_corpus(
            args.per_direction,
            shrink=not args.no_shrink,
            max_channels_per_group=args.max_channels,
            max_spatial=args.max_spatial,
            max_gflop=args.max_gflop,
        )
    if args.groups_of_one:
        problems = [p for p in problems if p.conv.groups == 1]
    if args.dtypes:
        problems = expand(problems, dtypes=args.dtypes.split(","))
    if args.layouts:
        problems = expand(problems, layouts=args.layouts.split(","))

    def driver_problems(files: list[str]) -> list[ConvProblem]:
        out = [p for f in files for p in problems_from_driver_file(f)]
        return [cap_work(p, args.max_gflop) if args.max_gflop else p for p in out]

    problems = unique([*problems, *driver_problems(args.driver_file)])
    kept_out = {p.key for p in driver_problems(args.skip_driver_file)}
    problems = [p for p in problems if p.key not in kept_out]
    if args.skip_db:
        # a problem with a record in any math mode is done (the channels-last fp32 twins have
        # a tf32 record alone, and were found again by every nhwcdb run)
        done = {p.key for p in _keys_of(args.skip_db, None)}
        print(f"{len(done)} problems of {args.skip_db} skipped where asked for")
        problems = [p for p in problems if p.key not in done]
    if args.fp32_modes:
        fp32 = args.fp32_modes.split(",")
        modes_of = {
            p.key: (modes_of or {}).get(p.key, fp32 if p.dtype == "float32" else ["exact"])
            for p in problems
        }
    # Shuffled: a run stopped by --seconds has tuned a fair sample of every stratum.
    random.Random(0).shuffle(problems)
    print(f"{len(problems)} problems", flush=True)
    deadline = None if args.seconds is None else time.monotonic() + args.seconds

    def progress(p: object) -> None:
        print(p.line(), flush=True)  # type: ignore[attr-defined]
        if deadline is not None and time.monotonic() > deadline:
            raise _Deadline(f"stopped after {args.seconds} s; run again to resume")

    try:
        result = tune(
            problems,
            out_dir=args.out,
            device=args.device,
            workers=args.workers,
            time_limit_s=args.time_limit,
            math_modes=args.math_modes.split(","),
            merge_every=25,
            progress=progress,
            modes_of=modes_of,
        )
    except _Deadline as exc:
        print(exc, f"(merged into {Path(args.out)})", flush=True)
        return 0
    print(result, flush=True)
    print(f"throughput: {result.per_minute_per_worker:.1f} problems/min/worker", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
