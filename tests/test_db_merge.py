"""FindDb.merge_from: the merge rule (newer solver revision, else faster time), text and
SQLite sources, refused files."""

from __future__ import annotations

from pathlib import Path

import pytest
from db_fixtures import (
    BRIEF_LINE,
    DEVICE,
    entry,
    key,
    query,
    set_version,
)

from miocore.db import SCHEMA_VERSION, FindDb, PerfDb, TextFormatError
from miocore.db._common import SOLVER_REVISION
from miocore.errors import DatabaseError

# -- merge ---------------------------------------------------------------------------------------


def test_merge_keeps_the_faster_time_per_solver(db: FindDb, tmp_path: Path) -> None:
    k, k2, k3 = key(), key(n=2), key(n=3)
    db.write(k, [entry("a.one", 2.0), entry("b.two", 3.0), entry("c.three", 5.0)])
    db.write(k3, [entry("only.user", 1.0)])
    with FindDb(DEVICE, user_dir=tmp_path / "other") as other:
        other.write(
            k,
            [
                entry("b.two", 1.0, "gemm", count=7),  # faster: replaces
                entry("c.three", 6.0),  # slower: kept out
                entry("a.one", 2.0, "fft"),  # tie: the user's entry stays
                entry("d.four", 4.0),  # new: added
            ],
        )
        other.write(k2, [entry("x.x", 1.0)])
        source = other.user_path
    PerfDb(DEVICE, user_dir=tmp_path / "other").put(k, "t.s", '{"v":1}', {})
    PerfDb(DEVICE, user_dir=db.user_path.parent).put(key(n=9), "t.s", '{"v":9}', {})
    result = db.merge_from(source)
    assert (result.keys, result.added, result.replaced, result.kept) == (2, 2, 1, 2)
    assert result.perf_added == 1
    rec = db.records(k)[0]
    assert [(e.solver, e.time_ms, e.algorithm) for e in rec.entries] == [
        ("b.two", 1.0, "gemm"),
        ("a.one", 2.0, "direct"),
        ("d.four", 4.0, "direct"),
        ("c.three", 5.0, "direct"),
    ]
    assert rec.entries[0].count == 7  # the winning entry keeps its own stats and provenance
    assert db.records(k2)[0].solvers == ["x.x"]
    assert db.records(k3)[0].solvers == ["only.user"]
    assert PerfDb(DEVICE, user_dir=db.user_path.parent).get(k, "t.s") is not None
    # Merging the same source again changes nothing.
    again = db.merge_from(source)
    assert (again.keys, again.added, again.replaced) == (0, 0, 0)


def test_a_newer_solver_revision_replaces_the_older_entry_slower_or_not(
    db: FindDb, tmp_path: Path
) -> None:
    """A refresh's entries of a solver's new revision replace the old revision's, slower or
    not (the old kernels' times no longer describe the solver); an older revision's never
    replaces a newer one, however fast; within one revision the faster wins as before."""
    k = key()

    def rev(n: int) -> dict[str, str]:
        return {SOLVER_REVISION: str(n)} if n else {}

    db.write(
        k,
        [
            entry("a.one", 1.0, provenance=rev(3)),
            entry("b.two", 2.0, provenance=rev(8)),
            entry("c.three", 3.0, provenance=rev(2)),
            entry("d.four", 4.0),  # names no revision: revision 0
        ],
    )
    with FindDb(DEVICE, user_dir=tmp_path / "other") as other:
        other.write(
            k,
            [
                entry("a.one", 1.5, "gemm", provenance=rev(4)),  # newer, slower: replaces
                entry("b.two", 0.5, "fft", provenance=rev(7)),  # older, faster: kept out
                entry("c.three", 2.5, "gemm", provenance=rev(2)),  # same, faster: replaces
                entry("d.four", 5.0, "gemm", provenance=rev(1)),  # newer than none: replaces
            ],
        )
        source = other.user_path
    result = db.merge_from(source)
    assert (result.keys, result.added, result.replaced, result.kept) == (1, 0, 3, 1)
    got = {
        e.solver: (e.time_ms, e.algorithm, e.provenance.get(SOLVER_REVISION))
        for e in db.records(k)[0].entries
    }
    assert got == {
        "a.one": (1.5, "gemm", "4"),
        "b.two": (2.0, "direct", "8"),
        "c.three": (2.5, "gemm", "2"),
        "d.four": (5.0, "gemm", "1"),
    }
    assert db.records(k)[0].solvers == ["a.one", "b.two", "c.three", "d.four"]
    again = db.merge_from(source)
    assert (again.keys, again.replaced) == (0, 0)


def test_merge_from_text(db: FindDb, tmp_path: Path) -> None:
    k = key()
    db.write(k, [entry("gemm.im2col", 2.0, "gemm"), entry("z.slow", 9.0)])
    src = tmp_path / "in.txt"
    src.write_text(BRIEF_LINE + "\n")
    result = db.merge_from(src)
    assert (result.added, result.replaced, result.kept) == (1, 1, 0)
    assert [(e.solver, e.time_ms) for e in db.records(k)[0].entries] == [
        ("gemm.im2col", 1.25),
        ("direct.naive", 3.5),
        ("z.slow", 9.0),
    ]
    src.write_text("garbage\n")
    with pytest.raises(TextFormatError):
        db.merge_from(src)
    with pytest.raises(DatabaseError, match="no such file"):
        db.merge_from(tmp_path / "missing.txt")


def test_merge_refuses_a_foreign_or_newer_sqlite_file(db: FindDb, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    query(foreign, "CREATE TABLE t (x)")
    with pytest.raises(DatabaseError, match="not a miocore database"):
        db.merge_from(foreign)
    with FindDb(DEVICE, user_dir=tmp_path / "new") as newer:
        newer.write(key(), [entry("a.one", 1.0)])
        path = newer.user_path
    set_version(path, SCHEMA_VERSION + 1)
    with pytest.raises(DatabaseError, match="newer"):
        db.merge_from(path)
    assert db.keys() == []
