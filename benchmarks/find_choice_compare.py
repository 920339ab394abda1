"""How good are one find's choices, judged by another find that measured more?

Reads the FindDb files of a *reference* pass (a find that measured every candidate, such as
the default mode with cuDNN's run-time compiled engines measured) and of one or more *test*
passes (a cheaper setting over the same problems). For every key both hold, the test pass's
choice (its rank-0 record) is looked up in the reference pass's times and divided by the
reference's best: 1.0 is the same pick or a tie, 1.3 a pick 30% slower. A choice the
reference did not measure counts as missing (said, not guessed).

    python benchmarks/find_choice_compare.py --reference /tmp/fab/db-m-on --db /tmp/fab/db-m-x
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
from pathlib import Path
from typing import Any


def records(folder: Path) -> dict[str, dict[str, tuple[int, float]]]:
    """key -> solver -> (rank, recorded ms), from every ``*.db`` file in ``folder``."""
    out: dict[str, dict[str, tuple[int, float]]] = {}
    for path in sorted(folder.glob("*.db")):
        with sqlite3.connect(path) as con:
            rows = con.execute("select key, solver, rank, time_ms from find_db")
            for key, solver, rank, time_ms in rows:
                out.setdefault(key, {})[solver] = (int(rank), float(time_ms))
    return out


def compare(reference: Path, test: Path) -> dict[str, Any]:
    """The test pass's choices timed by the reference pass (see the module doc)."""
    ref, got = records(reference), records(test)
    ratios: list[tuple[float, str, str, str]] = []
    missing: list[str] = []
    for key in sorted(set(ref) & set(got)):
        choice = min(got[key], key=lambda s: got[key][s])
        best_solver = min(ref[key], key=lambda s: ref[key][s][1])
        best = ref[key][best_solver][1]
        if choice not in ref[key] or best <= 0:
            missing.append(f"{key}: {choice}")
            continue
        ratios.append((ref[key][choice][1] / best, key, choice, best_solver))
    ratios.sort(reverse=True)
    values = [r[0] for r in ratios]
    return {
        "reference": str(reference),
        "test": str(test),
        "keys": len(ratios),
        "only_in_reference": len(set(ref) - set(got)),
        "only_in_test": len(set(got) - set(ref)),
        "missing_in_reference": missing,
        "geomean": math.exp(sum(math.log(v) for v in values) / len(values)) if values else None,
        "within_5pct": sum(v <= 1.05 for v in values),
        "worst": [
            {"ratio": round(r, 3), "key": k, "choice": c, "reference_best": b}
            for r, k, c, b in ratios[:5]
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--db", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = [compare(args.reference, db) for db in args.db]
    for r in results:
        geomean = f"{r['geomean']:.3f}" if r["geomean"] is not None else "-"
        worst = r["worst"][0]["ratio"] if r["worst"] else "-"
        print(
            f"{r['test']}: {r['keys']} keys, geomean {geomean}, within 5% {r['within_5pct']}, "
            f"worst {worst}, choice not in reference {len(r['missing_in_reference'])}"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
