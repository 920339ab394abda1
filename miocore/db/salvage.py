"""Rows saved from a corrupt user file after it was set aside.

A file damaged at one place (truncated mid-page, a bad sector) still holds readable pages.
After the file is renamed aside, every table of ours is read from a copy of it (padded to whole
pages, its write-ahead log replayed) forward and backward until the damage stops each scan, and
what was read is copied into the new file, never over a row the new file already has. What
cannot be read stays in the set-aside file for forensics.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

#: Tables in copy order (imported text refers to its import's provenance row), with their
#: primary keys: each is scanned forward and then backward, so rows on both sides of a
#: damaged page are saved.
TABLES = {
    "imports": "id",
    "find_db_text": "key",
    "find_db": "key, solver",
    "perf_db": "key, solver",
    "key_usage": "key",
}


def _readable_copy(aside: Path) -> Path:
    """A copy of ``aside`` (and its WAL) padded to whole pages: SQLite refuses a file cut
    mid-page outright, but reads a padded one up to the damage."""
    copy = aside.with_name(aside.name + ".salvage")
    shutil.copyfile(aside, copy)
    wal = aside.with_name(aside.name + "-wal")
    if wal.exists():
        shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
    with open(copy, "r+b") as fh:
        header = fh.read(32)
        page = int.from_bytes(header[16:18], "big") if len(header) == 32 else 4096
        page = 65536 if page == 1 else max(page, 512)
        pages = int.from_bytes(header[28:32], "big") if len(header) == 32 else 0
        size = fh.seek(0, 2)
        # Whole pages, and as many as the header says the file had (zeros where it lost them).
        wanted = max(-(-size // page) * page, min(pages, 1 << 22) * page)
        if wanted > size:
            fh.truncate(wanted)
    return copy


def _scan(src: sqlite3.Connection, table: str, order: str) -> list[tuple[object, ...]]:
    rows: dict[tuple[object, ...], None] = {}
    for direction in ("ASC", "DESC"):
        keys = ", ".join(f"{column.strip()} {direction}" for column in order.split(","))
        with contextlib.suppress(sqlite3.Error):  # damage or a missing table ends the scan
            for row in src.execute(f"SELECT * FROM {table} ORDER BY {keys}"):
                rows[tuple(row)] = None
    return list(rows)


def salvage(
    aside: Path,
    conn: sqlite3.Connection,
    write: Callable[[Callable[[sqlite3.Connection], None]], None],
) -> int:
    """Copy the readable rows of ``aside`` into ``conn``'s file via ``write`` (one transaction
    per table); returns how many rows were copied. Never raises on a damaged source."""
    try:
        copy = _readable_copy(aside)
    except OSError:
        return 0
    # Read-only; with the WAL replayed when there is one (that needs a -shm index), else
    # immutable (no side files at all).
    has_wal = copy.with_name(copy.name + "-wal").exists()
    mode = "mode=ro" if has_wal else "mode=ro&immutable=1"
    saved = 0
    src: sqlite3.Connection | None = None
    try:
        src = sqlite3.connect(
            f"file:{quote(str(copy.resolve()))}?{mode}", uri=True, isolation_level=None
        )
        for table, order in TABLES.items():
            rows = _scan(src, table, order)
            if not rows:
                continue
            marks = ", ".join("?" * len(rows[0]))

            def copy_rows(
                c: sqlite3.Connection,
                table: str = table,
                marks: str = marks,
                rows: list[tuple[object, ...]] = rows,
            ) -> None:
                c.executemany(f"INSERT OR IGNORE INTO {table} VALUES ({marks})", rows)

            try:
                write(copy_rows)
            except sqlite3.Error:
                continue  # a table whose layout changed: leave its rows in the aside file
            saved += len(rows)
    except sqlite3.Error:
        pass  # not even openable: nothing to save
    finally:
        if src is not None:
            src.close()
        for suffix in ("", "-wal", "-shm"):
            copy.with_name(copy.name + suffix).unlink(missing_ok=True)
    return saved
