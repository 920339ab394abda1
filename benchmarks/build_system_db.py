"""Build a device's system database with ``miocore tune`` over a stratified corpus sample.

    python benchmarks/build_system_db.py --device cpu --per-direction 300 --out runs/cpu

The run folder keeps the merged database (``<device id>.db``), the shards with their logs and
``manifest.json`` (provenance); running again resumes. ``--heldout`` tasks (every problem whose
key hashes into the held-out share) are still tuned: the heuristic's training leaves them out
and ``benchmarks/find_quality.py`` measures on them.
"""

from __future__ import annotations

import argparse
import sys

from miocore.tune import expand, problems_from_corpus, tune


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
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    problems = problems_from_corpus(
        args.per_direction,
        shrink=not args.no_shrink,
        max_channels_per_group=args.max_channels,
        max_spatial=args.max_spatial,
    )
    if args.dtypes:
        problems = expand(problems, dtypes=args.dtypes.split(","))
    print(f"{len(problems)} problems", flush=True)
    result = tune(
        problems,
        out_dir=args.out,
        device=args.device,
        workers=args.workers,
        time_limit_s=args.time_limit,
        math_modes=args.math_modes.split(","),
        merge_every=25,
        progress=lambda p: print(p.line(), flush=True),
    )
    print(result, flush=True)
    print(f"throughput: {result.per_minute_per_worker:.1f} problems/min/worker", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
