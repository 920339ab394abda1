"""The user layer degrades to memory on storage faults, and picks a journal safe on network FS."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from miocore.db import FindDb, FindDbEntry, PerfDb, StorageDegradedWarning
from miocore.db._store import Store
from miocore.db.mounts import fstype_of, is_network_fstype, is_network_path, parse_mounts
from miocore.db.storage import classify
from miocore.problem import ConvProblem

DEVICE = "cpu_store_2"


def key(n: int = 4) -> str:
    return ConvProblem.from_sizes(
        "forward", n=n, c=3, k=8, in_spatial=(8, 8), filter_spatial=(3, 3), pads=(1, 1)
    ).key


def entry(solver: str, time_ms: float) -> FindDbEntry:
    return FindDbEntry(solver=solver, algorithm="direct", time_ms=time_ms, workspace_size=0)


def test_a_directory_in_the_way_degrades_with_one_warning(tmp_path: Path) -> None:
    (tmp_path / f"{DEVICE}.db").mkdir()
    find = FindDb(DEVICE, user_dir=tmp_path, system_dir=tmp_path / "none")
    perf = PerfDb(DEVICE, user_dir=tmp_path, system_dir=tmp_path / "none")
    with pytest.warns(StorageDegradedWarning) as caught:
        assert find.records(key()) == []
        find.write(key(), [entry("a.one", 1.0)])
        find.write(key(8), [entry("b.two", 2.0)])
        assert perf.get(key(), "a.one") is None
        perf.put(key(), "a.one", '{"t":1}', {})
    assert len(caught) == 2  # one per object (FindDb, PerfDb) and cause
    assert all(str(tmp_path / f"{DEVICE}.db") in str(w.message) for w in caught)
    assert all("MIOCORE_USER_DB_PATH" in str(w.message) for w in caught)
    assert find.records(key())[0].solvers == ["a.one"]
    assert [r.key for r in find.items()] == sorted([key(), key(8)])
    assert perf.get(key(), "a.one").perf_config == '{"t":1}'  # type: ignore[union-attr]
    status = find.status
    assert (status.state, status.cause, status.reads) == ("degraded", "not-a-file", False)
    assert status.memory_records == 2
    assert find.delete(key()) is True and find.records(key()) == []


def test_an_uncreatable_user_path_degrades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(blocker / "sub" / "db"))
    find = FindDb(DEVICE, system_dir=tmp_path / "none")
    with pytest.warns(StorageDegradedWarning):
        assert find.probe().cause == "cannot-create"
    with pytest.warns(StorageDegradedWarning, match="cannot be created"):
        find2 = FindDb(DEVICE, system_dir=tmp_path / "none")
        find2.write(key(), [entry("a.one", 1.0)])
    assert find2.records(key())[0].solvers == ["a.one"]
    assert blocker.read_text() == "not a folder"


def test_a_full_disk_keeps_earlier_records_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find = FindDb(DEVICE, user_dir=tmp_path, system_dir=tmp_path / "none")
    find.write(key(1), [entry("a.one", 1.0)])
    pages = sqlite3.connect(find.user_path).execute("PRAGMA page_count").fetchone()[0]
    find.close()
    # A disk that holds two more pages than the file has now: SQLite says SQLITE_FULL.
    prepare = Store._prepare_user

    def small_disk(self: Store, conn: sqlite3.Connection) -> None:
        prepare(self, conn)
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")

    monkeypatch.setattr(Store, "_prepare_user", small_disk)
    big = [entry(f"s.{i:04d}", float(i)) for i in range(400)]
    with pytest.warns(StorageDegradedWarning, match="disk is full") as caught:
        for n in range(2, 12):
            find.write(key(n), big)
    assert len(caught) == 1
    assert find.status.cause == "disk-full" and find.status.reads
    assert find.records(key(1))[0].solvers == ["a.one"]  # written before the fault
    assert all(len(find.records(key(n))[0].entries) == 400 for n in range(2, 12))


def test_a_lock_held_too_long_degrades_instead_of_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIOCORE_DB_LOCK_TIMEOUT_S", "0.3")
    find = FindDb(DEVICE, user_dir=tmp_path, system_dir=tmp_path / "none")
    find.write(key(1), [entry("a.one", 1.0)])
    holder = sqlite3.connect(find.user_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.warns(StorageDegradedWarning, match="held the lock"):
            find.write(key(2), [entry("b.two", 2.0)])
        assert find.records(key(1))[0].solvers == ["a.one"]  # WAL readers are not blocked
        assert find.records(key(2))[0].solvers == ["b.two"]
        assert find.status.cause == "locked"
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_bad_entries_are_still_the_callers_error(tmp_path: Path) -> None:
    from miocore.errors import DatabaseError

    find = FindDb(DEVICE, user_dir=tmp_path, system_dir=tmp_path / "none")
    with pytest.raises(DatabaseError):
        find.write(key(), [entry("a.one", 1.0), entry("a.one", 2.0)])
    assert find.status.ok


def test_classify_names_the_cause() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    assert classify(full) == "disk-full"
    assert classify(PermissionError(13, "denied")) == "permission"
    assert classify(OSError(5, "Input/output error")) == "io-error"
    assert classify(sqlite3.OperationalError("disk I/O error")) == "io-error"
    assert classify(ValueError("something else")) == "other"


def _db_cli(*argv: str) -> int:
    import argparse

    from miocore.cli.db import add_db_parser

    parser = argparse.ArgumentParser(prog="miocore")
    add_db_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["db", *argv])
    return args.func(args)


def test_db_path_reports_the_degraded_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / f"{DEVICE}.db").mkdir()
    with pytest.warns(StorageDegradedWarning):
        assert _db_cli("path", "--device", DEVICE, "--user-db-path", str(tmp_path), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"]["state"] == "degraded"
    assert data["status"]["cause"] == "not-a-file"
    assert data["user"]["journal_mode"] in ("wal", "delete")


# -- network file systems -----------------------------------------------------------------------

MOUNTS = """\
/dev/sda1 / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
server:/export/home /home nfs4 rw,vers=4.2 0 0
//files/share /mnt/my\\040share cifs rw 0 0
lustre@tcp:/scratch /scratch lustre rw 0 0
/dev/sdb1 /home/local ext4 rw 0 0
user@host:/data /mnt/ssh fuse.sshfs rw 0 0
"""


def test_network_detection_reads_the_deepest_mount() -> None:
    table = parse_mounts(MOUNTS.splitlines())
    assert fstype_of("/home/alice/.cache/miocore/db", table) == "nfs4"
    assert fstype_of("/home/local/db", table) == "ext4"  # a local disk mounted inside NFS
    assert fstype_of("/mnt/my share/db", table) == "cifs"  # octal escapes undone
    assert fstype_of("/homework", table) == "ext4"  # a prefix of a name is not a parent
    assert is_network_path("/scratch/u/db", table)
    assert is_network_path("/mnt/ssh/db", table)
    assert not is_network_path("/tmp/db", table)
    assert not is_network_path("/home/local/db", table)
    assert is_network_fstype("fuse.sshfs") and not is_network_fstype("ext4")
    assert not is_network_fstype(None)


def test_network_mode_uses_the_rollback_journal(tmp_path: Path) -> None:
    local = Store(tmp_path / "local.db", writable=True, network=False)
    remote = Store(tmp_path / "remote.db", writable=True, network=True)
    for store in (local, remote):
        store.write(lambda conn: conn.execute("SELECT 1"))
    modes = {
        name: sqlite3.connect(tmp_path / name).execute("PRAGMA journal_mode").fetchone()[0]
        for name in ("local.db", "remote.db")
    }
    assert modes == {"local.db": "wal", "remote.db": "delete"}
    assert (local.journal_mode, remote.journal_mode) == ("wal", "delete")


def test_network_override_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    table = parse_mounts(MOUNTS.splitlines())
    monkeypatch.setenv("MIOCORE_DB_NETWORK", "1")
    assert is_network_path("/tmp/db", table)
    monkeypatch.setenv("MIOCORE_DB_NETWORK", "0")
    assert not is_network_path("/home/alice", table)


# -- size cap -----------------------------------------------------------------------------------


def test_size_cap_evicts_least_recently_used_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MIOCORE_USER_DB_MAX_MB", "0.25")
    find = FindDb(DEVICE, user_dir=tmp_path, system_dir=tmp_path / "none")
    perf = PerfDb(DEVICE, user_dir=tmp_path, system_dir=tmp_path / "none")
    wide = [entry(f"solver.{j:03d}", float(j)) for j in range(60)]
    find.write(key(1), wide)
    perf.put(key(1), "solver.000", '{"t":1}', {})
    for n in range(2, 200):
        if n % 10 == 0:
            assert find.record(key(1)) is not None  # key 1 stays in use
        find.write(key(n), wide)
    usage = find.usage()
    assert usage["live_bytes"] <= 0.25 * 2**20
    assert usage["evicted_keys"] > 50
    assert find.user_path.stat().st_size <= 0.4 * 2**20  # pages given back to the disk
    kept = set(find.keys())
    assert key(1) in kept and key(199) in kept  # used recently, and written last
    assert key(2) not in kept  # least recently used
    assert len(kept) + usage["evicted_keys"] == 199
    assert perf.get(key(1), "solver.000") is not None
    assert _db_cli("show", "--device", DEVICE, "--user-db-path", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "size cap 0.25 MiB" in out and f"{usage['evicted_keys']:,} keys evicted" in out


def test_a_bad_size_cap_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from miocore.errors import InvalidEnvironmentError

    monkeypatch.setenv("MIOCORE_USER_DB_MAX_MB", "-3")
    find = FindDb(DEVICE, user_dir=tmp_path, system_dir=tmp_path / "none")
    with pytest.raises(InvalidEnvironmentError, match="MIOCORE_USER_DB_MAX_MB"):
        find.write(key(), [entry("a.one", 1.0)])
