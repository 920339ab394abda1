"""The user layer degrades, it never fails: a storage fault turns it into memory, with a warning.

A database is a cache of knowledge, never a precondition of a convolution. When the user file
cannot be opened, read, written or created (a folder in the way, permissions, a full disk, an
I/O error, a lock held too long, a newer schema), :class:`UserLayer` keeps what would have
been written in an in-memory SQLite database of the same tables for the life of the object,
warns once per object and cause, and reports it in :attr:`UserLayer.status`. Records already in
the file stay readable whenever reading still works (a full disk does not hide them).
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from miocore.db._sqlite import SCHEMA_SQL, SCHEMA_VERSION, DatabaseWarning
from miocore.db._store import Store
from miocore.errors import DatabaseError
from miocore.values import asdict, frozen

log = logging.getLogger("miocore.db")

T = TypeVar("T")

#: The causes a user layer can degrade for, with what to tell the user.
CAUSES: dict[str, str] = {
    "not-a-file": "something that is not a database file is in the way",
    "permission": "permission denied",
    "read-only": "the file or its folder is read-only",
    "disk-full": "the disk is full",
    "io-error": "an I/O error",
    "locked": "another process held the lock too long",
    "newer-schema": "it was written by a newer miocore (left untouched)",
    "cannot-create": "its folder cannot be created",
    "corrupt": "it is corrupt and could not be set aside",
    "other": "an unexpected storage error",
}


class StorageDegradedWarning(DatabaseWarning):
    """The user database could not be used; results are kept in memory only."""


@frozen(kw_only=True)
class StorageStatus:
    """The state of a user layer: ``state`` is ``"ok"`` or ``"degraded"``.

    ``cause`` is a key of :data:`CAUSES` (None when ok), ``detail`` the error text, ``path``
    the user file, ``reads`` whether records in the file are still read, ``memory_records``
    how many writes are held in memory only.
    """

    state: str
    path: str
    cause: str | None = None
    detail: str = ""
    reads: bool = True
    memory_records: int = 0

    @property
    def ok(self) -> bool:
        """True when the user file works."""
        return self.state == "ok"

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON output and find reports."""
        return asdict(self)

    def line(self) -> str:
        """One line for humans."""
        if self.ok:
            return f"ok ({self.path})"
        what = CAUSES.get(self.cause or "other", self.cause)
        return (
            f"degraded: {self.path}: {what} ({self.detail}); "
            f"{'file still read, ' if self.reads else ''}"
            f"new results in memory only ({self.memory_records} writes)"
        )


def classify(exc: BaseException) -> str:
    """The :data:`CAUSES` key of a storage error (SQLite, OS or miocore's own)."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for item in chain:
        if isinstance(item, OSError) and item.errno is not None:
            by_errno = {
                errno.ENOSPC: "disk-full",
                errno.EDQUOT: "disk-full",
                errno.EACCES: "permission",
                errno.EPERM: "permission",
                errno.EROFS: "read-only",
                errno.EIO: "io-error",
                errno.ENOTDIR: "cannot-create",
                errno.EISDIR: "not-a-file",
                errno.EEXIST: "cannot-create",
            }
            if item.errno in by_errno:
                return by_errno[item.errno]
        name = getattr(item, "sqlite_errorname", "") or ""
        for prefix, cause in (
            ("SQLITE_FULL", "disk-full"),
            ("SQLITE_READONLY", "read-only"),
            ("SQLITE_PERM", "permission"),
            ("SQLITE_AUTH", "permission"),
            ("SQLITE_IOERR", "io-error"),
            ("SQLITE_BUSY", "locked"),
            ("SQLITE_LOCKED", "locked"),
            ("SQLITE_CANTOPEN", "not-a-file"),
            ("SQLITE_CORRUPT", "corrupt"),
            ("SQLITE_NOTADB", "corrupt"),
        ):
            if name.startswith(prefix):
                return cause
    text = " ".join(str(item) for item in chain).lower()
    for needle, cause in (
        ("newer than this miocore", "newer-schema"),
        ("cannot create the user database folder", "cannot-create"),
        ("disk is full", "disk-full"),
        ("disk i/o error", "io-error"),
        ("readonly", "read-only"),
        ("read-only", "read-only"),
        ("locked", "locked"),
        ("unable to open database file", "not-a-file"),
        ("permission denied", "permission"),
        ("corrupt", "corrupt"),
    ):
        if needle in text:
            return cause
    return "other"


class _CallerError(Exception):
    """Carries an error raised by the caller's transaction body past the storage handling."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _guarded(fn: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
    def run(conn: sqlite3.Connection) -> T:
        try:
            return fn(conn)
        except (sqlite3.Error, OSError):
            raise  # SQLite's or the OS's: classified by the layer
        except Exception as exc:
            raise _CallerError(exc) from exc

    return run


def is_bad_data(exc: BaseException) -> bool:
    """True when a table rule (primary key, CHECK) refused the data: the caller's fault."""
    cur: BaseException | None = exc
    while cur is not None:
        if isinstance(cur, sqlite3.IntegrityError):
            return True
        cur = cur.__cause__
    return False


