"""FindDb and PerfDb: layers, provenance, transactions, schema version, corruption and clean
(the text format: test_db_text.py; merge: test_db_merge.py). Every test uses its own folders;
none touches the real user cache."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path

import pytest
from db_fixtures import (
    DEVICE,
    entry,
    key,
    query,
    set_version,
    sha,
)

from miocore.db import (
    SCHEMA_VERSION,
    DatabaseWarning,
    FindDb,
    FindDbEntry,
    PerfDb,
    StorageDegradedWarning,
    default_system_dir,
    default_user_dir,
    make_provenance,
)
from miocore.errors import DatabaseError, InvalidArgumentError

# -- locations and the user layer ---------------------------------------------------------------


def test_files_are_named_after_the_device(db: FindDb, dirs: tuple[Path, Path]) -> None:
    assert db.user_path == dirs[0] / f"{DEVICE}.db"
    assert db.system_path == dirs[1] / f"{DEVICE}.db"
    assert PerfDb(DEVICE, user_dir=dirs[0]).user_path == db.user_path


def test_default_locations_follow_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path / "u"))
    monkeypatch.setenv("MIOCORE_SYSTEM_DB_PATH", str(tmp_path / "s"))
    db = FindDb("sm90_132")
    assert db.user_path == tmp_path / "u" / "sm90_132.db"
    assert db.system_path == tmp_path / "s" / "sm90_132.db"
    monkeypatch.delenv("MIOCORE_USER_DB_PATH")
    monkeypatch.delenv("MIOCORE_SYSTEM_DB_PATH")
    assert default_user_dir().name == "db" and "miocore" in str(default_user_dir())
    import miocore

    assert default_system_dir() == Path(miocore.__file__).resolve().parent / "data" / "db"
    assert (default_system_dir() / "README.md").is_file()


@pytest.mark.parametrize("device", ["", "../evil", "a/b", "x y", None, ".hidden"])
def test_device_identity_must_be_a_safe_file_name(device: object, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="device"):
        FindDb(device, user_dir=tmp_path)  # type: ignore[arg-type]


def test_reads_of_a_missing_user_db_create_nothing(db: FindDb, dirs: tuple[Path, Path]) -> None:
    assert db.records(key()) == []
    assert db.keys() == [] and list(db.items()) == [] and db.keys("system") == []
    assert db.delete(key()) is False
    assert db.clean(all=True) == 0
    assert PerfDb(DEVICE, user_dir=dirs[0], system_dir=dirs[1]).get(key(), "x") is None
    assert not dirs[0].exists()


def test_write_creates_the_file_and_reads_back_in_order(db: FindDb) -> None:
    k = key()
    entries = [
        entry("gemm.im2col", 1.25, "gemm", spread_ms=0.1, count=9, perf_config='{"t":8}'),
        entry("direct.naive", 3.5, "miopenConvolutionFwdAlgoDirect"),
    ]
    db.write(k, entries)
    assert db.user_path.is_file()
    (record,) = db.records(k)
    assert record.key == k and record.layer == "user"
    assert record.solvers == ["gemm.im2col", "direct.naive"]
    first = record.entries[0]
    assert (first.algorithm, first.time_ms, first.spread_ms, first.count) == ("gemm", 1.25, 0.1, 9)
    assert first.perf_config == '{"t":8}'
    assert record.entries[1].algorithm == "direct"  # MIOpen names are normalised
    assert db.keys() == [k] and len(db) == 1


def test_write_replaces_the_record_and_no_entries_deletes_it(db: FindDb) -> None:
    k = key()
    db.write(k, [entry("a.one", 1.0), entry("b.two", 2.0)])
    db.write(k, [entry("c.three", 0.5)])
    assert db.records(k)[0].solvers == ["c.three"]
    db.write(k, [])
    assert db.records(k) == []
    db.write(k, [entry("c.three", 0.5)])
    assert db.delete(k) is True and db.delete(k) is False


def test_write_refuses_invalid_and_non_canonical_keys(db: FindDb) -> None:
    with pytest.raises(Exception, match="key"):
        db.write("not-a-key", [entry("a.one", 1.0)])
    k = key()
    with pytest.raises(InvalidArgumentError, match="canonical"):
        db.write(k.replace("-NCHW-", "-NCHW-NCHW-NCHW-"), [entry("a.one", 1.0)])
    assert not db.user_path.exists()


# -- entries and provenance ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("time_ms", -1.0),
        ("time_ms", float("nan")),
        ("time_ms", "fast"),
        ("workspace_size", -1),
        ("workspace_size", 1.5),
        ("count", -2),
        ("spread_ms", float("inf")),
        ("algorithm", "magic"),
        ("solver", "has space"),
        ("solver", "a:b"),
        ("solver", ""),
        ("perf_config", 3),
    ],
)
def test_entries_are_validated_naming_the_field(field: str, value: object) -> None:
    fields = {"solver": "a.one", "algorithm": "gemm", "time_ms": 1.0, "workspace_size": 0}
    fields[field] = value
    with pytest.raises(InvalidArgumentError, match=field):
        FindDbEntry(**fields)  # type: ignore[arg-type]


def test_provenance_is_completed_and_stored_as_json(db: FindDb) -> None:
    k = key()
    prov = make_provenance(
        DEVICE, plugin="miocore-gemm", plugin_version="1.2.3", find_mode="NORMAL"
    )
    db.write(k, [entry("gemm.im2col", 1.0, "gemm", provenance=prov, count=5), entry("x.y", 2.0)])
    first, second = db.records(k)[0].entries
    assert first.provenance == prov
    assert {"miocore", "device", "written_at", "plugin", "plugin_version"} <= set(first.provenance)
    # An entry written without provenance still gets miocore version, device and time.
    assert second.provenance["device"] == DEVICE
    assert second.provenance["miocore"] and second.provenance["written_at"].endswith("+00:00")
    with pytest.raises(TypeError):
        first.provenance["device"] = "other"  # type: ignore[index]
    # Stored as JSON text, never a pickle.
    raw = query(db.user_path, "SELECT provenance FROM find_db WHERE solver='gemm.im2col'")[0]
    assert isinstance(raw[0], str) and json.loads(raw[0]) == dict(prov)


def test_provenance_values_must_be_text(db: FindDb) -> None:
    e = entry("a.one", 1.0, provenance={"runs": 5, "ok": True})
    assert e.provenance == {"runs": "5", "ok": "True"}
    with pytest.raises(InvalidArgumentError, match="provenance"):
        entry("a.one", 1.0, provenance={"obj": object()})


# -- transactions -------------------------------------------------------------------------------


def _rows(path: Path) -> list[tuple]:
    return query(path, "SELECT * FROM find_db ORDER BY key, rank")


def test_a_failed_write_changes_nothing(db: FindDb) -> None:
    k, other = key(), key(n=32)
    db.write(k, [entry("a.one", 1.0), entry("b.two", 2.0)])
    db.write(other, [entry("z.z", 9.0)])
    before = _rows(db.user_path)
    # Fails at the third entry, after the old record was deleted and two rows inserted.
    with pytest.raises(InvalidArgumentError, match=r"entries\[2\]"):
        db.write(k, [entry("c.three", 0.1), entry("d.four", 0.2), "not an entry"])  # type: ignore[list-item]
    # A duplicate solver violates the primary key mid-way.
    with pytest.raises(DatabaseError):
        db.write(k, [entry("c.three", 0.1), entry("c.three", 0.2)])
    # An entry forged past its validators trips the table's CHECK constraint.
    forged = entry("e.five", 1.0)
    object.__setattr__(forged, "time_ms", -5.0)
    with pytest.raises(DatabaseError):
        db.write(k, [entry("c.three", 0.1), forged])
    assert _rows(db.user_path) == before
    assert db.records(k)[0].solvers == ["a.one", "b.two"]


def test_newer_schema_version_degrades_and_leaves_the_file_untouched(
    db: FindDb, dirs: tuple[Path, Path]
) -> None:
    db.write(key(), [entry("a.one", 1.0)])
    db.close()
    set_version(db.user_path, SCHEMA_VERSION + 1)
    before = hashlib.sha256(db.user_path.read_bytes()).hexdigest()
    fresh = FindDb(DEVICE, user_dir=dirs[0], system_dir=dirs[1])
    with pytest.warns(StorageDegradedWarning, match="newer miocore") as caught:
        assert fresh.records(key()) == []
        fresh.write(key(), [entry("b.two", 2.0)])
        fresh.write(key(n=32), [entry("c.three", 3.0)])
    assert len(caught) == 1  # one warning per object and cause
    assert fresh.status.state == "degraded" and fresh.status.cause == "newer-schema"
    assert fresh.status.path == str(db.user_path)
    # Kept in memory for the object's life; the file is neither rewritten nor set aside.
    assert fresh.records(key())[0].solvers == ["b.two"]
    assert fresh.keys() == sorted([key(), key(n=32)])
    assert hashlib.sha256(db.user_path.read_bytes()).hexdigest() == before
    assert not list(dirs[0].glob("*.corrupt-*"))


# -- system layer -------------------------------------------------------------------------------


def _build_system(system_dir: Path, records: dict[str, list[FindDbEntry]]) -> Path:
    with FindDb(DEVICE, user_dir=system_dir) as builder:
        for k, entries in records.items():
            builder.write(k, entries)
        path = builder.user_path
    with PerfDb(DEVICE, user_dir=system_dir) as perf:
        perf.put(key(), "tuned.solver", '{"tile":16}', {"source": "system"})
    return path


def test_system_layer_is_read_after_the_user_layer_and_never_written(
    dirs: tuple[Path, Path],
) -> None:
    user, system = dirs
    k, only_system = key(), key(n=8)
    path = _build_system(system, {k: [entry("sys.one", 2.0)], only_system: [entry("sys.two", 1.0)]})
    assert not Path(str(path) + "-wal").exists()
    digest, listing = sha(path), sorted(p.name for p in system.iterdir())
    os.chmod(system, 0o555)  # a read-only install folder
    try:
        db = FindDb(DEVICE, user_dir=user, system_dir=system)
        assert [r.layer for r in db.records(only_system)] == ["system"]
        db.write(k, [entry("user.one", 1.0)])
        records = db.records(k)
        assert [(r.layer, r.solvers) for r in records] == [
            ("user", ["user.one"]),
            ("system", ["sys.one"]),
        ]
        assert db.keys("system") == sorted([k, only_system])
        assert [r.key for r in db.items("system")] == sorted([k, only_system])
        assert db.delete(only_system) is False  # delete only touches the user layer
        assert db.records(only_system)[0].layer == "system"
        perf = PerfDb(DEVICE, user_dir=user, system_dir=system)
        found = perf.get(k, "tuned.solver")
        assert found is not None and found.layer == "system" and found.perf_config == '{"tile":16}'
        perf.put(k, "tuned.solver", '{"tile":32}', {})
        assert perf.get(k, "tuned.solver").layer == "user"  # type: ignore[union-attr]
        assert perf.delete(k) == 1
        assert perf.get(k, "tuned.solver").layer == "system"  # type: ignore[union-attr]
        db.close()
        perf.close()
    finally:
        os.chmod(system, 0o755)
    assert sha(path) == digest
    assert sorted(p.name for p in system.iterdir()) == listing  # no -wal, -shm or journal
    with pytest.raises(InvalidArgumentError, match="layer"):
        db.keys("global")


def test_a_corrupt_system_layer_is_warned_about_and_read_as_empty(
    dirs: tuple[Path, Path],
) -> None:
    user, system = dirs
    system.mkdir(parents=True)
    bad = system / f"{DEVICE}.db"
    bad.write_bytes(b"this is not sqlite at all" * 100)
    db = FindDb(DEVICE, user_dir=user, system_dir=system)
    db.write(key(), [entry("u.one", 1.0)])
    with pytest.warns(DatabaseWarning, match="system database"):
        records = db.records(key())
    assert [r.layer for r in records] == ["user"]
    assert db.keys("system") == []  # warned once; still empty
    assert bad.read_bytes() == b"this is not sqlite at all" * 100  # never touched


def test_system_layer_with_a_newer_schema_reads_as_empty_with_one_warning(
    dirs: tuple[Path, Path],
) -> None:
    user, system = dirs
    path = _build_system(system, {key(): [entry("sys.one", 2.0)]})
    set_version(path, SCHEMA_VERSION + 5)
    db = FindDb(DEVICE, user_dir=user, system_dir=system)
    with pytest.warns(DatabaseWarning, match="newer") as caught:
        assert db.records(key()) == []
        assert db.records(key()) == []
    assert len(caught) == 1
    assert db.status.ok  # the user layer is fine


# -- corruption of the user layer ---------------------------------------------------------------


def test_garbage_user_db_is_set_aside_with_a_warning_and_rebuilt(
    dirs: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    user, system = dirs
    user.mkdir(parents=True)
    path = user / f"{DEVICE}.db"
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    db = FindDb(DEVICE, user_dir=user, system_dir=system)
    with (
        caplog.at_level(logging.WARNING, logger="miocore.db"),
        pytest.warns(DatabaseWarning, match="corrupt"),
    ):
        db.write(key(), [entry("a.one", 1.0)])
    assert "corrupt" in caplog.text
    (aside,) = user.glob(f"{DEVICE}.db.corrupt-*")
    assert aside.read_bytes() == garbage
    assert db.records(key())[0].solvers == ["a.one"]


def test_garbage_user_db_on_a_read_is_rebuilt_and_the_read_succeeds(
    dirs: tuple[Path, Path],
) -> None:
    user, system = dirs
    user.mkdir(parents=True)
    (user / f"{DEVICE}.db").write_bytes(b"\x00garbage" * 1000)
    db = FindDb(DEVICE, user_dir=user, system_dir=system)
    with pytest.warns(DatabaseWarning):
        assert db.records(key()) == []
    assert len(list(user.glob("*.corrupt-*"))) == 1
    # Rebuilt: a sound, empty database of ours.
    assert query(db.user_path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    db.write(key(), [entry("a.one", 1.0)])
    assert db.keys() == [key()]


def test_truncated_user_db_is_set_aside_and_rebuilt(dirs: tuple[Path, Path]) -> None:
    user, system = dirs
    with FindDb(DEVICE, user_dir=user, system_dir=system) as db:
        for n in range(1, 301):
            db.write(
                key(n=n),
                [entry(f"s.n{i}", float(i), provenance={"pad": "x" * 50}) for i in range(3)],
            )
    path = user / f"{DEVICE}.db"
    size = path.stat().st_size
    assert size > 8 * 4096
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    db = FindDb(DEVICE, user_dir=user, system_dir=system)
    with pytest.warns(DatabaseWarning, match="corrupt"):
        db.write(key(n=7), [entry("new.one", 1.0)])
    assert len(list(user.glob("*.corrupt-*"))) == 1
    assert db.records(key(n=7))[0].solvers == ["new.one"]
    # The readable pages of the damaged file were copied into the new one.
    saved = [r for r in db.items() if r.key != key(n=7)]
    assert len(saved) > 20
    old_keys = {key(n=n) for n in range(1, 301)}
    for record in saved:
        assert record.key in old_keys and set(record.solvers) <= {"s.n0", "s.n1", "s.n2"}


def test_perfdb_recovers_from_corruption_too(dirs: tuple[Path, Path]) -> None:
    user, system = dirs
    user.mkdir(parents=True)
    (user / f"{DEVICE}.db").write_bytes(b"garbage!" * 512)
    perf = PerfDb(DEVICE, user_dir=user, system_dir=system)
    with pytest.warns(DatabaseWarning):
        perf.put(key(), "t.s", '{"a":1}', {})
    assert perf.get(key(), "t.s").perf_config == '{"a":1}'  # type: ignore[union-attr]


# -- PerfDb ---------------------------------------------------------------------------------------


def test_perfdb_put_get_delete(dirs: tuple[Path, Path]) -> None:
    perf = PerfDb(DEVICE, user_dir=dirs[0], system_dir=dirs[1])
    k = key()
    perf.put(k, "igemm.fwd", '{"tile":8}', make_provenance(DEVICE, plugin="miocore-igemm"))
    perf.put(k, "igemm.fwd", '{"tile":16}', {})
    perf.put(k, "wino.f2", '{"x":1}', {})
    perf.put(key(n=2), "igemm.fwd", '{"tile":4}', {})
    got = perf.get(k, "igemm.fwd")
    assert got is not None and got.perf_config == '{"tile":16}' and got.layer == "user"
    assert got.provenance["device"] == DEVICE and got.key == k
    assert perf.get(k, "missing") is None
    assert [(e.key, e.solver) for e in perf.items()] == sorted(
        [(k, "igemm.fwd"), (k, "wino.f2"), (key(n=2), "igemm.fwd")]
    )
    assert perf.delete(k, "wino.f2") == 1
    assert perf.delete(k) == 1
    assert perf.delete(k) == 0
    assert perf.get(key(n=2), "igemm.fwd") is not None
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        perf.put(k, "igemm.fwd", "", {})
    # FindDb and PerfDb share the file without disturbing each other.
    find = FindDb(DEVICE, user_dir=dirs[0], system_dir=dirs[1])
    find.write(k, [entry("a.one", 1.0)])
    assert perf.get(key(n=2), "igemm.fwd") is not None and find.keys() == [k]


# -- clean ---------------------------------------------------------------------------------------


def _fill(db: FindDb) -> None:
    db.write(key(n=1), [entry("a.one", 1.0), entry("b.two", 2.0)])
    db.write(key(n=2), [entry("a.one", 1.0), entry("c.three", 2.0)])
    db.write(key(n=3), [entry("b.two", 1.0)])


def test_clean_by_key_solver_stale_and_all(db: FindDb) -> None:
    _fill(db)
    assert db.clean(key=key(n=1)) == 2
    assert db.keys() == [key(n=2), key(n=3)]
    assert db.clean(solver="a.one") == 1
    assert db.records(key(n=2))[0].solvers == ["c.three"]
    assert db.clean(all=True) == 2 and db.keys() == []
    _fill(db)
    assert db.clean(keep_solvers={"a.one"}) == 3  # b.two and c.three are not installed
    assert [r.solvers for r in db.items()] == [["a.one"], ["a.one"]]
    _fill(db)
    assert db.clean(key=key(n=1), solver="b.two") == 1
    assert db.records(key(n=1))[0].solvers == ["a.one"]
    with pytest.raises(InvalidArgumentError):
        db.clean()
    with pytest.raises(InvalidArgumentError):
        db.clean(all=True, key=key())


def test_perfdb_clean(dirs: tuple[Path, Path]) -> None:
    perf = PerfDb(DEVICE, user_dir=dirs[0], system_dir=dirs[1])
    perf.put(key(n=1), "a.one", "{}", {})
    perf.put(key(n=1), "b.two", "{}", {})
    perf.put(key(n=2), "b.two", "{}", {})
    assert perf.clean(keep_solvers=["a.one"]) == 2
    assert perf.clean(all=True) == 1
    with pytest.raises(InvalidArgumentError):
        perf.clean()


# -- the find machinery's view -----------------------------------------------------------------


def test_entries_are_frozen_values() -> None:
    e = entry("a.one", 1.0, provenance={"x": "1"})
    assert e == entry("a.one", 1.0, provenance={"x": "1"})
    assert hash(e) == hash(entry("a.one", 1.0, provenance={"x": "1"}))
    assert dataclasses.replace(e, time_ms=2.0).time_ms == 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.time_ms = 3.0  # type: ignore[misc]
