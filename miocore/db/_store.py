"""One SQLite database file: opening, schema, locking, retries and corruption recovery.

FindDb and PerfDb both sit on a :class:`Store`. A writable store (the user layer) is created on
its first write, uses WAL journaling, a busy timeout, ``BEGIN IMMEDIATE`` write transactions and
a bounded retry with backoff, so many processes can write at once without losing a record or
seeing "database is locked". A corrupt user file is renamed aside with a warning and rebuilt.
A read-only store (the system layer) is opened with ``immutable=1`` and never written; when it
is corrupt it is warned about and read as empty.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import logging
import os
import random
import sqlite3
import threading
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
#: :func:`_create_schema` to upgrade) whenever the tables change.
SCHEMA_VERSION = 2

#: The longest a call waits for another process's lock, in seconds (SQLite's busy wait plus
#: our retries), unless ``MIOCORE_DB_LOCK_TIMEOUT_S`` says otherwise. Past it the user layer
#: degrades to memory (see :mod:`miocore.db.storage`) instead of blocking the convolution.
BUSY_TIMEOUT_S = 30.0
LOCK_TIMEOUT_ENV = "MIOCORE_DB_LOCK_TIMEOUT_S"
#: Our retries on top of SQLite's busy wait (for the busy cases its handler does not cover:
#: WAL recovery, snapshot upgrades, a COMMIT racing a checkpoint).
MAX_ATTEMPTS = 10
#: Files up to this size get a ``PRAGMA quick_check`` when first opened; larger ones rely on
#: the errors that reading them raises (quick_check reads the whole file).
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


class _Corrupt(Exception):
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
    if isinstance(exc, _Corrupt):
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


def _uri(path: Path, mode: str) -> str:
    return f"file:{quote(str(path.resolve()))}?{mode}"


def _signature(path: Path) -> tuple[int, int] | None:
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
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")  # pragma: no cover


class Store:
    """One SQLite file holding the ``find_db`` and ``perf_db`` tables.

    ``writable=True`` is a user layer: created on the first write, never on a read. Otherwise
    it is a system layer, opened read-only and immutable. One connection per store and process,
    shared by threads under a lock; it is reopened when the file is replaced (another process
    set a corrupt file aside) and after a fork.
    """

    def __init__(self, path: Path, *, writable: bool, network: bool | None = None) -> None:
        self.path = path
        self.writable = writable
        #: On a network file system the user layer uses the rollback journal, not WAL
        #: (:mod:`miocore.db.mounts`); None: detect from the mounts table when first opened.
        self.network = network
        #: The lock wait of each call, in seconds (``$MIOCORE_DB_LOCK_TIMEOUT_S``).
        self.timeout_s = lock_timeout_s()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._conn_pid = 0
        self._conn_sig: tuple[int, int] | None = None
        # The file last opened or used: what a corruption found now refers to.
        self._last_sig: tuple[int, int] | None = None
        # System layer: the signature of a file found corrupt, so it is warned about once.
        # User layer: a corrupt file just set aside (and why), whose rows are still to be saved.
        self._salvage: tuple[Path, str] | None = None
        self._bad_sig: tuple[int, int] | None = None

    @property
    def layer(self) -> str:
        """``"user"`` or ``"system"``."""
        return "user" if self.writable else "system"

    # -- public operations ------------------------------------------------------------------

    def read(self, fn: Callable[[sqlite3.Connection], T], default: T) -> T:
        """Run a read-only ``fn(conn)``; ``default`` when the file does not exist."""
        with self._lock:
            return self._run(fn, default, write=False)

    def write(
        self, fn: Callable[[sqlite3.Connection], T], *, create: bool = True, default: T = None
    ) -> T:
        """Run ``fn(conn)`` inside one ``BEGIN IMMEDIATE`` transaction: all of it or nothing.

        ``create=False``: a missing file is not created and ``default`` is returned.
        """
        if not self.writable:
            raise DatabaseError("the system layer is read-only", field="path", value=str(self.path))
        with self._lock:
            return self._run(fn, default, write=True, create=create)

    @property
    def journal_mode(self) -> str:
        """The journal this store uses for writes: ``"wal"``, or ``"delete"`` on a network FS."""
        return "delete" if self._on_network() else "wal"

    def _on_network(self) -> bool:
        if self.network is None:
            from miocore.db.mounts import is_network_path

            folder = self.path.parent
            while not folder.exists() and folder != folder.parent:
                folder = folder.parent  # the file system the folder will be created on
            self.network = is_network_path(folder)
        return self.network

    def close(self) -> None:
        """Close the connection (the next operation reopens it)."""
        with self._lock:
            self._drop()

    # -- machinery --------------------------------------------------------------------------

    def _run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        default: T,
        *,
        write: bool,
        create: bool = True,
    ) -> T:
        recovered = False
        while True:
            try:
                # After a corrupt file was set aside, rebuild it even on a read.
                conn = self._connection(create=(write and create) or recovered)
                if conn is None:
                    return default
                if self._salvage is not None:
                    self._recover_rows(conn)
                if write:
                    return retry_busy(
                        functools.partial(self._transaction, conn, fn),
                        "write",
                        self.path,
                        self.timeout_s,
                    )
                return retry_busy(functools.partial(fn, conn), "read", self.path, self.timeout_s)
            except (sqlite3.DatabaseError, _Corrupt) as exc:
                if not is_corruption(exc):
                    raise DatabaseError(
                        f"{self.layer} database error: {exc}", field="path", value=str(self.path)
                    ) from exc
                bad_sig = self._last_sig
                self._drop()
                if not self.writable:
                    self._bad_sig = bad_sig
                    _warn(
                        f"system database {self.path} is corrupt ({exc}); ignoring it "
                        "(reinstall miocore or fix MIOCORE_SYSTEM_DB_PATH)"
                    )
                    return default
                if recovered:
                    raise DatabaseError(
                        f"user database is still corrupt after it was rebuilt: {exc}",
                        field="path",
                        value=str(self.path),
                    ) from exc
                aside = self._set_aside(bad_sig)
                if aside is not None:
                    self._salvage = (aside, str(exc))
                recovered = True

    @staticmethod
    def _transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    def _drop(self) -> None:
        if self._conn is not None and self._conn_pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None
        self._conn_sig = None

    def _connection(self, *, create: bool) -> sqlite3.Connection | None:
        sig = self._last_sig = _signature(self.path)
        if self._conn is not None:
            # A connection inherited through fork() must not be used; a replaced file must be
            # reopened, or we would keep reading the inode that was set aside.
            if self._conn_pid == os.getpid() and sig == self._conn_sig:
                return self._conn
            self._drop()
        if sig is None and not create:
            return None
        if not self.writable:
            if sig == self._bad_sig:
                return None
            conn = self._open_system()
        else:
            try:
                conn = self._open_user(create=sig is None)
            except sqlite3.OperationalError:
                # The file vanished between stat and open (another process set it aside).
                if self.path.exists():
                    raise
                if not create:
                    return None
                conn = self._open_user(create=True)
        self._conn = conn
        self._conn_pid = os.getpid()
        self._conn_sig = self._last_sig = _signature(self.path)
        return conn

    def _open_system(self) -> sqlite3.Connection:
        # immutable=1: no locks, no -wal/-shm files, nothing ever written beside package data.
        # But immutable ignores a WAL: if one is there (a live database used as the system
        # layer), plain read-only mode sees its commits.
        wal = self.path.with_name(self.path.name + "-wal")
        mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
        conn = sqlite3.connect(
            _uri(self.path, mode),
            timeout=BUSY_TIMEOUT_S,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            self._check(conn)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            _check_version(version, self.path)
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_user(self, *, create: bool) -> sqlite3.Connection:
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DatabaseError(
                    f"cannot create the user database folder: {exc}",
                    field="path",
                    value=str(self.path.parent),
                ) from exc
        # mode=rw when the file exists, so a file deleted meanwhile is not silently recreated
        # by a read; rwc only on the write path.
        conn = sqlite3.connect(
            _uri(self.path, "mode=rwc" if create else "mode=rw"),
            uri=True,
            timeout=self.timeout_s,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            retry_busy(lambda: self._prepare_user(conn), "open", self.path, self.timeout_s)
        except BaseException:
            conn.close()
            raise
        return conn

    def _prepare_user(self, conn: sqlite3.Connection) -> None:
        self._check(conn)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        _check_version(version, self.path)
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        wanted = self.journal_mode
        if mode != wanted:
            # WAL lets readers run beside a writer, but its index lives in shared memory that
            # hosts of a network file system do not share: there the rollback journal, whose
            # fcntl locks the server arbitrates, is the safe mode.
            conn.execute(f"PRAGMA journal_mode={wanted.upper()}")
        # NORMAL is safe with WAL (a power cut may lose the last commits, never corrupt the
        # file); the rollback journal needs FULL for the same promise.
        conn.execute(f"PRAGMA synchronous={'NORMAL' if wanted == 'wal' else 'FULL'}")
        if version < SCHEMA_VERSION:
            self._transaction(conn, functools.partial(_create_schema, path=self.path))

    def _check(self, conn: sqlite3.Connection) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size > QUICK_CHECK_MAX_BYTES:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return
        rows = conn.execute("PRAGMA quick_check").fetchall()
        if rows != [("ok",)]:
            problems = "; ".join(str(r[0]) for r in rows[:3])
            raise _Corrupt(f"integrity check failed: {problems}")

    def _recover_rows(self, conn: sqlite3.Connection) -> None:
        from miocore.db.salvage import salvage

        assert self._salvage is not None
        (aside, reason), self._salvage = self._salvage, None

        def write(fn: Callable[[sqlite3.Connection], None]) -> None:
            retry_busy(
                functools.partial(self._transaction, conn, fn), "salvage", self.path, self.timeout_s
            )

        saved = salvage(aside, conn, write)
        _warn(
            f"user database {self.path} was corrupt ({reason}); moved it to {aside.name}, "
            f"copied the {saved} readable rows into a new one"
        )

    def _set_aside(self, bad_sig: tuple[int, int] | None) -> Path | None:
        # Under a lock, so that two processes that found the same file corrupt cannot both
        # act: the second sees the file changed and leaves the new one (and its WAL) alone.
        with _recovery_lock(self.path):
            sig = _signature(self.path)
            if sig is None or (bad_sig is not None and sig != bad_sig):
                return None  # someone else set it aside; the retry opens what is there
            aside = self.path.with_name(f"{self.path.name}.corrupt-{utc_stamp()}-{os.getpid()}")
            # The journal files belong to the corrupt file: move them first (a WAL left behind
            # would be replayed into the new file). The -shm index is left: SQLite rebuilds
            # it, and deleting one in use by a new file would break that file.
            for suffix in ("-wal", "-journal"):
                side = self.path.with_name(self.path.name + suffix)
                with contextlib.suppress(FileNotFoundError):
                    os.replace(side, aside.with_name(aside.name + suffix))
            try:
                os.replace(self.path, aside)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise DatabaseError(
                    f"user database is corrupt and could not be moved aside: {exc}",
                    field="path",
                    value=str(self.path),
                ) from exc
        return aside


@contextlib.contextmanager
def _recovery_lock(path: Path) -> Iterator[None]:
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


def _check_version(version: int, path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise DatabaseError(
            f"database schema version {version} is newer than this miocore understands "
            f"({SCHEMA_VERSION}); upgrade miocore, or point MIOCORE_USER_DB_PATH / "
            "MIOCORE_SYSTEM_DB_PATH elsewhere",
            field="path",
            value=str(path),
        )


def _create_schema(conn: sqlite3.Connection, path: Path) -> None:
    # Re-read inside the write lock: another process may have created it meanwhile.
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    _check_version(version, path)
    if version == SCHEMA_VERSION:
        return
    if version == 0 and not conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
        # A new file: let the size cap give evicted pages back to the file system.
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    for statement in SCHEMA_SQL.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, DatabaseWarning, stacklevel=4)


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open another database file read-only (a merge source); checks version and integrity."""
    try:
        conn = sqlite3.connect(
            _uri(path, "mode=ro"), uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
        )
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            raise DatabaseError(f"locked: {exc}", field="path", value=str(path)) from exc
        # mode=ro on a WAL file needs to create its -shm beside it; a read-only folder cannot.
        conn = sqlite3.connect(_uri(path, "mode=ro&immutable=1"), uri=True, isolation_level=None)
        version = _read_version(conn, path)
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(
            f"not a readable database: {exc}", field="path", value=str(path)
        ) from exc
    _check_version(version, path)
    return conn


def _read_version(conn: sqlite3.Connection, path: Path) -> int:
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise DatabaseError(
            f"not a readable database: {exc}", field="path", value=str(path)
        ) from exc
