"""MIOpen's text FindDb format (``.fdb.txt``): one record a line.

::

    KEY=solver:time,workspace,algorithm;solver2:time,workspace,algorithm

``time`` is in milliseconds, ``workspace`` in bytes and ``algorithm`` is MIOpen's name
(``miopenConvolutionFwdAlgoGEMM``). Reading also accepts miocore's own algorithm values
(``gemm``), ignores fields after the third (some MIOpen versions append more), blank lines and
lines starting with ``#``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

from miocore.db._common import check_key, check_solver, parse_algorithm
from miocore.errors import DatabaseError, MiocoreError
from miocore.values import frozen


@frozen(kw_only=True)
class TextEntry:
    """One ``solver:time,workspace,algorithm`` item of a text record."""

    solver: str
    time_ms: float
    workspace_size: int
    algorithm: str  # miocore's Algorithm value


@frozen(kw_only=True)
class BadLine:
    """A line that could not be read: its number (from 1), why, and its text."""

    line: int
    reason: str
    text: str


class TextFormatError(DatabaseError):
    """A text FindDb has bad lines; ``bad_lines`` lists them all, the message names the first."""

    def __init__(self, source: str, bad_lines: Sequence[BadLine]) -> None:
        self.source = source
        self.bad_lines = tuple(bad_lines)
        first = self.bad_lines[0]
        more = f" ({len(self.bad_lines) - 1} more bad lines)" if len(self.bad_lines) > 1 else ""
        super().__init__(
            f"{source}: {first.reason}: {_shorten(first.text)!r}{more}; nothing was imported "
            "(without strict / --strict the good lines are imported and these reported)",
            field="line",
            value=first.line,
        )

    @property
    def line(self) -> int:
        """Number of the first bad line (from 1)."""
        return self.bad_lines[0].line


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@functools.lru_cache(maxsize=64)
def _miopen_name(algorithm: str, letter: str) -> str:
    from miocore.problem.conv import Direction
    from miocore.solver.interface import Algorithm

    return Algorithm(algorithm).miopen_name(Direction.parse(letter))


def direction_letter(key: str) -> str:
    """The direction letter of a valid key (``F``, ``B`` or ``W``)."""
    return _direction_letter(key)


def _direction_letter(key: str) -> str:
    # The letter before an optional "_g<groups>" suffix: what ConvProblem.from_key(key).direction
    # reads, without building a problem per line (keys in a database were validated on write).
    return key.rpartition("_g")[0][-1] if "_g" in key else key[-1]


def format_line(key: str, entries: Iterable[TextEntry]) -> str:
    """One text record (no newline); algorithms written as MIOpen's names for the key."""
    letter = _direction_letter(key)
    items = [
        f"{e.solver}:{e.time_ms!r},{e.workspace_size},{_miopen_name(e.algorithm, letter)}"
        for e in entries
    ]
    return f"{key}={';'.join(items)}"


def parse_line(text: str) -> tuple[str, list[TextEntry]]:
    """Parse one record line; raises ``ValueError`` saying what is wrong."""
    from miocore.problem.conv import ConvProblem

    key, sep, body = text.partition("=")
    key = key.strip()
    if not sep:
        raise ValueError("missing '=' between key and entries")
    try:
        check_key(key)
        ConvProblem.from_key(key)
    except MiocoreError as exc:
        raise ValueError(f"bad key: {exc}") from None
    return key, parse_body(body, _direction_letter(key))


def parse_body(body: str, letter: str) -> list[TextEntry]:
    """The entries of a record's text after ``=``, for a key of direction ``letter``.

    Two item forms: ``solver:time,workspace,algorithm[,...]`` and MIOpen's older
    ``algorithm:solver,time,workspace,algorithm[,...]`` (its kernel-cache field ignored).
    """
    from miocore.problem.conv import Direction
    from miocore.solver.interface import Algorithm

    direction = Direction.parse(letter)
    if not body.strip():
        raise ValueError("no entries after '='")
    entries: list[TextEntry] = []
    seen: set[str] = set()
    for n, item in enumerate(body.strip().split(";"), start=1):
        solver, sep, values = item.partition(":")
        solver = solver.strip()
        if not sep:
            raise ValueError(f"entry {n}: missing ':' after the solver name")
        fields = [f.strip() for f in values.split(",")]
        if solver.startswith("miopenConvolution") and len(fields) >= 4:
            solver, fields = fields[0], fields[1:]  # the older form: the solver comes first
        try:
            check_solver(solver)
        except MiocoreError as exc:
            raise ValueError(f"entry {n}: {exc}") from None
        if solver in seen:
            raise ValueError(f"entry {n}: solver {solver!r} appears twice")
        seen.add(solver)
        if len(fields) < 3:
            raise ValueError(f"entry {n} ({solver}): expected time,workspace,algorithm")
        try:
            time_ms = float(fields[0])
        except ValueError:
            raise ValueError(f"entry {n} ({solver}): bad time {fields[0]!r}") from None
        if not math.isfinite(time_ms) or time_ms < 0:
            raise ValueError(f"entry {n} ({solver}): time must be finite and >= 0: {fields[0]!r}")
        try:
            workspace = int(fields[1])
        except ValueError:
            raise ValueError(f"entry {n} ({solver}): bad workspace {fields[1]!r}") from None
        if workspace < 0:
            raise ValueError(f"entry {n} ({solver}): workspace must be >= 0: {fields[1]!r}")
        try:
            algorithm = Algorithm(parse_algorithm(fields[2]))
        except MiocoreError:
            raise ValueError(f"entry {n} ({solver}): unknown algorithm {fields[2]!r}") from None
        if fields[2].startswith("miopen") and fields[2] != algorithm.miopen_name(direction):
            raise ValueError(
                f"entry {n} ({solver}): algorithm {fields[2]!r} is for another direction than "
                f"the key's {direction.letter} ({algorithm.miopen_name(direction)})"
            )
        entries.append(
            TextEntry(
                solver=solver, time_ms=time_ms, workspace_size=workspace, algorithm=algorithm.value
            )
        )
    return entries


def parse_lines(
    lines: Iterable[str], *, source: str = "<text>", skip_bad_lines: bool = False
) -> tuple[list[tuple[int, str, list[TextEntry]]], list[BadLine]]:
    """Parse every line: ``([(line number, key, entries), ...], [bad lines])``.

    Without ``skip_bad_lines`` any bad line raises :class:`TextFormatError` (listing all).
    """
    good: list[tuple[int, str, list[TextEntry]]] = []
    bad: list[BadLine] = []
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            key, entries = parse_line(text)
        except ValueError as exc:
            bad.append(BadLine(line=number, reason=str(exc), text=text))
            continue
        good.append((number, key, entries))
    if bad and not skip_bad_lines:
        raise TextFormatError(source, bad)
    return good, bad
