"""``miocore tune``: fill a FindDb for many problems on Dask workers (``miocore[tune]``).

Problems come from the corpus sample (``--corpus N``, per direction), MIOpenDriver command
files (``--driver-file``, one ``MIOpenDriver conv ...`` line each, as in MIOpen's
``perf_models``), a MIOpen text FindDb's keys (``--finddb``), or any mix; ``--dtypes``,
``--directions`` and ``--layouts`` multiply them. The run folder (``--out``) holds the merged
database, one shard per worker and the logs; the same command again resumes. See
docs/tuning.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from miocore.errors import InvalidArgumentError, MiocoreError
from miocore.problem.conv import ConvProblem


def problems_from_driver_file(path: Path | str) -> list[ConvProblem]:
    """The problems of a file of MIOpenDriver command lines (MIOpen's ``perf_models``), each
    line read by ``miocore conv``'s own line parser (``conv``, ``convfp16``, ``convbfp16``;
    ``-F`` picks directions). Blank and ``#`` lines are skipped; a bad line is an error
    naming the file and line."""
    from miocore.cli.driver_flags import problems_from_line
    from miocore.tune.sources import unique

    source = Path(path)
    if not source.is_file():
        raise InvalidArgumentError("no such file", field="driver_file", value=str(source))
    out: list[ConvProblem] = []
    for number, text in enumerate(source.read_text().splitlines(), start=1):
        if not text.split("#", 1)[0].strip():
            continue
        try:
            out.extend(problems_from_line(text))
        except MiocoreError as exc:
            raise InvalidArgumentError(
                f"{exc}", field=f"{source.name}:{number}", value=text
            ) from exc
    return unique(out)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``tune`` subcommand."""
    p = subparsers.add_parser(
        "tune",
        help="fill a FindDb for many problems on Dask workers (resumable)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    src = p.add_argument_group("problems")
    src.add_argument("--corpus", type=int, metavar="N", help="N corpus problems per direction")
    src.add_argument(
        "--full-size", action="store_true", help="corpus problems at full size (default: shrunk)"
    )
    src.add_argument(
        "--max-gflop",
        type=float,
        help="with --full-size: cut the batch of heavier problems down to this much work",
    )
    src.add_argument("--driver-file", action="append", default=[], help="MIOpenDriver lines")
    src.add_argument("--finddb", action="append", default=[], help="a MIOpen text FindDb")
    src.add_argument("--dtypes", help="comma list: float32,float16,bfloat16")
    src.add_argument("--directions", help="comma list: forward,backward_data,backward_weights")
    src.add_argument(
        "--layouts", help="comma list: NCHW,NHWC (channels first or last; 3-D: NCDHW, NDHWC)"
    )
    p.add_argument("--out", required=True, help="the run folder (resumes when it exists)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, hip (default: cpu)")
    p.add_argument("--workers", type=int, help="default: one per GPU, or per CPU socket")
    p.add_argument("--scheduler", help="address of an existing Dask scheduler")
    p.add_argument("--exhaustive", action="store_true", help="tune tunable solvers' configs")
    p.add_argument("--math-modes", default="exact", help="comma list: exact,tf32")
    p.add_argument("--merge-every", type=int, default=50, help="merge shards every N problems")
    p.add_argument("--time-limit", type=float, help="seconds per problem (between solvers)")
    p.set_defaults(handler=run)
    return p


def run(args: argparse.Namespace, registry: Any = None) -> int:
    """Run ``miocore tune``; exit status 0 when every problem was tuned, 1 when some failed."""
    from miocore.tune import (
        expand,
        problems_from_corpus,
        problems_from_finddb_text,
        tune,
        unique,
    )

    problems: list[ConvProblem] = []
    if args.corpus:
        problems += problems_from_corpus(
            args.corpus, shrink=not args.full_size, max_gflop=args.max_gflop
        )
    for f in args.driver_file:
        problems += problems_from_driver_file(f)
    for f in args.finddb:
        problems += problems_from_finddb_text(f)
    if not problems:
        raise InvalidArgumentError(
            "no problems: give --corpus, --driver-file or --finddb", field="problems", value=0
        )
    problems = expand(
        unique(problems),
        dtypes=args.dtypes.split(",") if args.dtypes else None,
        directions=args.directions.split(",") if args.directions else None,
        layouts=args.layouts.split(",") if args.layouts else None,
    )
    print(f"tune: {len(problems)} problems into {args.out}", file=sys.stderr)
    result = tune(
        problems,
        out_dir=args.out,
        device=args.device,
        workers=args.workers,
        scheduler=args.scheduler,
        exhaustive=args.exhaustive,
        math_modes=args.math_modes.split(","),
        merge_every=args.merge_every,
        time_limit_s=args.time_limit,
        progress=lambda p: print(p.line(), file=sys.stderr, flush=True),
    )
    print(
        f"tuned {result.tuned}, failed {result.failed}, resumed {result.skipped} with "
        f"{result.workers} workers in {result.wall_s:.1f} s "
        f"({result.per_minute_per_worker:.1f} problems/min/worker); database {result.database}"
    )
    for line in result.failures[:20]:
        print(f"  failed {line['key']}: {line.get('error', '')}")
    return 1 if result.failed else 0