#: What a user layer catches and degrades on; everything else (bad arguments) propagates.
STORAGE_ERRORS = (DatabaseError, sqlite3.Error, OSError)


class MemoryStore:
    """An in-memory SQLite database with the user layer's tables (same read/write calls)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._conn.executescript(SCHEMA_SQL)
        self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self.writes = 0

    def read(self, fn: Callable[[sqlite3.Connection], T], default: T) -> T:
        """Run ``fn(conn)``."""
        with self._lock:
            return fn(self._conn)

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one transaction."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                result = fn(self._conn)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self.writes += 1
            return result


def _check_creatable(path: Path) -> None:
    folder = path.parent
    while not folder.exists():
        if folder == folder.parent:
            break
        folder = folder.parent
    if not folder.is_dir():
        raise DatabaseError(
            "cannot create the user database folder: a file is in the way",
            field="path",
            value=str(folder),
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "permission denied", str(folder))


class UserLayer:
    """The user layer of one database object: its file, and memory once the file fails.

    ``owner`` names the object in warnings (``FindDb('cpu_x86_64_2')``).
    """

    def __init__(self, store: Store, owner: str) -> None:
        self.store = store
        self.owner = owner
        self._lock = threading.RLock()
        self._memory: MemoryStore | None = None
        self._cause: str | None = None
        self._detail = ""
        self._reads = True
        self._warned: set[str] = set()

    @property
    def path(self) -> Path:
        """The user file."""
        return self.store.path

    @property
    def degraded(self) -> bool:
        """True once a storage fault moved writes to memory."""
        return self._memory is not None

    @property
    def status(self) -> StorageStatus:
        """Where this layer stands (see :class:`StorageStatus`)."""
        if self._memory is None:
            return StorageStatus(state="ok", path=str(self.path))
        return StorageStatus(
            state="degraded",
            path=str(self.path),
            cause=self._cause,
            detail=self._detail,
            reads=self._reads,
            memory_records=self._memory.writes,
        )

    # -- reads ------------------------------------------------------------------------------

    def read_file(self, fn: Callable[[sqlite3.Connection], T], default: T) -> T:
        """``fn`` on the user file; ``default`` when it is missing or cannot be read."""
        if not self._reads:
            return default
        try:
            return self.store.read(fn, default)
        except STORAGE_ERRORS as exc:
            self._degrade(exc, reads=False)
            return default

    def read_memory(self, fn: Callable[[sqlite3.Connection], T], default: T) -> T:
        """``fn`` on what was kept in memory; ``default`` while the file works."""
        memory = self._memory
        return default if memory is None else memory.read(fn, default)

    # -- writes -----------------------------------------------------------------------------

    def write(
        self, fn: Callable[[sqlite3.Connection], T], *, create: bool = True, default: T = None
    ) -> T:
        """``fn`` in one transaction on the file, or in memory once the file has failed.

        ``create=False`` does not create a missing file (a delete): it returns ``default``.
        A failed file transaction changed nothing, so it is replayed in memory whole.
        """
        if self._memory is None:
            try:
                return self.store.write(_guarded(fn), create=create, default=default)
            except _CallerError as exc:
                raise exc.error from None  # the caller's own error, rolled back: not storage
            except STORAGE_ERRORS as exc:
                if is_bad_data(exc):
                    raise  # the caller's entries broke a table rule: not a storage fault
                self._degrade(exc, reads=self._reads)
        assert self._memory is not None
        try:
            return self._memory.write(fn)
        except sqlite3.IntegrityError as exc:
            raise DatabaseError(
                f"user database error: {exc}", field="path", value=str(self.path)
            ) from exc

    def probe(self) -> StorageStatus:
        """Try the file now (a read and an empty write transaction) and return :attr:`status`.

        A missing file is not created: its nearest existing folder must be a writable folder.
        """
        if self._memory is None:
            try:
                if self.store.path.exists() or self.store.path.is_symlink():
                    self.store.read(lambda conn: conn.execute("SELECT 1").fetchone(), None)
                    self.store.write(lambda conn: None, create=False)
                else:
                    _check_creatable(self.store.path)
            except STORAGE_ERRORS as exc:
                self._degrade(exc, reads=False)
        return self.status

    # -- machinery --------------------------------------------------------------------------

    def _degrade(self, exc: BaseException, *, reads: bool) -> None:
        cause = classify(exc)
        if cause in ("newer-schema", "not-a-file", "permission", "cannot-create"):
            reads = False  # nothing in the file can be read either
        with self._lock:
            if self._memory is None:
                self._memory = MemoryStore()
                self._cause, self._detail = cause, str(exc)
            self._reads = self._reads and reads
            if cause in self._warned:
                return
            self._warned.add(cause)
        message = (
            f"{self.owner}: the user database {self.path} cannot be used: "
            f"{CAUSES.get(cause, cause)} ({exc}). Results are kept in memory for the life of "
            "this object and are lost when it ends. To keep them, point MIOCORE_USER_DB_PATH "
            "at a writable local folder; `miocore db path` shows the state."
        )
        log.warning(message)
        warnings.warn(message, StorageDegradedWarning, stacklevel=4)
