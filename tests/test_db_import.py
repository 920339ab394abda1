"""Importing MIOpen's text FindDb at scale: skips by reason, device checks, streaming, the
fast key check, the compact text encoding and a byte-identical export."""

from __future__ import annotations

import bz2
import gc
import random
import sqlite3
import tracemalloc
from pathlib import Path

import pytest

from miocore import corpus
from miocore.db import FindDb, FindDbEntry, TextFormatError
from miocore.db._common import check_key
from miocore.db.imported import body_is_valid, device_from_filename, skip_reason
from miocore.db.keycheck import _geometry_ok, key_is_valid
from miocore.errors import DatabaseError, MiocoreError

MIOPEN = Path(__file__).resolve().parents[2] / "shared" / "miopen"
F_KEY = "64-56-56-3x3-64-56-56-64-1x1-1x1-1x1-0-NCHW-FP32-F"


def _exact(key: str) -> bool:
    try:
        check_key(key)
    except MiocoreError:
        return False
    return True


def _mutations(key: str, rng: random.Random) -> list[str]:
    """Variants of a valid key, most of them invalid or non-canonical."""
    parts = key.split("-")
    out = [
        key + "_g1",
        key.replace("FP32", "INT8").replace("FP16", "INT8"),
        key.replace("-0-N", "-1-N", 1),
        key.replace("NCHW", "NCHW-NCHW-NCHW"),
        key.replace("NCHW", "NHWC-NCHW-NHWC"),
        "0" + key,
    ]
    for _ in range(4):
        i = rng.randrange(len(parts))
        bumped = list(parts)
        if bumped[i].isdigit():
            bumped[i] = str(int(bumped[i]) + rng.choice((1, 2, 7)))
            out.append("-".join(bumped))
    return out


def test_fast_key_check_agrees_with_the_exact_one() -> None:
    rng = random.Random(5)
    keys: list[str] = []
    rows = corpus.load_rows() if corpus.find_corpus() else ()
    keys += [r["miopen_key"] for r in rng.sample(list(rows), min(1500, len(rows)))]
    for name in ("gfx906_60.HIP.fdb.txt.bz2", "gfx942130.HIP.fdb.txt.bz2"):
        if (MIOPEN / name).exists():
            with bz2.open(MIOPEN / name, "rt") as fh:
                file_keys = [line.partition("=")[0] for line in fh]
            keys += rng.sample(file_keys, 800)
    keys += [
        F_KEY,
        F_KEY.replace("-F", "-B"),
        "16-8-8-8-3x3x3-32-8-8-8-2-1x1x1-1x1x1-1x1x1-0-NCDHW-FP16-W",
        "32-112-112-3x3-32-112-112-1-1x1-1x1-1x1-0-NHWC-NHWC-NHWC-BF16-F_g32",
    ]
    keys += [m for k in list(keys) for m in _mutations(k, rng)]
    fast_yes = 0
    for key in keys:
        fast = key_is_valid(key)
        if fast:  # "certainly valid" must never be wrong
            assert _exact(key), key
            fast_yes += 1
    assert fast_yes > len(keys) // 4  # and it does decide the common case
    # Real keys in canonical form take the fast path.
    assert key_is_valid(F_KEY) and key_is_valid("1-1-1-3x3-2-3-3-128-0x0-1x1-1x1-0-NCHW-FP16-B")


def test_body_check_reads_both_of_miopens_item_forms() -> None:
    new = (
        "ConvA:0.05,1024,miopenConvolutionFwdAlgoImplicitGEMM;"
        "GemmFwd1x1:1e-05,0,miopenConvolutionFwdAlgoGEMM"
    )
    old = "miopenConvolutionFwdAlgoGEMM:GemmFwdRest,0.25,0,miopenConvolutionFwdAlgoGEMM,<unused>"
    assert body_is_valid(new, "F") and body_is_valid(old, "F")
    assert not body_is_valid(new, "B")  # another direction's algorithm names
    assert not body_is_valid(
        "a:1,0,miopenConvolutionFwdAlgoGEMM;a:2,0,miopenConvolutionFwdAlgoFFT", "F"
    )
    assert not body_is_valid("a:nan,0,miopenConvolutionFwdAlgoGEMM", "F")


