"""FindDb: the measured solutions of each problem, per device, in two layers.

The **user** layer (``<user_dir>/<device>.db``) is written by find; the **system** layer
(``<system_dir>/<device>.db``) ships with miocore and is only read. A lookup returns the user
record first, then the system one.
"""

from __future__ import annotations

import heapq
import os
import sqlite3
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs

from miocore.db._common import (
    LayeredDb,
    check_key,
    check_nonneg_float,
    check_nonneg_int,
    check_solver,
    complete_provenance,
    freeze_provenance,
    make_provenance,
    parse_algorithm,
    provenance_from_json,
    provenance_json,
)
from miocore.db._store import open_readonly
from miocore.db.sizecap import enforce, max_bytes, touch
from miocore.db.text import (
    BadLine,
    TextEntry,
    TextFormatError,
    direction_letter,
    format_line,
    parse_body,
    parse_lines,
)
from miocore.errors import DatabaseError, InvalidArgumentError

_SQLITE_MAGIC = b"SQLite format 3\x00"


def _algorithm(value: Any) -> str:
    if isinstance(value, str):
        return parse_algorithm(value)
    from miocore.solver.interface import Algorithm

    return Algorithm.parse(value).value


def _optional_spread(value: Any) -> float | None:
    return None if value is None else check_nonneg_float(value, "spread_ms")


def _optional_perf_config(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(
            "must be a str (PerfConfig.to_string()) or None", field="perf_config", value=value
        )
    return value


@attrs.frozen(kw_only=True)
class FindDbEntry:
    """One solver's measured result for one problem.

    ``time_ms`` is the median of ``count`` timed runs and ``spread_ms`` their spread (e.g. the
    inter-quartile range); ``count == 0`` means the time was imported without statistics.
    ``algorithm`` accepts an :class:`~miocore.solver.Algorithm`, its value or a MIOpen name and
    is stored as the value. ``provenance`` says who measured it: miocore version, the solver's
    plugin distribution and version, device, ``written_at`` (ISO UTC); int/float values are
    turned into text.
    """

    solver: str = attrs.field(converter=check_solver)
    algorithm: str = attrs.field(converter=_algorithm)
    time_ms: float = attrs.field(converter=lambda v: check_nonneg_float(v, "time_ms"))
    workspace_size: int = attrs.field(converter=lambda v: check_nonneg_int(v, "workspace_size"))
    spread_ms: float | None = attrs.field(default=None, converter=_optional_spread)
    count: int = attrs.field(default=0, converter=lambda v: check_nonneg_int(v, "count"))
    perf_config: str | None = attrs.field(default=None, converter=_optional_perf_config)
    provenance: Mapping[str, str] = attrs.field(
        factory=dict, converter=freeze_provenance, hash=False
    )


@attrs.frozen(kw_only=True)
class FindDbRecord:
    """Every entry of one key in one layer (``"user"`` or ``"system"``), fastest first."""

    key: str
    layer: str
    entries: tuple[FindDbEntry, ...]

    @property
    def solvers(self) -> list[str]:
        """Solver names in the record's order."""
        return [e.solver for e in self.entries]


@attrs.frozen(kw_only=True)
class ImportResult:
    """What :meth:`FindDb.import_text` did: records and entries written, lines skipped.

    ``skip_counts`` counts skipped lines per reason; ``skipped`` holds the first examples of
    each reason (all of them in strict mode's error). ``lines`` read, ``seconds`` taken.
    """

    records: int
    entries: int
    skipped: tuple[BadLine, ...] = ()
    skip_counts: Mapping[str, int] = attrs.field(factory=dict)
    lines: int = 0
    seconds: float = 0.0

    @property
    def skipped_total(self) -> int:
        """How many lines were skipped, all reasons together."""
        return sum(self.skip_counts.values())


@attrs.frozen(kw_only=True)
class MergeResult:
    """What :meth:`FindDb.merge_from` did.

    ``added``: entries for solvers the user record lacked; ``replaced``: entries whose faster
    time won; ``kept``: source entries not faster than the user's; ``keys``: records changed;
    ``perf_added``: PerfDb entries copied (SQLite sources only); ``skipped``: bad text lines.
    """

    keys: int
    added: int
    replaced: int
    kept: int
    perf_added: int = 0
    skipped: tuple[BadLine, ...] = ()


_COLUMNS = "solver, algorithm, time_ms, workspace_size, spread_ms, count, perf_config, provenance"


def _entry_from_row(row: Sequence[Any]) -> FindDbEntry:
    solver, algorithm, time_ms, workspace, spread, count, perf_config, prov = row
    return FindDbEntry(
        solver=solver,
        algorithm=algorithm,
        time_ms=time_ms,
        workspace_size=workspace,
        spread_ms=spread,
        count=count,
        perf_config=perf_config,
        provenance=provenance_from_json(prov),
    )


def _insert(conn: sqlite3.Connection, key: str, entries: Sequence[Any], device: str) -> None:
    """Insert ``entries`` of ``key`` in order; validates each one as it goes."""
    for rank, entry in enumerate(entries):
        if not isinstance(entry, FindDbEntry):
            raise InvalidArgumentError(
                "expected a FindDbEntry", field=f"entries[{rank}]", value=type(entry).__name__
            )
        prov = complete_provenance(entry.provenance, device)
        conn.execute(
            f"INSERT INTO find_db (key, rank, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                rank,
                entry.solver,
                entry.algorithm,
                entry.time_ms,
                entry.workspace_size,
                entry.spread_ms,
                entry.count,
                entry.perf_config,
                provenance_json(prov),
            ),
        )


