"""`miocore tune` with 1 worker and with N workers on the same problems: wall time, problems per
minute, speed-up, and whether the merged databases agree (issue 19's comparison).

    python benchmarks/tune_scaling.py --device cpu --workers 2 --per-direction 40 --out /tmp/scale
    python benchmarks/tune_scaling.py --device cuda --workers 4 --per-direction 150 --full-size

Agreement: the same keys, the same solvers measured per key, and each run's winner within the
noise rule of the other run's best (``miocore.solver.results.order_with_ties``: 3%, or the
smaller of the two spreads), counted; disagreements are listed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from miocore.db.finddb import FindDb
from miocore.tune import problems_from_corpus, tune


def _records(db_file: Path) -> dict[str, dict[str, tuple[float, float]]]:
    db = FindDb(db_file.stem, user_dir=db_file.parent, system_dir=db_file.parent / "none")
    try:
        return {
            r.key: {e.solver: (e.time_ms, e.spread_ms or 0.0) for e in r.entries}
            for r in db.items("user")
        }
    finally:
        db.close()


def _within_noise(mine: dict[str, Any], other: dict[str, Any], noise: float = 0.03) -> bool:
    winner = min(mine, key=lambda s: mine[s][0])
    best = min(other, key=lambda s: other[s][0])
    t_w, s_w = other[winner]
    t_b, s_b = other[best]
    return t_w - t_b <= max(noise * t_b, min(s_w, s_b))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--per-direction", type=int, default=40)
    parser.add_argument("--full-size", action="store_true")
    parser.add_argument("--out", default="/tmp/tune-scaling")
    parser.add_argument("--json", help="write the summary here")
    args = parser.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    problems = problems_from_corpus(args.per_direction, shrink=not args.full_size)
    results = {}
    for n in (1, args.workers):
        r = tune(problems, out_dir=out / f"w{n}", device=args.device, workers=n)
        results[n] = r
        print(
            f"{n} worker(s): {r.tuned} tuned, {r.failed} failed in {r.wall_s:.1f} s, "
            f"{60 * (r.tuned + r.failed) / r.wall_s:.1f} problems/min",
            flush=True,
        )
    a, b = _records(results[1].database), _records(results[args.workers].database)
    same_solvers = sum(set(a[k]) == set(b[k]) for k in a if k in b)
    agree = [k for k in a if k in b and _within_noise(a[k], b[k]) and _within_noise(b[k], a[k])]
    summary = {
        "problems": len(problems),
        "same_keys": set(a) == set(b),
        "same_solvers": same_solvers,
        "winners_within_noise": len(agree),
        "disagree": sorted(set(a) & set(b) - set(agree))[:20],
        "wall_s": {n: round(r.wall_s, 1) for n, r in results.items()},
        "speedup": round(results[1].wall_s / results[args.workers].wall_s, 2),
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
