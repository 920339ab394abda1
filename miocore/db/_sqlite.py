"""The SQLite plumbing under :class:`~miocore.db._store.Store`, free of any one file's state.

The schema (:data:`SCHEMA_SQL`, :data:`SCHEMA_VERSION`) and its creation and version check,
the lock-wait settings and :func:`retry_busy`, the classification of SQLite errors (busy or
corruption), the advisory lock that serialises setting a corrupt file aside, URI and file
identity helpers, UTC time stamps, :class:`DatabaseWarning`, and :func:`open_readonly` for
another database file (a merge source).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from miocore import env
from miocore.errors import DatabaseError

log = logging.getLogger("miocore.db")

T = TypeVar("T")

#: Version of the table layout, kept in ``PRAGMA user_version``. Bump it (and teach
#: :func:`create_schema` to upgrade) whenever the tables change.
SCHEMA_VERSION = 2

#: The longest a call waits for another process's lock, in seconds (SQLite's busy wait plus
#: our retries), unless ``MIOCORE_DB_LOCK_TIMEOUT_S`` says otherwise. Past it the user layer
#: degrades to memory (see :mod:`miocore.db.storage`) instead of blocking the convolution.
BUSY_TIMEOUT_S = 30.0
LOCK_TIMEOUT_ENV = "MIOCORE_DB_LOCK_TIMEOUT_S"
#: Our retries on top of SQLite's busy wait (for the busy cases its handler does not cover:
#: WAL recovery, snapshot upgrades, a COMMIT racing a checkpoint).
MAX_ATTEMPTS = 10
#: User databases up to this size get a ``PRAGMA quick_check`` when first opened; larger ones,
#: and the read-only system layer, rely on the errors that reading them raises (quick_check
#: reads the whole file).
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS find_db (
    key TEXT NOT NULL,
    solver TEXT NOT NULL,
    rank INTEGER NOT NULL,
    algorithm TEXT NOT NULL,
    time_ms REAL NOT NULL CHECK (time_ms >= 0),
    workspace_size INTEGER NOT NULL CHECK (workspace_size >= 0),
    spread_ms REAL CHECK (spread_ms IS NULL OR spread_ms >= 0),
    count INTEGER NOT NULL CHECK (count >= 0),
    perf_config TEXT,
    provenance TEXT NOT NULL,
    PRIMARY KEY (key, solver)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS find_db_solver ON find_db (solver);
CREATE TABLE IF NOT EXISTS perf_db (
    key TEXT NOT NULL,
    solver TEXT NOT NULL,
    perf_config TEXT NOT NULL,
    provenance TEXT NOT NULL,
    PRIMARY KEY (key, solver)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS perf_db_solver ON perf_db (solver);
CREATE TABLE IF NOT EXISTS find_db_text (
    key TEXT NOT NULL PRIMARY KEY,
    body TEXT NOT NULL,
    import_id INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS imports (
    id INTEGER PRIMARY KEY,
    provenance TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS key_usage (
    key TEXT NOT NULL PRIMARY KEY,
    used_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    name TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""
# Version 2 added find_db_text (imported records kept as MIOpen's text: compact, exported
# byte for byte), imports (their provenance, once per import), key_usage (last use of each key,
# for the size cap's least-recently-used eviction) and meta (counters such as evictions).


class DatabaseWarning(UserWarning):
    """A database file was corrupt and set aside (user layer) or ignored (system layer)."""


class Corrupt(Exception):
    """Internal: the file is not a sound database of ours; carries the reason."""


def _error_name(exc: BaseException) -> str:
    return getattr(exc, "sqlite_errorname", "") or ""


def is_busy(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" / "busy" errors (worth retrying)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    name = _error_name(exc)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_corruption(exc: BaseException) -> bool:
    """True for errors that mean the file's content is damaged (not locks, not I/O, not ours).

    Disk-full, permission and I/O errors are deliberately excluded: setting the file aside
    would not fix them and would throw the user's records away.
    """
    if isinstance(exc, Corrupt):
        return True
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(
        exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)
    ):
        return False
    name = _error_name(exc)
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_FORMAT")):
        return True
    text = str(exc).lower()
    # A database whose tables vanished while user_version says they exist was damaged too.
    return any(
        s in text for s in ("malformed", "not a database", "file is encrypted", "no such table")
    )


def utc_stamp() -> str:
    """Current UTC time as ``YYYYmmddTHHMMSS.ffffffZ`` (safe in file names)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def utc_now_iso() -> str:
    """Current UTC time in ISO 8601 with seconds, e.g. ``2025-01-31T12:00:00+00:00``."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def sqlite_uri(path: Path, mode: str) -> str:
    return f"file:{quote(str(path.resolve()))}?{mode}"


def file_signature(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def lock_timeout_s() -> float:
    """``$MIOCORE_DB_LOCK_TIMEOUT_S`` (a number > 0), else :data:`BUSY_TIMEOUT_S`."""
    from miocore.errors import InvalidEnvironmentError

    text = env.get(LOCK_TIMEOUT_ENV).strip()
    if not text:
        return BUSY_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise InvalidEnvironmentError(
            "must be a number of seconds > 0", field=LOCK_TIMEOUT_ENV, value=text
        )
    return value


def retry_busy(fn: Callable[[], T], what: str, path: Path, timeout_s: float | None = None) -> T:
    """Run ``fn``, retrying with jittered exponential backoff while SQLite says busy/locked.

    Gives up after :data:`MAX_ATTEMPTS` attempts or ``timeout_s`` seconds, whichever first.
    """
    delay = 0.01
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for attempt in range(MAX_ATTEMPTS):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            late = deadline is not None and time.monotonic() >= deadline
            if attempt == MAX_ATTEMPTS - 1 or late:
                raise DatabaseError(
                    f"{what}: still locked after {MAX_ATTEMPTS} attempts ({exc})",
                    field="path",
                    value=str(path),
                ) from exc
            import random  # here: a FindDb hit never waits, and random costs a new process ~1 ms

            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def recovery_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``<file>.recover-lock`` (POSIX; a no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:  # Windows cannot rename a file another process has open anyway
        yield
        return
    fd = os.open(path.with_name(path.name + ".recover-lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def check_version(version: int, path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise DatabaseError(
            f"database schema version {version} is newer than this miocore understands "
            f"({SCHEMA_VERSION}); upgrade miocore, or point MIOCORE_USER_DB_PATH / "
            "MIOCORE_SYSTEM_DB_PATH elsewhere",
            field="path",
            value=str(path),
        )


def create_schema(conn: sqlite3.Connection, path: Path) -> None:
    # Re-read inside the write lock: another process may have created it meanwhile.
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    check_version(version, path)
    if version == SCHEMA_VERSION:
        return
    if version == 0 and not conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
        # A new file: let the size cap give evicted pages back to the file system.
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    for statement in SCHEMA_SQL.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def warn_database(message: str) -> None:
    log.warning(message)
    warnings.warn(message, DatabaseWarning, stacklevel=4)


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open another database file read-only (a merge source); checks version and integrity."""
    try:
        conn = sqlite3.connect(
            sqlite_uri(path, "mode=ro"), uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
        )
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            raise DatabaseError(f"locked: {exc}", field="path", value=str(path)) from exc
        # mode=ro on a WAL file needs to create its -shm beside it; a read-only folder cannot.
        conn = sqlite3.connect(
            sqlite_uri(path, "mode=ro&immutable=1"), uri=True, isolation_level=None
        )
        version = _read_version(conn, path)
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(
            f"not a readable database: {exc}", field="path", value=str(path)
        ) from exc
    check_version(version, path)
    return conn


def _read_version(conn: sqlite3.Connection, path: Path) -> int:
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise DatabaseError(
            f"not a readable database: {exc}", field="path", value=str(path)
        ) from exc
