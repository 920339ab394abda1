"""FindDb and MIOpen's text FindDb format: export, import (strict and lenient), bad lines,
round trips on real MIOpen keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from db_fixtures import BRIEF_LINE, entry, key

from miocore.db import FindDb, FindDbEntry, TextFormatError
from miocore.errors import DatabaseError

# -- MIOpen text format -------------------------------------------------------------------------


def test_export_writes_miopen_text_format(db: FindDb, tmp_path: Path) -> None:
    k = key()
    assert k == BRIEF_LINE.split("=")[0]
    db.write(
        k,
        [
            FindDbEntry(solver="gemm.im2col", algorithm="gemm", time_ms=1.25, workspace_size=4096),
            entry("direct.naive", 3.5),
        ],
    )
    kb = key(direction="backward_weights", n=16)
    db.write(kb, [entry("wino.x", 0.5, "winograd")])
    out = tmp_path / "out.fdb.txt"
    assert db.export_text(out) == 2
    lines = out.read_text().splitlines()
    assert BRIEF_LINE in lines
    assert f"{kb}=wino.x:0.5,0,miopenConvolutionBwdWeightsAlgoWinograd" in lines


def test_import_accepts_miopen_and_miocore_algorithm_names(db: FindDb, tmp_path: Path) -> None:
    kb = key(direction="backward_data", n=8)
    src = tmp_path / "in.txt"
    src.write_text(
        f"# a comment\n\n{BRIEF_LINE}\n{kb}=x.fft:2,10,fft;y.igemm:1e-1,0,implicit_gemm,extra\n"
    )
    result = db.import_text(src)
    assert (result.records, result.entries, result.skipped) == (2, 4, ())
    (rec,) = db.records(kb)
    assert [(e.solver, e.algorithm, e.time_ms) for e in rec.entries] == [
        ("x.fft", "fft", 2.0),
        ("y.igemm", "implicit_gemm", 0.1),
    ]
    assert rec.entries[0].count == 0 and rec.entries[0].provenance["source"] == "text-import"
    assert rec.entries[0].workspace_size == 10


def test_export_import_round_trips(db: FindDb, dirs: tuple[Path, Path], tmp_path: Path) -> None:
    records = {
        key(): [entry("a.one", 0.125, "gemm"), entry("b.two", 1 / 3, "fft")],
        key(direction="backward_data", c=32): [entry("c.three", 7.0, "winograd")],
        key(in_spatial=(8, 16, 16), filter_spatial=(3, 3, 3), pads=(1, 1, 1)): [
            entry("d.four", 2.5, "implicit_gemm")
        ],
        key(groups=64, c=64, k=64): [entry("e.five", 0.01, "direct")],
    }
    for k, entries in records.items():
        db.write(k, entries)
    text = tmp_path / "a.txt"
    db.export_text(text)
    other = FindDb("other_dev", user_dir=tmp_path / "other")
    other.import_text(text)

    def strip(d: FindDb) -> list:
        return [
            (r.key, [(e.solver, e.algorithm, e.time_ms, e.workspace_size) for e in r.entries])
            for r in d.items()
        ]

    assert strip(other) == strip(db)
    again = tmp_path / "b.txt"
    other.export_text(again)
    assert again.read_text() == text.read_text()


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("not-a-key=a.b:1,0,gemm", "bad key"),
        (f"{key()}", "missing '='"),
        (f"{key()}=", "no entries"),
        (f"{key()}=a.b:fast,0,gemm", "bad time"),
        (f"{key()}=a.b:-1,0,gemm", "time"),
        (f"{key()}=a.b:1,-4,gemm", "workspace"),
        (f"{key()}=a.b:1,4.5,gemm", "bad workspace"),
        (f"{key()}=a.b:1,0,quantum", "unknown algorithm"),
        (f"{key()}=a.b:1,0", "expected time,workspace,algorithm"),
        (f"{key()}=a.b1,0,gemm", "missing ':'"),
        (f"{key()}=a.b:1,0,gemm;a.b:2,0,gemm", "twice"),
        (f"{key()}=a.b:1,0,miopenConvolutionBwdDataAlgoGEMM", "another direction"),
        (f"{key()}=a.b:nan,0,gemm", "time"),
    ],
)
def test_strict_import_reports_the_bad_line_and_imports_nothing(
    db: FindDb, tmp_path: Path, bad: str, reason: str
) -> None:
    db.write(key(n=3), [entry("keep.me", 1.0)])
    src = tmp_path / "in.txt"
    src.write_text(f"{BRIEF_LINE}\n\n{bad}\n{key(n=5)}=ok.one:1,0,gemm\n")
    with pytest.raises(TextFormatError, match=reason) as info:
        db.import_text(src, strict=True)
    assert info.value.line == 3 and "line=3" in str(info.value)
    assert isinstance(info.value, DatabaseError)
    assert db.keys() == [key(n=3)]
    # By default the good lines go in and the bad one is reported.
    result = db.import_text(src)
    assert result.records == 2 and [b.line for b in result.skipped] == [3]
    assert result.skipped_total == 1 and reason in result.skipped[0].reason
    assert sorted(db.keys()) == sorted([key(), key(n=3), key(n=5)])


def test_import_error_lists_every_bad_line(db: FindDb, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text(f"junk\n{BRIEF_LINE}\nmore junk\n")
    with pytest.raises(TextFormatError, match="1 more bad line") as info:
        db.import_text(src, strict=True)
    assert [b.line for b in info.value.bad_lines] == [1, 3]


def test_import_replaces_records_of_its_keys(db: FindDb, tmp_path: Path) -> None:
    k = key()
    db.write(k, [entry("old.one", 0.1)])
    src = tmp_path / "in.txt"
    src.write_text(BRIEF_LINE + "\n")
    db.import_text(src)
    assert db.records(k)[0].solvers == ["gemm.im2col", "direct.naive"]


# -- real keys ------------------------------------------------------------------------------------


def test_text_round_trip_on_real_miopen_keys(db: FindDb, tmp_path: Path) -> None:
    from miocore import corpus

    if corpus.find_corpus() is None:
        pytest.skip("the problem corpus (../shared/corpus) is not here")
    rows = corpus.sample_rows(100, seed=7)
    from miocore.problem import Direction
    from miocore.solver import Algorithm

    lines = []
    for i, row in enumerate(rows):
        direction = Direction.parse(row["dir"])
        best = row["miopen_best"]
        alg = list(Algorithm)[i % len(Algorithm)].miopen_name(direction)
        lines.append(f"{row['miopen_key']}={best['solver']}:{best['ms']!r},{i},{alg}")
    src = tmp_path / "real.fdb.txt"
    src.write_text("".join(sorted(line + "\n" for line in lines)))
    result = db.import_text(src)
    assert result.records == len({r["miopen_key"] for r in rows})
    out = tmp_path / "out.fdb.txt"
    db.export_text(out)
    assert out.read_text() == src.read_text()
    # Keys of rows whose sizes break the convolution formula are bad lines.
    bad = next(r for r in corpus.load_rows() if not r["consistent"])
    src.write_text(f"{bad['miopen_key']}=x.y:1,0,gemm\n")
    with pytest.raises(TextFormatError, match="bad key"):
        db.import_text(src, strict=True)
