"""The user database's size cap: least-recently-used records are evicted past it.

``MIOCORE_USER_DB_MAX_MB`` caps the bytes the user file holds in live pages. Every write
records when its key was last used (``key_usage``); FindDb hits are noted in memory and written
with the next write, so a lookup never costs a write. When a write leaves the file over the
cap, whole keys are evicted, least recently used first (imported keys never used since count
as oldest): their FindDb record, imported text and PerfDb entries together, down to 90 % of the
cap; freed pages go back to the file system (``auto_vacuum = INCREMENTAL``, files made by this
version). Evictions are counted in the ``meta`` table and shown by ``miocore db show``.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Iterable

from miocore import env
from miocore.errors import InvalidEnvironmentError

MAX_MB_ENV = "MIOCORE_USER_DB_MAX_MB"
#: Eviction stops at this fraction of the cap, so the next writes do not evict again at once.
LOW_WATER = 0.9


def max_bytes() -> int | None:
    """The cap in bytes from ``$MIOCORE_USER_DB_MAX_MB`` (a number > 0), None when unset."""
    text = env.get(MAX_MB_ENV).strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise InvalidEnvironmentError(
            "must be a size in MiB > 0 (e.g. 256)", field=MAX_MB_ENV, value=text
        )
    return int(value * 1024 * 1024)


def touch(conn: sqlite3.Connection, keys: Iterable[str], when: float | None = None) -> None:
    """Record that ``keys`` were used now (inside the caller's transaction)."""
    stamp = time.time() if when is None else when
    conn.executemany(
        "INSERT INTO key_usage (key, used_at) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET used_at = excluded.used_at",
        ((k, stamp) for k in keys),
    )


def live_bytes(conn: sqlite3.Connection) -> int:
    """Bytes in the file's pages that hold data (free pages not counted)."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def evicted_keys(conn: sqlite3.Connection) -> int:
    """How many keys the cap has evicted from this file so far."""
    row = conn.execute("SELECT value FROM meta WHERE name = 'evicted_keys'").fetchone()
    return int(row[0]) if row else 0


def enforce(conn: sqlite3.Connection, cap: int | None) -> int:
    """Evict least-recently-used keys until the file is under ``cap``; how many were evicted."""
    if cap is None:
        return 0
    used = live_bytes(conn)
    if used <= cap:
        return 0
    evicted = 0
    for _round in range(8):  # each round estimates the bytes per key again
        keys = conn.execute(
            "SELECT count(*) FROM (SELECT key FROM find_db UNION SELECT key FROM find_db_text)"
        ).fetchone()[0]
        if used <= cap * LOW_WATER or keys == 0:
            break
        per_key = used / keys
        count = max(1, math.ceil((used - cap * LOW_WATER) / per_key))
        victims = [
            r[0]
            for r in conn.execute(
                "SELECT k.key FROM (SELECT key FROM find_db UNION SELECT key FROM find_db_text) k "
                "LEFT JOIN key_usage u ON u.key = k.key ORDER BY coalesce(u.used_at, 0), k.key "
                "LIMIT ?",
                (count,),
            )
        ]
        for table in ("find_db", "find_db_text", "perf_db", "key_usage"):
            conn.executemany(f"DELETE FROM {table} WHERE key = ?", ((k,) for k in victims))
        evicted += len(victims)
        used = live_bytes(conn)
    conn.execute(
        "INSERT INTO meta (name, value) VALUES ('evicted_keys', ?) "
        "ON CONFLICT (name) DO UPDATE SET value = CAST(value AS INTEGER) + excluded.value",
        (evicted,),
    )
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
        conn.execute("PRAGMA incremental_vacuum")
    return evicted


def usage(conn: sqlite3.Connection) -> dict[str, int | None]:
    """The user file's keys (measured, imported), live bytes, evictions so far and the cap."""

    def count(sql: str) -> int:
        try:
            return int(conn.execute(sql).fetchone()[0])
        except sqlite3.OperationalError:  # a file made before the table existed
            return 0

    try:
        evicted = evicted_keys(conn)
    except sqlite3.OperationalError:
        evicted = 0
    return {
        "measured_keys": count("SELECT count(DISTINCT key) FROM find_db"),
        "imported_keys": count("SELECT count(*) FROM find_db_text"),
        "live_bytes": live_bytes(conn),
        "evicted_keys": evicted,
        "max_bytes": max_bytes(),
    }
