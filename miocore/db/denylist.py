"""The deny list: solvers find, immediate mode and FindDb hits must not use, per device.

Like cuDNN's errata file, one line per entry, in a text file a user can read and edit::

    # miocore deny list: solver | versions | key pattern | reason | when
    fft.overlap_save | <0.2 | 1-1-5-2x2-* | output 1e5 times the reference | 2026-11-24T15:00:00Z
    winograd.gpu_f4x3 | * | *-FP16-F | relative error 1.2e-2 over the bound 2.0e-3 | 2026-11-24

Fields are separated by ``|`` (so none may contain one):

* **solver**: the solver's name, as ``miocore solvers`` prints it;
* **versions**: the plugin versions it applies to: ``*`` (all), or comparisons joined by
  commas, each one of ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` and a dotted release
  (``>=0.1,<0.2.1``); a pre-release or local suffix is ignored when comparing;
* **key pattern**: a shell-style pattern (``*``, ``?``, ``[...]``) over the problem's MIOpen
  FindDb key (``*``: every problem);
* **reason**: free text;
* **when**: an ISO 8601 date or UTC time the entry was made.

Blank lines and lines starting with ``#`` are ignored. A line that does not parse is reported
(file and line number, :attr:`DenyList.problems`, and a warning in the log) and skipped: a
damaged deny list never stops a convolution.

Two layers per device, as the databases have: the **user** list
``<user db folder>/<device>.deny.txt`` (written by find when a candidate is proven wrong, and by
``miocore db deny add/remove``) and the **system** list ``<system db folder>/<device>.deny.txt``
shipped with the package (read only). An entry in either denies.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from miocore.db._common import check_device, check_solver, default_system_dir, default_user_dir
from miocore.errors import InvalidArgumentError

if TYPE_CHECKING:
    from miocore.db.deny_entries import DenyEntry, DenyListProblem

log = logging.getLogger("miocore.denylist")

SUFFIX = ".deny.txt"


class DenyList:
    """The user and system deny lists of one device (module docstring for the format).

    Files are re-read when they change (one ``stat`` per file per call), so an edit by hand
    or another process takes effect in a running one.
    """

    def __init__(
        self,
        device: str,
        *,
        user_dir: str | os.PathLike[str] | None = None,
        system_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.device = check_device(device)
        self.user_path = Path(user_dir or default_user_dir()) / f"{device}{SUFFIX}"
        self.system_path = Path(system_dir or default_system_dir()) / f"{device}{SUFFIX}"
        self._cache: dict[Path, tuple[Any, list[DenyEntry], list[DenyListProblem]]] = {}

    def __repr__(self) -> str:
        return f"DenyList({self.device!r}, user={self.user_path}, system={self.system_path})"

    def _layer(self, path: Path) -> tuple[list[DenyEntry], list[DenyListProblem]]:
        try:
            st = path.stat()
            stamp: Any = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        cached = self._cache.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1], cached[2]
        entries: list[DenyEntry] = []
        problems: list[DenyListProblem] = []
        if stamp is not None:  # the entries' module loads only where a file exists
            from miocore.db.deny_entries import parse_file

            entries, problems = parse_file(path)
        for problem in problems:
            log.warning("deny list line skipped: %s", problem)
        self._cache[path] = (stamp, entries, problems)
        return entries, problems

    def entries(self) -> list[tuple[str, DenyEntry]]:
        """Every entry as ``(layer, entry)``, user layer first."""
        return [("user", e) for e in self._layer(self.user_path)[0]] + [
            ("system", e) for e in self._layer(self.system_path)[0]
        ]

    @property
    def problems(self) -> list[DenyListProblem]:
        """Lines of either file that were skipped (file, line number, why)."""
        return self._layer(self.user_path)[1] + self._layer(self.system_path)[1]

    def match(
        self, solver: str, version: str | None = None, key: str | None = None
    ) -> tuple[str, DenyEntry] | None:
        """The first ``(layer, entry)`` denying ``solver`` at ``version`` on ``key``, or None."""
        for layer, entry in self.entries():
            if entry.matches(solver, version, key):
                return layer, entry
        return None

    def is_denied(self, solver: str, version: str | None = None, key: str | None = None) -> bool:
        """Whether any entry denies ``solver`` at ``version`` on ``key``."""
        return self.match(solver, version, key) is not None

    def add(self, entry: DenyEntry) -> DenyEntry:
        """Append ``entry`` to the user list (creating it with its header). One ``write`` of
        one line in append mode, so concurrent writers never interleave or lose lines."""
        from miocore.db.deny_entries import HEADER

        self.user_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.user_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if os.fstat(fd).st_size == 0:
                os.write(fd, HEADER.encode())
            os.write(fd, entry.to_line().encode("utf-8"))
        finally:
            os.close(fd)
        return entry

    def remove(
        self, solver: str, *, key_pattern: str | None = None, versions: str | None = None
    ) -> list[DenyEntry]:
        """Remove the user entries for ``solver`` (only those with this key pattern / version
        range when given); returns them. Comments and unparsable lines are kept as they are.
        The file is replaced whole (written aside, then renamed), never left half-written."""
        from miocore.db.deny_entries import DenyEntry, check_versions

        solver = check_solver(solver)
        versions = check_versions(versions) if versions is not None else None
        try:
            lines = self.user_path.read_text(encoding="utf-8").splitlines(keepends=True)
        except FileNotFoundError:
            lines = []
        kept: list[str] = []
        removed: list[DenyEntry] = []
        for line in lines:
            entry = None
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    entry = DenyEntry.from_line(line)
                except InvalidArgumentError:
                    entry = None
            if (
                entry is not None
                and entry.solver == solver
                and (key_pattern is None or entry.key_pattern == key_pattern)
                and (versions is None or entry.versions == versions)
            ):
                removed.append(entry)
            else:
                kept.append(line)
        if removed:
            tmp = self.user_path.with_name(f".{self.user_path.name}.{os.getpid()}.tmp")
            tmp.write_text("".join(kept), encoding="utf-8")
            os.replace(tmp, self.user_path)
        return removed
