"""Re-tune one family of a tuned database's problems with the current solvers, in place of
their old records.

    python benchmarks/retune_families.py --base miocore/data/db/cpu_x86_64_2.db \\
        --families depthwise,grouped --passes 2 --time-limit 60 --out runs/dwg

For every key of ``--base`` in the families asked (``depthwise``: groups > 1 and groups equal
to the input channels; ``grouped``: other groups > 1; ``3-D``; ``dense 2-D``), ``miocore.tune``
runs NORMAL find ``--passes`` times, each pass in its own run folder ``<out>/pass<i>`` (so a
pass resumes like any tune run). The passes are merged by FindDb's merge rule (the faster
time wins; one stalled measurement in one pass does not stick), and ``<out>/<device>.db`` is
a copy of ``--base`` with those keys' records replaced by the merged ones and every other key
unchanged, VACUUMed, with a rollback journal (the shipped form). Train on it with
``miocore heuristic train`` as usual.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
from pathlib import Path

from miocore.db.finddb import FindDb
from miocore.db.mathkeys import TF32_SUFFIX
from miocore.db.packed import readable_db_file
from miocore.problem.conv import ConvProblem
from miocore.tune import tune

FAMILIES = ("dense 2-D", "3-D", "grouped", "depthwise")


def family(problem: ConvProblem) -> str:
    """The family a problem is counted in (``docs/performance.md``, issue 14's table)."""
    groups = problem.conv.groups
    if groups > 1 and groups == problem.x.lengths[1]:
        return "depthwise"
    if groups > 1:
        return "grouped"
    return "3-D" if len(problem.x.lengths) == 5 else "dense 2-D"


def db_keys(path: Path) -> list[str]:
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
        keys = {row[0] for row in conn.execute("SELECT key FROM find_db")}
    # MIOpen keys only (records of the tf32 math mode, "<key>_tf32", are not re-tuned here)
    return sorted(k for k in keys if not k.endswith(TF32_SUFFIX))


def replace_records(base: Path, tuned: Path, out: Path) -> tuple[int, int, int]:
    """``out``: ``base`` with every key of ``tuned`` replaced by ``tuned``'s records."""
    out.unlink(missing_ok=True)
    shutil.copyfile(base, out)
    columns = "key, solver, rank, algorithm, time_ms, workspace_size, spread_ms, count, "
    columns += "perf_config, provenance"
    with sqlite3.connect(f"file:{tuned}?mode=ro", uri=True) as src:
        rows = src.execute(f"SELECT {columns} FROM find_db").fetchall()
        perf = src.execute("SELECT key, solver, perf_config, provenance FROM perf_db").fetchall()
    keys = sorted({row[0] for row in rows})
    conn = sqlite3.connect(out)
    try:
        before = conn.execute("SELECT count(*) FROM find_db").fetchone()[0]
        conn.executemany("DELETE FROM find_db WHERE key = ?", [(k,) for k in keys])
        conn.executemany("DELETE FROM perf_db WHERE key = ?", [(k,) for k in keys])
        conn.executemany(f"INSERT INTO find_db ({columns}) VALUES ({', '.join('?' * 10)})", rows)
        conn.executemany("INSERT INTO perf_db VALUES (?, ?, ?, ?)", perf)
        conn.commit()
        after = conn.execute("SELECT count(*) FROM find_db").fetchone()[0]
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return len(keys), before, after


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the tuned database (not modified)")
    parser.add_argument("--families", default="depthwise,grouped", help=", ".join(FAMILIES))
    parser.add_argument(
        "--directions",
        default="forward,backward_data,backward_weights",
        help="the directions re-tuned (comma-separated)",
    )
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="tune workers (GPU: 4 pay)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per problem")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    wanted = set(args.families.split(","))
    if not wanted <= set(FAMILIES):
        parser.error(f"--families: one of {', '.join(FAMILIES)}")
    # a packed base (<device>.db.xz, as shipped) is read from its expansion in the cache
    base, out = readable_db_file(Path(args.base)), Path(args.out)
    problems = [ConvProblem.from_key(k) for k in db_keys(base)]
    directions = set(args.directions.split(","))
    problems = [p for p in problems if family(p) in wanted and str(p.direction) in directions]
    print(
        f"{len(problems)} problems of {base} ({', '.join(sorted(wanted))}; "
        f"{', '.join(sorted(directions))})",
        flush=True,
    )
    device_id = None
    for i in range(args.passes):
        result = tune(
            problems,
            out_dir=out / f"pass{i}",
            device=args.device,
            workers=args.workers,
            time_limit_s=args.time_limit,
            merge_every=25,
            progress=lambda p: print(p.line(), flush=True) if p.done % 100 == 0 else None,
        )
        print(result, flush=True)
        print(f"throughput: {result.per_minute_per_worker:.1f} problems/min/worker", flush=True)
        device_id = result.database.stem
    assert device_id is not None
    merged_dir = out / "merged"
    merged_dir.mkdir(parents=True, exist_ok=True)
    merged = FindDb(device_id, user_dir=merged_dir, system_dir=merged_dir / "no-system-layer")
    try:
        for i in range(args.passes):
            print(merged.merge_from(out / f"pass{i}" / f"{device_id}.db"), flush=True)
    finally:
        merged.close()
    keys, before, after = replace_records(
        base, merged_dir / f"{device_id}.db", out / f"{device_id}.db"
    )
    print(f"{out / f'{device_id}.db'}: {keys} keys replaced, find_db rows {before} -> {after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
