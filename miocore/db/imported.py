"""Records imported from MIOpen's text FindDb: streamed in, kept as text, exported byte for byte.

An import reads the file line by line (``.bz2`` and ``.gz`` as well) inside one transaction, so
memory stays bounded whatever the file's size. Each good line is stored as its key and the text
after ``=``, unchanged, in the ``find_db_text`` table with one provenance row per import: about
the size of the text, and an export gives back the same bytes. Lookups parse a record's text
when it is read. A line that cannot be imported is skipped and counted by reason (the first
examples kept); ``strict`` makes any such line abort the whole import.
"""

from __future__ import annotations

import bz2
import gzip
import io
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from miocore.db.keycheck import key_is_valid
from miocore.db.text import (
    BadLine,
    TextEntry,
    direction_letter,
    format_line,
    parse_body,
    parse_line,
)
from miocore.values import define, field, frozen

#: How many example lines a skip report keeps per reason.
EXAMPLES_PER_REASON = 3

# MIOpen names its shipped databases <device>.<backend>.fdb.txt, e.g. gfx942130.HIP.fdb.txt.
_DEVICE_FILE_RE = re.compile(
    r"^(?P<device>[A-Za-z0-9_][A-Za-z0-9_\-]*?)\.(?:HIP|OpenCL|hip|opencl)\.fdb\.txt"
    r"(?:\.(?:bz2|gz))?$"
)

_ALGOS = ("Direct", "Winograd", "ImplicitGEMM", "FFT", "GEMM")
_PREFIX = {"F": "Fwd", "B": "BwdData", "W": "BwdWeights"}
_TIME = r"[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
_SOLVER = r"[^\s=:;,]+"


def _body_re(letter: str) -> re.Pattern[str]:
    algo = f"miopenConvolution{_PREFIX[letter]}Algo(?:{'|'.join(_ALGOS)})"
    old = rf"{algo}:{_SOLVER},{_TIME},[0-9]+,{algo}(?:,[^;]*)?"
    new = rf"{_SOLVER}:{_TIME},[0-9]+,{algo}(?:,[^;]*)?"
    item = rf"(?:{old}|{new})"
    return re.compile(rf"^{item}(?:;{item})*$")


_BODY_RE = {letter: _body_re(letter) for letter in _PREFIX}


def device_from_filename(name: str) -> str | None:
    """The device of a MIOpen database file name (``gfx942130.HIP.fdb.txt`` -> ``gfx942130``)."""
    match = _DEVICE_FILE_RE.match(Path(name).name)
    return match.group("device") if match else None


def body_is_valid(body: str, letter: str) -> bool:
    """True when ``body`` is certainly good record text for a key of direction ``letter``
    (MIOpen's algorithm names for that direction, no solver twice); False: ask the parser."""
    if not _BODY_RE[letter].match(body):
        return False
    if ";" not in body:
        return True
    names = [
        item.partition(":")[2].partition(",")[0]
        if item.startswith("miopenConvolution")
        else item.partition(":")[0]
        for item in body.split(";")
    ]
    return len(set(names)) == len(names)


def skip_reason(error: str) -> str:
    """A short reason class for a skipped line (what the skip report counts by)."""
    if "unknown data type token" in error:
        token = re.search(r"token '([^']*)'", error)
        return f"data type {token.group(1) if token else '?'} not supported"
    if error.startswith("bad key"):
        if any(s in error for s in ("spatial size", "channels", "groups", "divisible")):
            return "geometry that cannot exist"
        return "malformed key"
    if "unknown algorithm" in error or "another direction" in error:
        return "unknown algorithm"
    if "appears twice" in error:
        return "solver listed twice"
    if "missing '='" in error:
        return "not a record line"
    return "malformed entries"


@define
class SkipReport:
    """Lines skipped by an import: counts per reason and the first examples of each."""

    counts: Counter[str] = field(factory=Counter)
    examples: list[BadLine] = field(factory=list)

    def add(self, line: int, error: str, text: str) -> None:
        reason = skip_reason(error)
        self.counts[reason] += 1
        if self.counts[reason] <= EXAMPLES_PER_REASON:
            self.examples.append(BadLine(line=line, reason=f"{reason}: {error}", text=text))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def open_text(path: Path) -> IO[str]:
    """A text stream of ``path``, decompressing ``.bz2`` and ``.gz``."""
    if path.suffix == ".bz2":
        return io.TextIOWrapper(bz2.open(path, "rb"), encoding="utf-8")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


_UPSERT = (
    "INSERT INTO find_db_text (key, body, import_id) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET body = excluded.body, import_id = excluded.import_id "
    "WHERE find_db_text.import_id != excluded.import_id"
)


@frozen
class StreamResult:
    """What :func:`stream_import` wrote."""

    import_id: int
    lines: int
    records: int
    entries: int
    seconds: float


def stream_import(
    conn: sqlite3.Connection, lines: Iterator[str], provenance_json: str, skips: SkipReport
) -> StreamResult:
    """Write every good line of ``lines`` into ``find_db_text`` (inside the caller's
    transaction); bad lines go to ``skips``. A key that appears twice is merged (the faster
    time of each solver wins); an imported key replaces the user's measured record of it."""
    started = time.perf_counter()
    import_id = conn.execute(
        "INSERT INTO imports (provenance) VALUES (?)", (provenance_json,)
    ).lastrowid
    assert import_id is not None
    had_measured = conn.execute("SELECT 1 FROM find_db LIMIT 1").fetchone() is not None
    records = entries = number = 0
    execute = conn.execute
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text[0] == "#":
            continue
        key, sep, body = text.partition("=")
        if not (sep and key_is_valid(key) and body_is_valid(body, direction_letter(key))):
            try:
                key, parsed = parse_line(text)
            except ValueError as exc:
                skips.add(number, str(exc), text)
                continue
            body = format_line(key, parsed).partition("=")[2]  # MIOpen's names, one form
        if execute(_UPSERT, (key, body, import_id)).rowcount == 0:
            body = _merge_duplicate(conn, key, body)
            execute("UPDATE find_db_text SET body = ? WHERE key = ?", (body, key))
            records -= 1
        records += 1
        entries += body.count(";") + 1
    if had_measured:
        execute(
            "DELETE FROM find_db WHERE key IN (SELECT key FROM find_db_text WHERE import_id = ?)",
            (import_id,),
        )
    return StreamResult(import_id, number, records, entries, time.perf_counter() - started)


def _merge_duplicate(conn: sqlite3.Connection, key: str, body: str) -> str:
    letter = direction_letter(key)
    (old_body,) = conn.execute("SELECT body FROM find_db_text WHERE key = ?", (key,)).fetchone()
    best: dict[str, TextEntry] = {e.solver: e for e in parse_body(old_body, letter)}
    for entry in parse_body(body, letter):
        if entry.solver not in best or entry.time_ms < best[entry.solver].time_ms:
            best[entry.solver] = entry
    merged = sorted(best.values(), key=lambda e: (e.time_ms, e.solver))
    return format_line(key, merged).partition("=")[2]
