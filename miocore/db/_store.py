"""One SQLite database file: opening, schema, locking, retries and corruption recovery.

FindDb and PerfDb both sit on a :class:`Store`. A writable store (the user layer) is created on
its first write, uses WAL journaling, a busy timeout, ``BEGIN IMMEDIATE`` write transactions and
a bounded retry with backoff, so many processes can write at once without losing a record or
seeing "database is locked". A corrupt user file is renamed aside with a warning and rebuilt.
A read-only store (the system layer) is opened with ``immutable=1`` and never written; when it
is corrupt it is warned about and read as empty.

The SQLite helpers it uses (schema, retries, error classification, the recovery lock) are in
:mod:`miocore.db._sqlite`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from miocore.db._sqlite import (
    BUSY_TIMEOUT_S,
    QUICK_CHECK_MAX_BYTES,
    SCHEMA_VERSION,
    Corrupt,
    check_version,
    create_schema,
    file_signature,
    is_corruption,
    lock_timeout_s,
    recovery_lock,
    retry_busy,
    sqlite_uri,
    utc_stamp,
    warn_database,
)
from miocore.errors import DatabaseError

T = TypeVar("T")

#: How often an open follows a file that other processes keep replacing before giving up.
REOPEN_ATTEMPTS = 8


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
            except (sqlite3.DatabaseError, Corrupt) as exc:
                if not is_corruption(exc):
                    raise DatabaseError(
                        f"{self.layer} database error: {exc}", field="path", value=str(self.path)
                    ) from exc
                bad_sig = self._last_sig
                self._drop()
                if not self.writable:
                    self._bad_sig = bad_sig
                    warn_database(
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
        sig = self._last_sig = file_signature(self.path)
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
            opened = self._open_user(sig, create=create)
            if opened is None:
                return None
            conn = opened
        self._conn = conn
        self._conn_pid = os.getpid()
        self._conn_sig = self._last_sig = file_signature(self.path)
        return conn

    def _open_system(self) -> sqlite3.Connection:
        # immutable=1: no locks, no -wal/-shm files, nothing ever written beside package data.
        # But immutable ignores a WAL: if one is there (a live database used as the system
        # layer), plain read-only mode sees its commits.
        wal = self.path.with_name(self.path.name + "-wal")
        mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
        conn = sqlite3.connect(
            sqlite_uri(self.path, mode),
            timeout=BUSY_TIMEOUT_S,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            # No quick_check here: it reads the whole file (8 ms of every new process for the
            # shipped 7 MB CPU database), and the shipped files are checked when built and by
            # the test suite. A damaged file or page still raises when read, and the layer is
            # then ignored with a warning (``_run``).
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            check_version(version, self.path)
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_user(self, sig: tuple[int, int] | None, *, create: bool) -> sqlite3.Connection | None:
        # Another process may set the file aside, and another make a new one, between our
        # stat and our open: then open what is there now.
        for _ in range(REOPEN_ATTEMPTS):
            if sig is None:
                if not create:
                    return None
                if not self._create_whole():
                    return self._connect_user("mode=rwc")
            try:
                # mode=rw: a file set aside meanwhile is not silently recreated by a read.
                return self._connect_user("mode=rw")
            except sqlite3.OperationalError:
                now = file_signature(self.path)
                if now is not None and now == sig:
                    raise
                sig = now
        raise DatabaseError(
            f"the user database was replaced {REOPEN_ATTEMPTS} times while it was being opened",
            field="path",
            value=str(self.path),
        )

    def _connect_user(self, mode: str) -> sqlite3.Connection:
        conn = sqlite3.connect(
            sqlite_uri(self.path, mode),
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

    def _create_whole(self) -> bool:
        """Make a new database beside the path and link it into place whole.

        A file created in place can be opened by another process before its header, journal
        mode and schema are written (SQLite then says "disk I/O error" or "no such table").
        False: this file system has no hard links; the caller creates the file in place.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseError(
                f"cannot create the user database folder: {exc}",
                field="path",
                value=str(self.path.parent),
            ) from exc
        draft = self.path.with_name(f".{self.path.name}.new-{os.getpid()}-{threading.get_ident()}")
        try:
            conn = sqlite3.connect(sqlite_uri(draft, "mode=rwc"), uri=True, isolation_level=None)
            try:
                self._transaction(conn, functools.partial(create_schema, path=self.path))
                conn.execute(f"PRAGMA journal_mode={self.journal_mode.upper()}")
            finally:
                conn.close()
            try:
                os.link(draft, self.path)
            except FileExistsError:
                pass  # another process linked its own first: everyone opens that one
            except OSError:
                return False
            return True
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(draft.with_name(draft.name + suffix))

    def _prepare_user(self, conn: sqlite3.Connection) -> None:
        self._check(conn)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        check_version(version, self.path)
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
            self._transaction(conn, functools.partial(create_schema, path=self.path))

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
            raise Corrupt(f"integrity check failed: {problems}")

    def _recover_rows(self, conn: sqlite3.Connection) -> None:
        from miocore.db.salvage import salvage

        assert self._salvage is not None
        (aside, reason), self._salvage = self._salvage, None

        def write(fn: Callable[[sqlite3.Connection], None]) -> None:
            retry_busy(
                functools.partial(self._transaction, conn, fn), "salvage", self.path, self.timeout_s
            )

        saved = salvage(aside, conn, write)
        warn_database(
            f"user database {self.path} was corrupt ({reason}); moved it to {aside.name}, "
            f"copied the {saved} readable rows into a new one"
        )

    def _set_aside(self, bad_sig: tuple[int, int] | None) -> Path | None:
        # Under a lock, so that two processes that found the same file corrupt cannot both
        # act: the second sees the file changed and leaves the new one (and its WAL) alone.
        with recovery_lock(self.path):
            sig = file_signature(self.path)
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