def test_device_comes_from_miopens_file_names() -> None:
    assert device_from_filename("gfx942130.HIP.fdb.txt.bz2") == "gfx942130"
    assert device_from_filename("/x/gfx906_60.HIP.fdb.txt") == "gfx906_60"
    assert device_from_filename("gfx90a6e.OpenCL.fdb.txt") == "gfx90a6e"
    assert device_from_filename("my_records.txt") is None


def test_a_file_of_another_device_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "gfx942130.HIP.fdb.txt"
    src.write_text(f"{F_KEY}=a.b:1,0,miopenConvolutionFwdAlgoGEMM\n")
    db = FindDb("gfx906_60", user_dir=tmp_path / "user")
    with pytest.raises(DatabaseError, match="gfx942130") as info:
        db.import_text(src)
    assert info.value.field == "device"
    assert db.keys() == []
    assert FindDb("gfx942130", user_dir=tmp_path / "user").import_text(src).records == 1


def test_skips_are_counted_by_reason_with_first_examples(tmp_path: Path) -> None:
    int8 = F_KEY.replace("FP32", "INT8")
    impossible = "3-1-1-3x3-4-2-2-128-0x0-1x1-1x1-0-NCHW-FP16-B"
    lines = [f"{F_KEY}=a.b:1,0,miopenConvolutionFwdAlgoGEMM"]
    lines += [f"{int8.replace('64-56', f'{c}-56', 1)}=a.b:1,0,x" for c in range(1, 6)]
    lines += [f"{impossible}=a.b:1,0,miopenConvolutionBwdDataAlgoGEMM", "garbage"]
    src = tmp_path / "in.fdb.txt"
    src.write_text("\n".join(lines) + "\n")
    db = FindDb("cpu_imp_1", user_dir=tmp_path / "user")
    result = db.import_text(src)
    assert result.records == 1 and result.lines == len(lines)
    assert dict(result.skip_counts) == {
        "data type INT8 not supported": 5,
        "geometry that cannot exist": 1,
        "not a record line": 1,
    }
    assert result.skipped_total == 7
    assert [b.line for b in result.skipped] == [2, 3, 4, 7, 8]  # three examples per reason
    with pytest.raises(TextFormatError):
        FindDb("cpu_imp_2", user_dir=tmp_path / "user").import_text(src, strict=True)
    assert FindDb("cpu_imp_2", user_dir=tmp_path / "user").keys() == []
    assert skip_reason("entry 2: solver 'x' appears twice") == "solver listed twice"


def test_a_key_listed_twice_is_merged_and_measured_records_are_replaced(tmp_path: Path) -> None:
    db = FindDb("cpu_imp_1", user_dir=tmp_path / "user")
    db.write(F_KEY, [FindDbEntry(solver="mine", algorithm="gemm", time_ms=9, workspace_size=0)])
    src = tmp_path / "in.txt"
    src.write_text(
        f"{F_KEY}=a.one:2,0,miopenConvolutionFwdAlgoGEMM;b.two:3,0,miopenConvolutionFwdAlgoFFT\n"
        f"{F_KEY}=a.one:1,0,miopenConvolutionFwdAlgoGEMM;c.three:5,0,miopenConvolutionFwdAlgoDirect\n"
    )
    result = db.import_text(src)
    assert result.records == 1
    (record,) = db.records(F_KEY)
    assert [(e.solver, e.time_ms) for e in record.entries] == [
        ("a.one", 1.0),
        ("b.two", 3.0),
        ("c.three", 5.0),
    ]
    assert record.entries[0].provenance["source"] == "text-import"
    # A later measurement of the key replaces the imported text.
    db.write(F_KEY, [FindDbEntry(solver="new", algorithm="fft", time_ms=0.5, workspace_size=0)])
    assert db.records(F_KEY)[0].solvers == ["new"] and len(db) == 1
    assert db.clean(solver="new") == 1 and db.keys() == []


