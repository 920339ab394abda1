"""FindDb's values and rows: entries and records, and the SQL helpers that read and write them
(measured rows in ``find_db``, imported text in ``find_db_text``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from miocore.db._common import (
    check_key,
    check_nonneg_float,
    check_nonneg_int,
    check_solver,
    complete_provenance,
    freeze_provenance,
    parse_algorithm,
    provenance_from_json,
    provenance_json,
    recorded_revision,
)
from miocore.db._sqlite import open_readonly
from miocore.errors import DatabaseError, InvalidArgumentError
from miocore.values import field, frozen

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


@frozen(kw_only=True)
class FindDbEntry:
    """One solver's measured result for one problem.

    ``time_ms`` is the median of ``count`` timed runs and ``spread_ms`` their spread (e.g. the
    inter-quartile range); ``count == 0`` means the time was imported without statistics.
    ``algorithm`` accepts an :class:`~miocore.solver.Algorithm`, its value or a MIOpen name and
    is stored as the value. ``provenance`` says who measured it: miocore version, the solver's
    plugin distribution and version, device, ``written_at`` (ISO UTC); int/float values are
    turned into text.
    """

    solver: str = field(converter=check_solver)
    algorithm: str = field(converter=_algorithm)
    time_ms: float = field(converter=lambda v: check_nonneg_float(v, "time_ms"))
    workspace_size: int = field(converter=lambda v: check_nonneg_int(v, "workspace_size"))
    spread_ms: float | None = field(default=None, converter=_optional_spread)
    count: int = field(default=0, converter=lambda v: check_nonneg_int(v, "count"))
    perf_config: str | None = field(default=None, converter=_optional_perf_config)
    provenance: Mapping[str, str] = field(factory=dict, converter=freeze_provenance, hash=False)


@frozen(kw_only=True)
class FindDbRecord:
    """Every entry of one key in one layer (``"user"`` or ``"system"``), fastest first."""

    key: str
    layer: str
    entries: tuple[FindDbEntry, ...]

    @property
    def solvers(self) -> list[str]:
        """Solver names in the record's order."""
        return [e.solver for e in self.entries]


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
    # The text format's module loads with the first imported record (a hit of measured
    # records never needs it).
    from miocore.db.text import direction_letter, parse_body

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
    from miocore.db.text import TextEntry, format_line

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


def _supersedes(new: FindDbEntry, old: FindDbEntry) -> bool:
    """The merge rule between two entries of one solver: the newer solver revision's, else
    the faster (a tie keeps ``old``)."""
    new_rev, old_rev = recorded_revision(new.provenance), recorded_revision(old.provenance)
    if new_rev != old_rev:
        return new_rev > old_rev
    return new.time_ms < old.time_ms


def _fastest_first(entries: Collection[FindDbEntry]) -> list[FindDbEntry]:
    # Stable, documented order: time, then solver name, so every rank sorts alike.
    return sorted(entries, key=lambda e: (e.time_ms, e.solver))


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
