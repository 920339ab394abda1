"""PerfDb: the tuned performance configuration of each (problem, tunable solver), per device.

It lives in the same files as the FindDb of the device (its own table), with the same layers:
a writable user layer over a read-only system layer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator, Mapping

from miocore.db._common import (
    LayeredDb,
    check_key,
    check_solver,
    complete_provenance,
    freeze_provenance,
    provenance_from_json,
    provenance_json,
)
from miocore.db.records import _clean
from miocore.errors import InvalidArgumentError
from miocore.values import field, frozen


@frozen(kw_only=True)
class PerfDbEntry:
    """A tuned configuration: ``perf_config`` is ``PerfConfig.to_string()`` text."""

    key: str
    solver: str
    perf_config: str
    provenance: Mapping[str, str] = field(converter=freeze_provenance, hash=False)
    layer: str


class PerfDb(LayeredDb):
    """The PerfDb of one device; same locations and files as :class:`~miocore.db.FindDb`.

    Safe to share between threads, and to use from many processes at once.
    """

    def get(self, key: str, solver: str) -> PerfDbEntry | None:
        """The entry of (``key``, ``solver``): user layer first, then system; None if neither."""
        for layer in ("user", "system"):

            def read(conn: sqlite3.Connection, layer: str = layer) -> PerfDbEntry | None:
                row = conn.execute(
                    "SELECT perf_config, provenance FROM perf_db WHERE key = ? AND solver = ?",
                    (key, solver),
                ).fetchone()
                if row is None:
                    return None
                return PerfDbEntry(
                    key=key,
                    solver=solver,
                    perf_config=row[0],
                    provenance=provenance_from_json(row[1]),
                    layer=layer,
                )

            found = self._read_memory(read, None) if layer == "user" else None
            if found is None:
                found = self._read(layer, read, None)
            if found is not None:
                return found
        return None

    def put(self, key: str, solver: str, perf_config: str, provenance: Mapping[str, str]) -> None:
        """Store (or replace) the user entry of (``key``, ``solver``), atomically.

        Missing provenance fields (miocore version, device, written_at) are filled in.
        """
        check_key(key)
        check_solver(solver)
        if not isinstance(perf_config, str) or not perf_config:
            raise InvalidArgumentError(
                "must be a non-empty str (PerfConfig.to_string())",
                field="perf_config",
                value=perf_config,
            )
        prov = provenance_json(complete_provenance(freeze_provenance(provenance), self.device))
        self._user.write(
            lambda conn: conn.execute(
                "INSERT OR REPLACE INTO perf_db (key, solver, perf_config, provenance) "
                "VALUES (?, ?, ?, ?)",
                (key, solver, perf_config, prov),
            )
        )

    def delete(self, key: str, solver: str | None = None) -> int:
        """Delete user entries of ``key`` (one solver's, or all); returns rows deleted."""
        return self._user.write(
            lambda conn: _clean(conn, "perf_db", key, solver, None), create=False, default=0
        )

    def clean(
        self,
        *,
        key: str | None = None,
        solver: str | None = None,
        all: bool = False,
        keep_solvers: Collection[str] | None = None,
    ) -> int:
        """Delete user entries by the same filters as :meth:`FindDb.clean`; returns how many."""
        filters = key is not None or solver is not None or keep_solvers is not None
        if all == filters:
            raise InvalidArgumentError(
                "give key/solver/keep_solvers, or all=True alone", field="all", value=all
            )
        keep = None if keep_solvers is None else set(keep_solvers)
        return self._user.write(
            lambda conn: _clean(conn, "perf_db", key, solver, keep), create=False, default=0
        )

    def items(self, layer: str = "user") -> Iterator[PerfDbEntry]:
        """Every entry of one layer, by key then solver."""

        def read(conn: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
            return conn.execute(
                "SELECT key, solver, perf_config, provenance FROM perf_db ORDER BY key, solver"
            ).fetchall()

        rows = self._read(layer, read, [])
        if layer == "user" and self._user.degraded:
            merged = {(r[0], r[1]): r for r in rows}
            merged.update(((r[0], r[1]), r) for r in self._read_memory(read, []))
            rows = [merged[k] for k in sorted(merged)]
        return iter(
            [
                PerfDbEntry(
                    key=key,
                    solver=solver,
                    perf_config=config,
                    provenance=provenance_from_json(prov),
                    layer=layer,
                )
                for key, solver, config, prov in rows
            ]
        )
