"""System databases shipped packed (``<device>.db.xz``): expanded once into the cache, read as
the plain file would be, never half-expanded, and a damaged one costs a warning, not a find."""

from __future__ import annotations

import lzma
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from miocore.cli import main
from miocore.db import FindDb, FindDbEntry
from miocore.db._sqlite import DatabaseWarning
from miocore.db.packed import expanded_path, pack, packed_twin, readable_db_file
from miocore.errors import DatabaseError
from miocore.heuristic.train import DB_FILE_LAYER, open_db_file
from miocore.problem import ConvProblem

DEVICE = "dev_packed"
KEYS = [
    ConvProblem.from_sizes("forward", n=2, c=c, k=c, in_spatial=(8, 8), filter_spatial=(3, 3)).key
    for c in (3, 5, 7, 9)
]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _tuned(folder: Path) -> Path:
    """A user-layer database of four records, then closed: ``<folder>/<DEVICE>.db``."""
    db = FindDb(DEVICE, user_dir=folder, system_dir=folder / "none")
    try:
        for i, key in enumerate(KEYS):
            db.write(
                key,
                [
                    FindDbEntry(solver="direct.naive", algorithm="direct", time_ms=1.0 + i,
                                workspace_size=0),
                    FindDbEntry(solver="gemm.im2col", algorithm="gemm", time_ms=2.0 + i,
                                workspace_size=64),
                ],
            )  # fmt: skip
    finally:
        db.close()
    return folder / f"{DEVICE}.db"


def _system_records(system: Path) -> dict[str, list[tuple[str, float]]]:
    db = FindDb(DEVICE, user_dir=system / "no-user", system_dir=system)
    try:
        return {
            k: [(e.solver, e.time_ms) for e in db.record(k, "system").entries]
            for k in db.keys("system")
        }
    finally:
        db.close()


def test_a_packed_system_database_reads_as_the_plain_one_and_expands_once(tmp_path: Path) -> None:
    plain = _tuned(tmp_path / "built")
    expected = _system_records(plain.parent)
    assert sorted(expected) == sorted(KEYS)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    packed = pack(plain, shipped / f"{DEVICE}.db.xz")
    assert packed.stat().st_size < plain.stat().st_size
    assert _system_records(shipped) == expected
    target = expanded_path(packed)
    assert target.is_file() and target.name == f"{DEVICE}.db"
    first = target.stat().st_mtime_ns
    assert _system_records(shipped) == expected  # read again: the expansion is reused
    assert target.stat().st_mtime_ns == first
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no draft left
    # The FindDb names the expanded file as its system layer.
    db = FindDb(DEVICE, user_dir=tmp_path / "u", system_dir=shipped)
    try:
        assert db.system_path == target
    finally:
        db.close()


def test_a_plain_file_wins_over_its_packed_twin(tmp_path: Path) -> None:
    plain = _tuned(tmp_path / "s")
    other = _tuned(tmp_path / "other")
    pack(other, packed_twin(plain))
    with sqlite3.connect(plain) as conn:
        conn.execute("DELETE FROM find_db WHERE key = ?", (KEYS[0],))
    conn.close()
    assert readable_db_file(plain) == plain
    assert KEYS[0] not in _system_records(plain.parent)


def test_a_damaged_packed_file_warns_and_reads_as_empty(tmp_path: Path) -> None:
    plain = _tuned(tmp_path / "built")
    good = pack(plain, tmp_path / "good.db.xz").read_bytes()
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    bad = shipped / f"{DEVICE}.db.xz"
    bad.write_bytes(good[: len(good) // 2])  # cut short
    with pytest.raises(DatabaseError, match="expanded") as info:
        readable_db_file(bad)
    assert info.value.field == "path" and info.value.value == str(bad)
    assert not expanded_path(bad).exists()
    assert not any(p.is_file() for p in expanded_path(bad).parent.glob("*"))  # no half file
    with pytest.warns(DatabaseWarning, match="cannot be expanded"):
        assert _system_records(shipped) == {}


def _read_keys(args: tuple[str, str]) -> list[str]:
    import os

    cache, system = args
    os.environ["XDG_CACHE_HOME"] = cache
    return sorted(_system_records(Path(system)))


def test_processes_expanding_at_once_all_read_the_whole_file(tmp_path: Path) -> None:
    plain = _tuned(tmp_path / "built")
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    pack(plain, shipped / f"{DEVICE}.db.xz")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_read_keys, [(str(tmp_path / "cache"), str(shipped))] * 8)
    assert results == [sorted(KEYS)] * 8


def test_the_tools_open_a_packed_file_and_merge_from_one(tmp_path: Path) -> None:
    plain = _tuned(tmp_path / "built")
    (tmp_path / "ship").mkdir()
    packed = pack(plain, tmp_path / "ship" / f"{DEVICE}.db.xz")
    for name in (packed, packed.with_name(f"{DEVICE}.db")):  # the packed file, or its plain name
        db = open_db_file(name)
        try:
            assert sorted(db.keys(DB_FILE_LAYER)) == sorted(KEYS)
        finally:
            db.close()
    target = FindDb(DEVICE, user_dir=tmp_path / "mine", system_dir=tmp_path / "none")
    try:
        result = target.merge_from(packed)
        assert result.added == 2 * len(KEYS)
        assert sorted(target.keys("user")) == sorted(KEYS)
    finally:
        target.close()


def test_db_pack_snapshots_the_write_ahead_log_and_refuses_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = _tuned(tmp_path / "built")
    # A commit left in the write-ahead log (a writer still holding the file open).
    writer = sqlite3.connect(plain, isolation_level=None)
    try:
        assert writer.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("DELETE FROM find_db WHERE key = ?", (KEYS[1],))
        assert main(["db", "pack", str(plain)]) == 0
    finally:
        writer.close()
    assert "packed" in capsys.readouterr().out
    with lzma.open(packed_twin(plain)) as fh:
        expanded = tmp_path / "check.db"
        expanded.write_bytes(fh.read())
    conn = sqlite3.connect(f"file:{expanded}?mode=ro&immutable=1", uri=True)
    try:
        keys = {k for (k,) in conn.execute("SELECT DISTINCT key FROM find_db")}
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal"
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    assert keys == set(KEYS) - {KEYS[1]}
    assert main(["db", "pack", str(tmp_path / "missing.db")]) == 1
    assert "missing.db" in capsys.readouterr().err


def test_db_path_names_the_packed_file_a_system_layer_was_expanded_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    plain = _tuned(tmp_path / "built")
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    packed = pack(plain, shipped / f"{DEVICE}.db.xz")
    argv = ["db", "path", "--json", "--device", DEVICE, "--system-db-path", str(shipped)]
    argv += ["--user-db-path", str(tmp_path / "user")]
    assert main(argv) == 0
    system = json.loads(capsys.readouterr().out)["system"]
    assert system["exists"] and system["path"] == str(expanded_path(packed))
    assert system["expanded_from"] == str(packed)
