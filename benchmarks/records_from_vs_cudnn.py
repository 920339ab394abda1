"""FindDb records from ``gpu_vs_cudnn.py`` runs: every candidate's time of each layer's find.

``gpu_vs_cudnn.py`` runs a NORMAL find per layer and keeps every candidate solver's time
(``candidates``); this writes them as FindDb records of the run's device (one per layer and
math mode, every timed solver an entry, provenance naming the file), ready to merge into a
system database (``merge_db.py``) and train on. ``--suites`` keeps some suites only, so that
the others stay unseen for ``immediate_offline.py``.

    python benchmarks/records_from_vs_cudnn.py --out /tmp/vs \
        benchmarks/results/gpu_h200x4_vs_cudnn_grid_session32.json
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path
from typing import Any

from immediate_offline import layer_rows

import miocore
from miocore.db import FindDb, FindDbEntry
from miocore.db.mathkeys import record_key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="gpu_vs_cudnn.py --out files")
    parser.add_argument("--out", type=Path, required=True, help="folder of <device>.db")
    parser.add_argument("--device", default="sm90_132")
    parser.add_argument("--suites", nargs="+", default=None, help="only these suites")
    args = parser.parse_args()
    algorithms = {r.name: r.algorithm for r in miocore.Handle("cpu").registry.solvers}
    records: dict[str, dict[str, FindDbEntry]] = collections.defaultdict(dict)
    for row in layer_rows(args.files):
        if args.suites and row["suite"] not in args.suites:
            continue
        mode = "tf32" if row["precision"] in ("tf32", "tfloat32") else "exact"
        key = record_key(miocore.ConvProblem.from_key(row["key"]), mode)
        provenance: dict[str, Any] = {
            "device": args.device,
            "find_mode": "NORMAL",
            "source": "gpu_vs_cudnn",
            "suite": row["suite"],
        }
        for solver, ms in row["candidates"].items():
            if solver not in algorithms:
                continue
            old = records[key].get(solver)
            if old is None or ms < old.time_ms:  # FindDb's merge rule: the faster time
                records[key][solver] = FindDbEntry(
                    solver=solver,
                    algorithm=algorithms[solver],
                    time_ms=ms,
                    workspace_size=0,
                    provenance=provenance,
                )
    args.out.mkdir(parents=True, exist_ok=True)
    db = FindDb(args.device, user_dir=args.out)
    for key, entries in records.items():
        db.write(key, sorted(entries.values(), key=lambda e: e.time_ms))
    db.close()
    print(f"{len(records)} records into {args.out / (args.device + '.db')}")


if __name__ == "__main__":
    main()
