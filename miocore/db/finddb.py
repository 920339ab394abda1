"""FindDb: the measured solutions of each problem, per device, in two layers.

The **user** layer (``<user_dir>/<device>.db``) is written by find; the **system** layer
(``<system_dir>/<device>.db``) ships with miocore and is only read. A lookup returns the user
record first, then the system one.
"""

from __future__ import annotations

import heapq
import os
import sqlite3
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from miocore.db._common import (
    LayeredDb,
    check_key,
    make_provenance,
    provenance_json,
)
from miocore.db.mathkeys import TF32_SUFFIX
from miocore.db.packed import readable_db_file
from miocore.db.records import (
    _COLUMNS,
    _SQLITE_MAGIC,
    _TEXT_SELECT,
    FindDbEntry,
    FindDbRecord,
    _clean,
    _entry_from_row,
    _fastest_first,
    _format,
    _group,
    _insert,
    _read_sqlite,
    _supersedes,
    _text_record,
    _text_rows,
    clean_text_rows,
)
from miocore.db.sizecap import enforce, max_bytes, touch
from miocore.errors import DatabaseError, InvalidArgumentError

if TYPE_CHECKING:
    from miocore.db.outcomes import ImportResult, MergeResult
    from miocore.db.text import BadLine

# The text format and the import and merge results load with an import, an export or a merge
# (a lookup of measured records, the hit of a new process, needs none of them).

__all__ = ["FindDb", "FindDbEntry", "FindDbRecord"]


