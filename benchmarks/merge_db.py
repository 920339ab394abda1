"""Merge FindDb files into one database file in place (FindDb's merge rule: per key, the
union of entries by solver, the faster time where both have one).

    python benchmarks/merge_db.py --into runs/sm90/sm90_132.db runs/triton/sm90_132.db

Used to add one plugin's records, tuned alone, to a shipped system database: the other
solvers' entries stay as they were measured. The file keeps SQLite's rollback journal (a
shipped database must not be left in write-ahead mode).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from miocore.db.finddb import FindDb


def merge_into(target: Path, sources: list[Path]) -> list[str]:
    """Merge ``sources`` into the database file ``target``; one summary line per source."""
    lines = []
    db = FindDb(target.stem, user_dir=target.parent, system_dir=target.parent / "no-system-layer")
    try:
        for src in sources:
            lines.append(f"{src}: {db.merge_from(src)}")
    finally:
        db.close()
    conn = sqlite3.connect(target)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", required=True, help="the database file to merge into")
    parser.add_argument("sources", nargs="+", help="database files merged in, in order")
    args = parser.parse_args()
    for line in merge_into(Path(args.into), [Path(s) for s in args.sources]):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