def test_clean_reaches_imported_records(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text(
        f"{F_KEY}=a.one:2,0,miopenConvolutionFwdAlgoGEMM;b.two:3,0,miopenConvolutionFwdAlgoFFT\n"
    )
    db = FindDb("cpu_imp_1", user_dir=tmp_path / "user")
    db.import_text(src)
    assert db.clean(keep_solvers={"a.one"}) == 1
    assert db.records(F_KEY)[0].solvers == ["a.one"]
    assert db.delete(F_KEY) and db.keys() == []


def _lines(n: int) -> str:
    out = []
    for i in range(n):
        key = f"{8 + i % 512}-28-28-3x3-{16 + i // 512}-28-28-{1 + i % 7}-1x1-1x1-1x1-0-NCHW-FP16-F"
        out.append(
            f"{key}=s.a:{i / 7!r},{i},miopenConvolutionFwdAlgoDirect;"
            "s.b:9,0,miopenConvolutionFwdAlgoGEMM"
        )
    return "".join(sorted(f"{line}\n" for line in set(out)))


def test_import_streams_in_bounded_memory(tmp_path: Path) -> None:
    peaks = []
    for n in (4000, 16000):
        src = tmp_path / f"in{n}.txt"
        src.write_text(_lines(n))
        db = FindDb("cpu_imp_1", user_dir=tmp_path / f"user{n}")
        _geometry_ok.cache_clear()  # the same starting point for both sizes
        gc.collect()
        tracemalloc.start()
        result = db.import_text(src)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert result.records == len(src.read_text().splitlines())
        out = tmp_path / f"out{n}.txt"
        db.export_text(out)
        assert out.read_bytes() == src.read_bytes()
        # The compact encoding: the SQLite file is about the size of the text.
        assert db.user_path.stat().st_size < 1.5 * src.stat().st_size
    # 4x the lines, not 4x the memory: a fixed allowance, far below the text's size.
    assert peaks[1] < 1.5 * peaks[0] + 256 * 1024, peaks
    assert peaks[1] < 0.25 * (tmp_path / "in16000.txt").stat().st_size, peaks


@pytest.mark.parametrize("name", ["gfx942130.HIP.fdb.txt.bz2", "gfx906_60.HIP.fdb.txt.bz2"])
def test_miopens_shipped_databases_import_and_export_byte_identical(
    name: str, tmp_path: Path
) -> None:
    src = MIOPEN / name
    if not src.exists():
        pytest.skip(f"{src} is not here")
    device = device_from_filename(name)
    assert device is not None
    db = FindDb(device, user_dir=tmp_path)
    result = db.import_text(src)
    assert result.records > 0.99 * result.lines
    assert result.skipped_total == result.lines - result.records
    assert set(result.skip_counts) <= {"data type INT8 not supported", "geometry that cannot exist"}
    skipped_lines = {b.text for b in result.skipped}
    out = tmp_path / "out.fdb.txt"
    assert db.export_text(out) == result.records
    with bz2.open(src, "rt") as fh:
        original = fh.read().splitlines()
    exported = out.read_text().splitlines()
    imported = set(db.keys())
    kept = [line for line in original if line.partition("=")[0] in imported]
    assert exported == kept  # byte for byte, for what was imported
    assert not skipped_lines & set(exported)
    # And a lookup reads the records back as entries.
    record = db.record(exported[0].partition("=")[0])
    assert record is not None and record.entries[0].time_ms > 0


def _version_1_file(path: Path) -> None:
    """A user file as miocore wrote it before imported text and the size cap (schema 1)."""
    from miocore.db._sqlite import SCHEMA_SQL

    v1 = SCHEMA_SQL.split("CREATE TABLE IF NOT EXISTS find_db_text")[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(v1)
    conn.execute(
        "INSERT INTO find_db VALUES (?, 'old.s', 0, 'gemm', 1.5, 0, NULL, 3, NULL, '{}')",
        (F_KEY,),
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


def test_a_version_1_file_is_read_as_system_layer_and_upgraded_as_user_layer(
    tmp_path: Path,
) -> None:
    import warnings

    _version_1_file(tmp_path / "system" / "cpu_imp_1.db")
    _version_1_file(tmp_path / "user" / "cpu_imp_1.db")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither layer may warn
        db = FindDb("cpu_imp_1", user_dir=tmp_path / "user", system_dir=tmp_path / "system")
        system = db.record(F_KEY, "system")
        assert system is not None and system.solvers == ["old.s"]
        assert db.keys("system") == [F_KEY]
        assert db.record(F_KEY).solvers == ["old.s"]  # type: ignore[union-attr]
        src = tmp_path / "in.txt"
        other = F_KEY.replace("64-56-56-64-", "64-56-56-32-")
        src.write_text(f"{other}=a.b:1,0,miopenConvolutionFwdAlgoGEMM\n")
        assert db.import_text(src).records == 1
    assert db.keys() == sorted([F_KEY, other]) and db.status.ok
    conn = sqlite3.connect(tmp_path / "user" / "cpu_imp_1.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()
