"""A deny list's entries: one line each, parsed and checked (the format is in
:mod:`miocore.db.denylist`). Loaded when a deny-list file exists or an entry is made: a find
on a device without one never builds these classes."""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from pathlib import Path
from typing import Any

from miocore.db._common import check_solver
from miocore.errors import InvalidArgumentError
from miocore.values import field, frozen

HEADER = "# miocore deny list: solver | versions | key pattern | reason | when\n"
_COMPARISON = re.compile(r"^(==|!=|<=|>=|<|>)\s*(\d+(?:\.\d+)*)\S*$")
_OPS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _release(version: str) -> tuple[int, ...]:
    """``"0.2.1rc1"`` -> ``(0, 2, 1)``: the numeric release part, zero-padded when compared."""
    match = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def check_versions(text: Any, field: str = "versions") -> str:
    """Validate a version range (``*`` or comparisons joined by commas); returns it tidied."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(
            "expected '*' or comparisons like '>=0.1,<0.2'", field=field, value=text
        )
    parts = [p.strip() for p in text.split(",")]
    if parts == ["*"]:
        return "*"
    for part in parts:
        if not _COMPARISON.match(part):
            raise InvalidArgumentError(
                f"{part!r} is not a comparison: expected '*' or one of ==, !=, <, <=, >, >= "
                "and a dotted release, joined by commas (e.g. '>=0.1,<0.2')",
                field=field,
                value=text,
            )
    return ",".join(parts)


def _text_field(value: Any, field: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or "|" in value or "\n" in value or "\r" in value:
        raise InvalidArgumentError("must be one line of text without '|'", field=field, value=value)
    value = value.strip()
    if not value and not allow_empty:
        raise InvalidArgumentError("must not be empty", field=field, value=value)
    return value


def check_when(value: Any, field: str = "when") -> str:
    """Validate an ISO 8601 date or time; returns it as given (stripped)."""
    text = _text_field(value, field)
    try:
        dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(
            "expected an ISO 8601 date or time (2026-11-24 or 2026-11-24T15:00:00Z)",
            field=field,
            value=value,
        ) from None
    return text


def now_utc() -> str:
    """The current UTC time to the second, as entries record it."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@frozen(kw_only=True)
class DenyEntry:
    """One line of a deny list: this solver, in these versions, on these keys, is denied."""

    solver: str = field(converter=check_solver)
    reason: str = field(converter=lambda v: _text_field(v, "reason"))
    versions: str = field(default="*", converter=check_versions)
    key_pattern: str = field(default="*", converter=lambda v: _text_field(v, "key_pattern"))
    when: str = field(factory=now_utc, converter=check_when)

    def matches_version(self, version: str | None) -> bool:
        """Whether ``version`` is in range; an unknown version is (deny in doubt)."""
        if self.versions == "*" or not version:
            return True
        release = _release(version)
        for part in self.versions.split(","):
            op, bound = _COMPARISON.match(part).groups()  # type: ignore[union-attr]
            a, b = _pad(release, _release(bound))
            if not _OPS[op](a, b):
                return False
        return True

    def matches(self, solver: str, version: str | None, key: str | None) -> bool:
        """Whether this entry denies ``solver`` at ``version`` on the problem ``key``
        (``key`` None: on any problem, i.e. only entries for every key match)."""
        if solver != self.solver or not self.matches_version(version):
            return False
        if key is None:
            return self.key_pattern == "*"
        return fnmatch.fnmatchcase(key, self.key_pattern)

    def to_line(self) -> str:
        """The entry as one line of the text format (with its newline)."""
        return (
            f"{self.solver} | {self.versions} | {self.key_pattern} | {self.reason} | {self.when}\n"
        )

    @classmethod
    def from_line(cls, line: str) -> DenyEntry:
        """Parse one line; a bad one raises InvalidArgumentError naming the field."""
        fields = [f.strip() for f in line.rstrip("\n").split("|")]
        if len(fields) != 5:
            raise InvalidArgumentError(
                f"expected 5 fields separated by '|' (solver | versions | key pattern | reason"
                f" | when), found {len(fields)}",
                field="line",
                value=line.rstrip("\n"),
            )
        solver, versions, key_pattern, reason, when = fields
        return cls(
            solver=solver, versions=versions, key_pattern=key_pattern, reason=reason, when=when
        )


@frozen
class DenyListProblem:
    """A line of a deny-list file that was skipped, and why."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def parse_file(path: Path) -> tuple[list[DenyEntry], list[DenyListProblem]]:
    """The entries of one file and the lines skipped; a missing file is an empty list and
    an unreadable one a single problem (never an exception)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], []
    except (OSError, UnicodeDecodeError) as exc:
        return [], [DenyListProblem(path, 0, f"cannot read the file: {exc}")]
    entries: list[DenyEntry] = []
    problems: list[DenyListProblem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entries.append(DenyEntry.from_line(line))
        except InvalidArgumentError as exc:
            problems.append(DenyListProblem(path, number, str(exc)))
    return entries, problems
