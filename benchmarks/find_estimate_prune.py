"""DYNAMIC_HYBRID's first find with and without its estimate prune, against NORMAL find.

For held-out problems of a device's tuned database (the hash split the shipped model was
trained without, :func:`miocore.heuristic.train.is_held_out`), each found three times on an
empty user database: DYNAMIC_HYBRID as shipped (``MIOCORE_FIND_ESTIMATE_PRUNE`` 4),
DYNAMIC_HYBRID with the prune off (0), and NORMAL (every candidate; no WTI pruning). Reported:
the wall time of each find (the device's shipped model and WTI table in the system folder,
not its database), how many candidates each measured, and each default choice's time
in NORMAL's measurements over NORMAL's best (1.0: as good a choice; the issue's target keeps
it within 1.05). Runs alternate so that a drifting machine touches all three alike.

    python benchmarks/find_estimate_prune.py --db miocore/data/db/cpu_x86_64_2.db --limit 60
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import geomean, machine

SETTINGS = {"prune 4": ("DYNAMIC_HYBRID", "4"), "prune off": ("DYNAMIC_HYBRID", "0"),
            "NORMAL": ("NORMAL", "0")}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a tuned FindDb file (its held-out keys)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument(
        "--model-dir", type=Path, default=Path(__file__).parent.parent / "miocore" / "data" / "db"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import miocore
    from miocore.db.mathkeys import split_record_key
    from miocore.heuristic.plugin import MODEL_SUFFIX, WTI_SUFFIX
    from miocore.heuristic.train import DB_FILE_LAYER, is_held_out, open_db_file

    db = open_db_file(args.db)
    keys = [split_record_key(k) for k in db.keys(DB_FILE_LAYER)]
    db.close()
    held = [(b, m) for b, m in keys if m == "exact" and is_held_out(b, 0.2)][: args.limit]
    rows: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="find-prune-"))
    # the system folder: the device's model and WTI table, not its database (a hit measures
    # nothing)
    system = tmp / "system"
    system.mkdir()
    device_id = miocore.Handle(args.device).device.identity
    for suffix in (MODEL_SUFFIX, WTI_SUFFIX):
        src = args.model_dir / f"{device_id}{suffix}"
        if src.is_file():
            (system / src.name).write_bytes(src.read_bytes())
    os.environ["MIOCORE_SYSTEM_DB_PATH"] = str(system)  # the heuristic plug-in reads it
    for i, (base, mode) in enumerate(held):
        problem = miocore.ConvProblem.from_key(base)
        row: dict[str, Any] = {"key": base}
        for label, (find_mode, factor) in SETTINGS.items():
            os.environ["MIOCORE_FIND_ESTIMATE_PRUNE"] = factor
            os.environ["MIOCORE_FIND_PRUNE_FACTOR"] = "20" if find_mode != "NORMAL" else "0"
            handle = miocore.Handle(
                args.device,
                user_db_path=tmp / f"{i}-{label}",
                system_db_path=system,
                math_mode=mode,
            )
            start = time.perf_counter()
            found = handle.find_solutions(problem, find_mode=find_mode)
            row[label] = {
                "ms": (time.perf_counter() - start) * 1e3,
                "choice": found[0].solver,
                "measured": len(found.report.benchmarked),
            }
        normal = {s.solver: s.time_ms for s in found if not s.is_estimate}
        best = min(normal.values())
        for label in ("prune 4", "prune off"):
            choice = row[label]["choice"]
            row[label]["vs_normal"] = normal.get(choice, float("nan")) / best
        rows.append(row)
        print(
            f"{i + 1}/{len(held)} {base}: "
            + "; ".join(
                f"{k} {row[k]['ms']:.0f} ms, {row[k]['measured']} measured" for k in SETTINGS
            ),
            file=sys.stderr,
        )
    summary: dict[str, Any] = {"machine": machine(), "device": args.device, "problems": len(rows)}
    for label in SETTINGS:
        ms = [r[label]["ms"] for r in rows]
        entry = {
            "find_ms_median": statistics.median(ms),
            "find_ms_mean": statistics.fmean(ms),
            "measured_mean": statistics.fmean(r[label]["measured"] for r in rows),
        }
        if label != "NORMAL":
            ratios = [
                r[label]["vs_normal"]
                for r in rows
                if r[label]["vs_normal"] == r[label]["vs_normal"]
            ]
            entry["choice_vs_normal_geomean"] = geomean(ratios)
            entry["within_5pct"] = sum(x <= 1.05 for x in ratios) / len(ratios)
            entry["worst"] = max(ratios)
        summary[label] = entry
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