def _group(rows: Iterator[Sequence[Any]], layer: str) -> Iterator[FindDbRecord]:
    key: str | None = None
    entries: list[FindDbEntry] = []
    for row in rows:
        if row[0] != key:
            if key is not None:
                yield FindDbRecord(key=key, layer=layer, entries=tuple(entries))
            key, entries = row[0], []
        entries.append(_entry_from_row(row[1:]))
    if key is not None:
        yield FindDbRecord(key=key, layer=layer, entries=tuple(entries))


_TEXT_SELECT = (
    "SELECT t.key, t.body, i.provenance FROM find_db_text t JOIN imports i ON i.id = t.import_id"
)


def _text_rows(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Rows of the imported-text tables; none in a file made before they existed."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise


def _text_record(key: str, body: str, prov: str, layer: str) -> FindDbRecord:
    provenance = provenance_from_json(prov)
    entries = tuple(
        FindDbEntry(
            solver=t.solver,
            algorithm=t.algorithm,
            time_ms=t.time_ms,
            workspace_size=t.workspace_size,
            provenance=provenance,
        )
        for t in parse_body(body, direction_letter(key))
    )
    return FindDbRecord(key=key, layer=layer, entries=entries)


def _format(record: FindDbRecord) -> str:
    return format_line(
        record.key,
        (
            TextEntry(
                solver=e.solver,
                time_ms=e.time_ms,
                workspace_size=e.workspace_size,
                algorithm=e.algorithm,
            )
            for e in record.entries
        ),
    )


def clean_text_rows(
    conn: sqlite3.Connection,
    key: str | None,
    solver: str | None,
    keep: set[str] | None,
    everything: bool,
) -> int:
    """:meth:`FindDb.clean` on imported records: whole rows go, or the solvers' entries leave
    a record that is rewritten as measured rows; returns the entries deleted."""
    where, params = ("WHERE t.key = ?", (key,)) if key is not None else ("", ())
    deleted = 0
    for k, body, prov in _text_rows(conn, f"{_TEXT_SELECT} {where}", params):
        record = _text_record(k, body, prov, "user")
        gone = [
            e
            for e in record.entries
            if everything
            or ((solver is None or e.solver == solver) and (keep is None or e.solver not in keep))
        ]
        if not gone:
            continue
        deleted += len(gone)
        conn.execute("DELETE FROM find_db_text WHERE key = ?", (k,))
        rest = [e for e in record.entries if e not in gone]
        if rest:
            _insert(conn, k, rest, "")
    return deleted


def _fastest_first(entries: Collection[FindDbEntry]) -> list[FindDbEntry]:
    # Stable, documented order: time, then solver name, so every rank sorts alike.
    return sorted(entries, key=lambda e: (e.time_ms, e.solver))


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
        algorithm names for the key's direction. A path is written atomically (a temporary
        file renamed over it); a text stream is written as is.
        """
        if hasattr(dest, "write"):  # an open text stream
            return self._write_lines(dest, layer)  # type: ignore[arg-type]
        path = Path(dest)  # type: ignore[arg-type]
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
            measured = ((r.key, _format(r)) for r in _group(rows, layer))
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
            lines = [_format(r) for r in self.items(layer)]
            for line in lines:
                out.write(line + "\n")
            return len(lines)
        return self._read(layer, read, 0)

    def merge_from(self, source: Path | str, *, skip_bad_lines: bool = False) -> MergeResult:
        """Merge another database into the user layer, in one transaction.

        ``source`` is a miocore SQLite database (either layer's file, any device) or a MIOpen
        text FindDb. **Rule**: per key, the union of entries by solver; where both have a
        solver, the faster ``time_ms`` wins (a tie keeps the user's entry); the merged record
        is re-sorted fastest first (ties by solver name). From a SQLite source, PerfDb
        entries the user layer lacks are copied too (the user's own tuning is kept).
        """
        path = Path(source)
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
                    elif entry.time_ms < old.time_ms:
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


def _read_sqlite(
    path: Path,
) -> tuple[dict[str, list[FindDbEntry]], list[tuple[str, str, str, str]]]:
    conn = open_readonly(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "find_db" not in tables:
            raise DatabaseError(
                "not a miocore database (no find_db table)", field="source", value=str(path)
            )
        rows = conn.execute(f"SELECT key, {_COLUMNS} FROM find_db ORDER BY key, rank").fetchall()
        text = _text_rows(conn, _TEXT_SELECT)
        perf = (
            conn.execute("SELECT key, solver, perf_config, provenance FROM perf_db").fetchall()
            if "perf_db" in tables
            else []
        )
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"cannot read: {exc}", field="source", value=str(path)) from exc
    finally:
        conn.close()
    records: dict[str, list[FindDbEntry]] = {}
    for record in _group(iter(rows), "merge"):
        check_key(record.key, field=f"{path.name} key")
        records[record.key] = list(record.entries)
    for key, body, prov in text:
        if key not in records:
            check_key(key, field=f"{path.name} key")
            records[key] = list(_text_record(key, body, prov, "merge").entries)
    for key, solver, _config, _prov in perf:
        check_key(key, field=f"{path.name} perf key")
        check_solver(solver)
    return records, perf


def _clean(
    conn: sqlite3.Connection,
    table: str,
    key: str | None,
    solver: str | None,
    keep: set[str] | None,
) -> int:
    where: list[str] = []
    params: list[Any] = []
    if key is not None:
        where.append("key = ?")
        params.append(key)
    if solver is not None:
        where.append("solver = ?")
        params.append(solver)
    sql = f"DELETE FROM {table}"
    if keep is None:
        if where:
            sql += " WHERE " + " AND ".join(where)
        return conn.execute(sql, params).rowcount
    # Stale solvers: find the distinct names first, so the IN list stays short.
    present = {r[0] for r in conn.execute(f"SELECT DISTINCT solver FROM {table}")}
    total = 0
    for name in sorted(present - keep):
        clause = [*where, "solver = ?"]
        total += conn.execute(f"{sql} WHERE {' AND '.join(clause)}", [*params, name]).rowcount
    return total
