"""Merge FindDb files into one database file in place (FindDb's merge rule: per key, the
union of entries by solver, the faster time where both have one).

    python benchmarks/merge_db.py --into runs/sm90/sm90_132.db runs/triton/sm90_132.db

Used to add one plugin's records, tuned alone, to a shipped system database: the other
solvers' entries stay as they were measured. ``--existing-keys-only`` leaves out the sources'
records of keys the target lacks (a record holding one plugin's times alone would teach a
model that it always wins). The file keeps SQLite's rollback journal (a shipped database must
not be left in write-ahead mode).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

from miocore.db.finddb import FindDb
from miocore.db.packed import packed_twin, readable_db_file


def merge_into(target: Path, sources: list[Path], existing_keys_only: bool = False) -> list[str]:
    """Merge ``sources`` into the database file ``target``; one summary line per source."""
    lines = []
    db = FindDb(target.stem, user_dir=target.parent, system_dir=target.parent / "no-system-layer")
    try:
        keys = set(db.keys(layer="user")) if existing_keys_only else None
        with tempfile.TemporaryDirectory() as tmp:
            for i, src in enumerate(sources):
                merged = src
                if keys is not None:
                    merged, dropped = _without_new_keys(src, keys, Path(tmp) / str(i))
                    lines.append(f"{src}: {dropped} records of keys the target lacks left out")
                lines.append(f"{src}: {db.merge_from(merged)}")
    finally:
        db.close()
    conn = sqlite3.connect(target)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()
    return lines


def _without_new_keys(src: Path, keys: set[str], tmp: Path) -> tuple[Path, int]:
    """A copy of the database file ``src`` without the records of keys not in ``keys``, and
    how many were left out."""
    copy = tmp / src.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, copy)
    db = FindDb(copy.stem, user_dir=copy.parent, system_dir=copy.parent / "no-system-layer")
    try:
        dropped = [k for k in db.keys(layer="user") if k not in keys]
        for key in dropped:
            db.delete(key)
    finally:
        db.close()
    return copy, len(dropped)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", required=True, help="the database file to merge into")
    parser.add_argument("sources", nargs="+", help="database files merged in, in order")
    parser.add_argument(
        "--existing-keys-only",
        action="store_true",
        help="merge only records of keys the target already holds",
    )
    args = parser.parse_args()
    into = Path(args.into)
    if not into.exists() and packed_twin(into).is_file():
        parser.error(
            f"--into {into}: only its packed twin exists; merge into a plain copy "
            "(miocore.db.packed.readable_db_file), then `miocore db pack` it"
        )
    # a packed source (<device>.db.xz) is read from its expansion in the cache
    sources = [readable_db_file(Path(s)) for s in args.sources]
    for line in merge_into(into, sources, args.existing_keys_only):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