class FindDb(LayeredDb):
    """The FindDb of one device: a writable user layer over a read-only system layer.

    ``user_dir`` defaults to ``$MIOCORE_USER_DB_PATH``, else the platform's user cache folder
    + ``/db``; ``system_dir`` to ``$MIOCORE_SYSTEM_DB_PATH``, else ``miocore/data/db/``. Each
    layer is one SQLite file, ``<dir>/<device>.db``, shared with :class:`~miocore.db.PerfDb`.
    The user file is created on the first write; reading a missing file finds nothing.

    Safe to share between threads, and to use from many processes at once.
    """

    # -- lookups ----------------------------------------------------------------------------

    def record(self, key: str, layer: str = "user") -> FindDbRecord | None:
        """The record of ``key`` in one layer, or None."""

        def read(conn: sqlite3.Connection) -> FindDbRecord | None:
            rows = conn.execute(
                f"SELECT key, {_COLUMNS} FROM find_db WHERE key = ? ORDER BY rank, solver",
                (key,),
            )
            found = next(_group(iter(rows.fetchall()), layer), None)
            if found is None:
                text = _text_rows(conn, f"{_TEXT_SELECT} WHERE t.key = ?", (key,))
                found = _text_record(*text[0], layer) if text else None
            return found

        if layer != "user":
            return self._read(layer, read, None)
        found = self._read_memory(read, None) or self._read(layer, read, None)
        if found is not None:
            self._touched.add(key)  # for the size cap's LRU, written with the next write
        return found

    def _take_touched(self) -> list[str]:
        touched, self._touched = self._touched, set()
        return sorted(touched)

    def records(self, key: str) -> list[FindDbRecord]:
        """The records of ``key``: user layer first, then system; only layers that have it."""
        return [r for layer in ("user", "system") if (r := self.record(key, layer)) is not None]

    def keys(self, layer: str = "user") -> list[str]:
        """Every key of one layer, sorted (measured and imported records)."""

        def read(conn: sqlite3.Connection) -> list[str]:
            measured = {r[0] for r in conn.execute("SELECT DISTINCT key FROM find_db")}
            return sorted(
                measured | {r[0] for r in _text_rows(conn, "SELECT key FROM find_db_text")}
            )

        found = self._read(layer, read, [])
        if layer == "user" and self._user.degraded:
            found = sorted(set(found) | set(self._read_memory(read, [])))
        return found

    def families(self, names: Iterable[str], layer: str = "system") -> frozenset[str]:
        """Which of the solver families ``names`` (``"igemm"`` for ``igemm.gpu_mma``) one
        layer's measured records name anywhere: one index seek each, not a scan (imported
        MIOpen text records name MIOpen's solvers and are not looked at)."""
        wanted = sorted(set(names))

        def read(conn: sqlite3.Connection) -> frozenset[str]:
            query = "SELECT 1 FROM find_db WHERE solver >= ? AND solver < ? LIMIT 1"
            return frozenset(
                f for f in wanted if conn.execute(query, (f + ".", f + "/")).fetchone()
            )

        return self._read(layer, read, frozenset())

    def solvers(self, names: Iterable[str], layer: str = "system") -> frozenset[str]:
        """Which of the solvers ``names`` one layer's measured records name anywhere: one index
        seek each."""
        wanted = sorted(set(names))

        def read(conn: sqlite3.Connection) -> frozenset[str]:
            query = "SELECT 1 FROM find_db WHERE solver = ? LIMIT 1"
            return frozenset(n for n in wanted if conn.execute(query, (n,)).fetchone())

        return self._read(layer, read, frozenset())

    def items(self, layer: str = "user") -> Iterator[FindDbRecord]:
        """Every record of one layer, by key (read as one consistent snapshot)."""

        def read(conn: sqlite3.Connection) -> dict[str, FindDbRecord]:
            rows = conn.execute(f"SELECT key, {_COLUMNS} FROM find_db ORDER BY key, rank, solver")
            out = {r.key: r for r in _group(iter(rows.fetchall()), layer)}
            for key, body, prov in _text_rows(conn, _TEXT_SELECT):
                out.setdefault(key, _text_record(key, body, prov, layer))
            return out

        merged = self._read(layer, read, {})
        if layer == "user" and self._user.degraded:
            # Records kept in memory (the file failed) replace the file's records of their keys.
            merged.update(self._read_memory(read, {}))
        return iter([merged[k] for k in sorted(merged)])

    def usage(self) -> dict[str, int | None]:
        """The user file's size and content: measured and imported keys, live bytes, keys
        evicted by the size cap so far, and the cap (``MIOCORE_USER_DB_MAX_MB``) in bytes."""
        from miocore.db.sizecap import max_bytes, usage

        empty = {"measured_keys": 0, "imported_keys": 0, "live_bytes": 0, "evicted_keys": 0}
        return self._read("user", usage, {**empty, "max_bytes": max_bytes()})

    def __len__(self) -> int:
        """Number of keys in the user layer."""
        return len(self.keys("user"))

    # -- writes (user layer only) -----------------------------------------------------------

    def write(self, key: str, entries: Sequence[FindDbEntry]) -> None:
        """Replace the user record of ``key`` with ``entries``, atomically.

        ``entries`` are stored in the order given (find passes them fastest first, ties
        already broken). Missing provenance fields (miocore version, device, written_at) are
        filled in. No entries deletes the record. On any error nothing is changed.
        """
        check_key(key)
        entries = list(entries)

        def txn(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM find_db WHERE key = ?", (key,))
            conn.execute("DELETE FROM find_db_text WHERE key = ?", (key,))
            _insert(conn, key, entries, self.device)
            touch(conn, [*self._take_touched(), key])
            enforce(conn, cap)

        cap = max_bytes()
        self._user.write(txn)

    def delete(self, key: str) -> bool:
        """Delete the user record of ``key``; True when there was one."""

        def txn(conn: sqlite3.Connection) -> bool:
            gone = conn.execute("DELETE FROM find_db WHERE key = ?", (key,)).rowcount
            gone += conn.execute("DELETE FROM find_db_text WHERE key = ?", (key,)).rowcount
            return gone > 0

        return self._user.write(txn, create=False, default=False)

    def clean(
        self,
        *,
        key: str | None = None,
        solver: str | None = None,
        all: bool = False,
        keep_solvers: Collection[str] | None = None,
    ) -> int:
        """Delete user-layer entries; returns how many. The filters combine (AND):

        ``key`` (that record), ``solver`` (that solver's entries, across keys), and
        ``keep_solvers`` (entries whose solver is *not* among these names, e.g. the installed
        solvers). ``all=True`` deletes everything and takes no filter. One filter or ``all``
        is required, so an empty call cannot wipe the database by accident.
        """
        filters = key is not None or solver is not None or keep_solvers is not None
        if all and filters:
            raise InvalidArgumentError("all=True takes no other filter", field="all", value=True)
        if not all and not filters:
            raise InvalidArgumentError(
                "say what to clean: key, solver, keep_solvers or all=True", field="all", value=all
            )
        keep = None if keep_solvers is None else set(keep_solvers)

        def txn(conn: sqlite3.Connection) -> int:
            return clean_text_rows(conn, key, solver, keep, all) + _clean(
                conn, "find_db", key, solver, keep
            )

        return self._user.write(txn, create=False, default=0)

    def import_text(
        self,
        source: Path | str,
        *,
        strict: bool = False,
        skip_bad_lines: bool | None = None,
        check_device: bool = True,
    ) -> ImportResult:
        """Import a MIOpen text FindDb (``.fdb.txt``, also ``.bz2``/``.gz``), streaming.

        Each key in the file replaces the user record of that key (use :meth:`merge_from` to
        combine instead); a key listed twice in the file is merged by the merge rule. Lines
        that cannot be imported (INT8 data, geometries that cannot exist, bad syntax) are
        skipped and reported by reason in the result; ``strict=True`` refuses the whole file
        instead (:class:`~miocore.db.TextFormatError`, nothing imported). ``skip_bad_lines``
        is the older name of ``not strict``. Everything is written in one transaction, kept
        as MIOpen's text (see :mod:`miocore.db.imported`). A file named for another device
        (``gfx942130.HIP.fdb.txt`` into ``gfx906_60``) is refused unless ``check_device`` is
        False.
        """
        from miocore.db.imported import SkipReport, device_from_filename, open_text, stream_import
        from miocore.db.outcomes import ImportResult
        from miocore.db.text import TextFormatError

        if skip_bad_lines is not None:
            strict = not skip_bad_lines
        path = Path(source)
        named = device_from_filename(path.name)
        if check_device and named is not None and named != self.device:
            raise DatabaseError(
                f"{path.name} holds records of device {named!r}, not of this database's "
                f"{self.device!r}; import it into {named!r} (--device {named})",
                field="device",
                value=self.device,
            )
        prov = provenance_json(make_provenance(self.device, source="text-import", file=path.name))
        skips = SkipReport()

        def txn(conn: sqlite3.Connection) -> Any:
            done = stream_import(conn, fh, prov, skips)
            if strict and skips.total:
                raise TextFormatError(str(path), skips.examples)  # rolls the import back
            enforce(conn, cap)
            return done

        cap = max_bytes()
        try:
            with open_text(path) as fh:
                done = self._user.write(txn)
        except (OSError, UnicodeDecodeError, EOFError) as exc:
            raise DatabaseError(f"cannot read: {exc}", field="source", value=str(path)) from exc
        # Fold the import's write-ahead log into the file now, rather than leave it as big.
        self._user.read_file(lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall(), [])
        return ImportResult(
            records=done.records,
            entries=done.entries,
            skipped=tuple(skips.examples),
            skip_counts=dict(skips.counts),
            lines=done.lines,
            seconds=done.seconds,
        )

    def export_text(self, dest: Path | str | TextIO, *, layer: str = "user") -> int:
        """Write one layer as MIOpen's text FindDb, by key; returns the number of records.

        Imported records are written exactly as they were read; measured ones with MIOpen's
        algorithm names for the key's direction. Records of the tf32 math mode are left out
        (MIOpen has no such mode, :mod:`miocore.db.mathkeys`). A path is written atomically (a
        temporary file renamed over it); a text stream is written as is.
        """
        if hasattr(dest, "write"):  # an open text stream
            return self._write_lines(dest, layer)  # type: ignore[arg-type]
        path = Path(dest)  # type: ignore[arg-type]
        import tempfile  # here: its imports (shutil, bz2, lzma) cost every new process ~2 ms

        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                count = self._write_lines(fh, layer)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return count

    def _write_lines(self, out: TextIO, layer: str) -> int:
        def read(conn: sqlite3.Connection) -> int:
            # Two cursors in key order, merged as they stream: memory stays bounded.
            rows = conn.execute(f"SELECT key, {_COLUMNS} FROM find_db ORDER BY key, rank, solver")
            measured = ((r.key, _format(r)) for r in _group(rows, layer) if _miopen_key(r.key))
            try:
                texts = conn.execute(
                    "SELECT key, key || '=' || body FROM find_db_text ORDER BY key"
                )
            except sqlite3.OperationalError as exc:  # a file made before the table existed
                if "no such table" not in str(exc):
                    raise
                texts = iter(())
            count, last = 0, None
            # Stable: of a key in both (never after a write), the measured record wins.
            for key, line in heapq.merge(measured, texts, key=lambda item: item[0]):
                if key != last:
                    out.write(line + "\n")
                    count, last = count + 1, key
            return count

        if layer == "user" and self._user.degraded:
            lines = [_format(r) for r in self.items(layer) if _miopen_key(r.key)]
            for line in lines:
                out.write(line + "\n")
            return len(lines)
        return self._read(layer, read, 0)

    def merge_from(self, source: Path | str, *, skip_bad_lines: bool = False) -> MergeResult:
        """Merge another database into the user layer, in one transaction.

        ``source`` is a miocore SQLite database (either layer's file, any device; packed as
        ``<device>.db.xz`` too) or a MIOpen text FindDb. **Rule**: per key, the union of
        entries by solver; where both have a solver, the entry of the newer solver revision
        wins (a refresh's new kernels replace the old ones' times, slower or not), and between
        entries of one revision the faster ``time_ms`` (a tie keeps the user's entry); the
        merged record is re-sorted fastest first (ties by solver name).
        From a SQLite source, PerfDb entries the user layer lacks are copied too (the user's
        own tuning is kept).
        """
        from miocore.db.outcomes import MergeResult

        path = readable_db_file(Path(source))  # a packed <device>.db.xz: its expansion
        if not path.is_file():
            raise DatabaseError("no such file", field="source", value=str(path))
        with open(path, "rb") as fh:
            is_sqlite = fh.read(16) == _SQLITE_MAGIC
        perf_rows: list[tuple[str, str, str, str]] = []
        bad: list[BadLine] = []
        if is_sqlite:
            records, perf_rows = _read_sqlite(path)
        else:
            records, bad = self._read_text(path, skip_bad_lines)

        def txn(conn: sqlite3.Connection) -> MergeResult:
            keys = added = replaced = kept = 0
            for key, incoming in records.items():
                current = {
                    e.solver: e
                    for e in map(
                        _entry_from_row,
                        conn.execute(
                            f"SELECT {_COLUMNS} FROM find_db WHERE key = ? ORDER BY rank", (key,)
                        ).fetchall(),
                    )
                }
                text = _text_rows(conn, f"{_TEXT_SELECT} WHERE t.key = ?", (key,))
                if text:  # an imported record takes part like a measured one
                    for e in _text_record(*text[0], "user").entries:
                        current.setdefault(e.solver, e)
                changed = False
                for entry in incoming:
                    old = current.get(entry.solver)
                    if old is None:
                        added += 1
                    elif _supersedes(entry, old):
                        replaced += 1
                    else:
                        kept += 1
                        continue
                    current[entry.solver] = entry
                    changed = True
                if changed:
                    keys += 1
                    conn.execute("DELETE FROM find_db WHERE key = ?", (key,))
                    conn.execute("DELETE FROM find_db_text WHERE key = ?", (key,))
                    _insert(conn, key, _fastest_first(current.values()), self.device)
            perf_added = 0
            for row in perf_rows:
                perf_added += conn.execute(
                    "INSERT OR IGNORE INTO perf_db (key, solver, perf_config, provenance) "
                    "VALUES (?, ?, ?, ?)",
                    row,
                ).rowcount
            return MergeResult(
                keys=keys,
                added=added,
                replaced=replaced,
                kept=kept,
                perf_added=perf_added,
                skipped=tuple(bad),
            )

        if not records and not perf_rows:
            return MergeResult(keys=0, added=0, replaced=0, kept=0, skipped=tuple(bad))
        return self._user.write(txn)

    # -- helpers ----------------------------------------------------------------------------

    def _read_text(
        self, path: Path, skip_bad_lines: bool
    ) -> tuple[dict[str, list[FindDbEntry]], list[BadLine]]:
        from miocore.db.text import parse_lines

        try:
            with open(path, encoding="utf-8") as fh:
                good, bad = parse_lines(fh, source=str(path), skip_bad_lines=skip_bad_lines)
        except (OSError, UnicodeDecodeError) as exc:
            raise DatabaseError(f"cannot read: {exc}", field="source", value=str(path)) from exc
        prov = make_provenance(self.device, source="text-import", file=path.name)
        records: dict[str, list[FindDbEntry]] = {}
        for _line, key, items in good:
            entries = [
                FindDbEntry(
                    solver=t.solver,
                    algorithm=t.algorithm,
                    time_ms=t.time_ms,
                    workspace_size=t.workspace_size,
                    provenance=prov,
                )
                for t in items
            ]
            if key in records:
                merged = {e.solver: e for e in records[key]}
                for e in entries:
                    if e.solver not in merged or e.time_ms < merged[e.solver].time_ms:
                        merged[e.solver] = e
                entries = _fastest_first(merged.values())
            records[key] = entries
        return records, bad


def _miopen_key(key: str) -> bool:
    """Whether a record's key is one MIOpen can read (not a tf32 math mode's)."""
    return not key.endswith(TF32_SUFFIX)
