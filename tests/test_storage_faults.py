"""Fault injection: every storage fault leaves the convolution running and correct.

Each test breaks the user database in one way, then runs a real find and convolution through
``miocore.Handle("cpu")`` on random data, checks the result against the float64 reference,
checks that records written before the fault are still there, and that the right warning was
issued exactly once. The table of these faults and their outcomes is in docs/databases.md.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import needs
import numpy as np
import pytest

import miocore
from miocore.db import SCHEMA_VERSION, DatabaseWarning, FindDb, FindDbEntry
from miocore.db._store import Store
from miocore.db.storage import StorageDegradedWarning

EARLIER = 40  # records written before each fault

# Every fault is checked through a real find and run on the CPU: it needs a CPU solver.
pytestmark = needs.plugins("gemm")


def _problem() -> miocore.ConvProblem:
    x = miocore.TensorDescriptor("float32", (2, 4, 8, 8))
    w = miocore.TensorDescriptor("float32", (6, 4, 3, 3))
    conv = miocore.ConvolutionDescriptor(pads=(1, 1))
    return miocore.ConvProblem("forward", x=x, w=w, y=conv.output_descriptor(x, w), conv=conv)


def _earlier_key(i: int) -> str:
    return miocore.ConvProblem.from_sizes(
        "forward", n=1 + i, c=3, k=5, in_spatial=(9, 9), filter_spatial=(1, 1)
    ).key


def _write_earlier(user_dir: Path, device: str) -> None:
    with FindDb(device, user_dir=user_dir, system_dir=user_dir / "none") as db:
        for i in range(EARLIER):
            db.write(
                _earlier_key(i),
                [FindDbEntry(solver="old.s", algorithm="gemm", time_ms=i + 1.0, workspace_size=i)],
            )


def _earlier_present(user_dir: Path, device: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        db = FindDb(device, user_dir=user_dir, system_dir=user_dir / "none")
        return sum(
            1
            for i in range(EARLIER)
            if (r := db.record(_earlier_key(i))) and r.entries[0].time_ms == i + 1.0
        )


def _convolve(handle: miocore.Handle) -> None:
    """Find (measuring) then run the winner; the output must match the float64 reference."""
    p = _problem()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    y = np.full((2, 6, 8, 8), np.nan, dtype=np.float32)
    sols = handle.find_solutions(p, find_mode="NORMAL")
    assert not sols.report.failed, sols.report.failed  # no solver blamed for storage
    handle.run_solution(sols[0], x=x, w=w, y=y)
    expected = miocore.reference.convolution(p, x=x, w=w)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    # Results kept (in the file, or in memory when degraded): the next find is a hit.
    again = handle.find_solutions(p, find_mode="HYBRID")
    assert again.report.db_hit is not None
    handle.immediate(p, again[0].solver, x=x, w=w, y=y)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


@contextmanager
def _warnings() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _degraded(
    caught: list[warnings.WarningMessage], cause_text: str, path: Path
) -> list[warnings.WarningMessage]:
    mine = [w for w in caught if issubclass(w.category, StorageDegradedWarning)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    text = str(mine[0].message)
    assert cause_text in text and str(path) in text and "MIOCORE_USER_DB_PATH" in text
    return mine


def _handle(user_dir: Path) -> miocore.Handle:
    return miocore.Handle("cpu", user_db_path=user_dir, system_db_path=user_dir / "none")


def _device() -> str:
    return miocore.Handle("cpu").device.identity


@pytest.fixture
def device() -> str:
    return _device()


def _run_fault(user_dir: Path, expect: str | None, cause_text: str = "") -> miocore.Handle:
    handle = _handle(user_dir)
    with _warnings() as caught:
        _convolve(handle)
    if expect is None:
        assert handle.db_status.ok
        assert not [w for w in caught if issubclass(w.category, StorageDegradedWarning)]
    else:
        _degraded(caught, cause_text, handle.find_db.user_path)
        status = handle.db_status
        assert (status.state, status.cause) == ("degraded", expect)
        assert handle.last_report is not None and "find_db" in handle.last_report.storage
    return handle


# -- the table --------------------------------------------------------------------------


def test_user_db_path_is_a_directory(tmp_path: Path, device: str) -> None:
    (tmp_path / f"{device}.db").mkdir()
    _run_fault(tmp_path, "not-a-file", "not a database file")


def _mount_tiny_tmpfs(where: Path) -> bool:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True
    )
    return done.returncode == 0


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_full_disk(tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = tmp_path / "disk"
    if _mount_tiny_tmpfs(disk):  # a real full disk where the machine lets us mount one
        try:
            _write_earlier(disk, device)
            with FindDb(device, user_dir=disk, system_dir=disk / "none") as db:
                db.keys()  # keep the -shm and -wal in place, as a long-lived process would
                _fill(disk)
                handle = _run_fault(disk, "disk-full", "disk is full")
                assert handle.db_status.reads
                assert _earlier_present(disk, device) == EARLIER
        finally:
            subprocess.run(["umount", "-l", str(disk)], check=False)
        return
    # Otherwise (no mount allowed) SQLite's answer to a full disk, raised at the write.
    _write_earlier(disk, device)

    def full(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], object]) -> object:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "_transaction", staticmethod(full))
    handle = _run_fault(disk, "disk-full", "disk is full")
    assert handle.db_status.reads
    monkeypatch.undo()
    assert _earlier_present(disk, device) == EARLIER


def test_newer_schema_is_read_only_never_rewritten_nor_set_aside(
    tmp_path: Path, device: str
) -> None:
    _write_earlier(tmp_path, device)
    path = tmp_path / f"{device}.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 998}")
    conn.close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    _run_fault(tmp_path, "newer-schema", "newer miocore")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_uncreatable_user_db_path(
    tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("in the way")
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path / "file" / "db"))
    handle = miocore.Handle("cpu", system_db_path=tmp_path / "none")
    with _warnings() as caught:
        _convolve(handle)
    _degraded(caught, "cannot be created", tmp_path / "file" / "db")
    assert handle.db_status.cause == "cannot-create"


def test_permission_denied(tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_earlier(tmp_path, device)
    if os.geteuid() == 0:  # root ignores modes: deny the way the kernel would

        def denied(self: Store, mode: str) -> sqlite3.Connection:
            raise PermissionError(errno.EACCES, "Permission denied", str(self.path))

        monkeypatch.setattr(Store, "_connect_user", denied)
    else:
        (tmp_path / f"{device}.db").chmod(0o000)
    try:
        _run_fault(tmp_path, "permission", "permission denied")
    finally:
        (tmp_path / f"{device}.db").chmod(0o644)
        monkeypatch.undo()
    assert _earlier_present(tmp_path, device) == EARLIER


def test_io_error_on_write(tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_earlier(tmp_path, device)

    def failing(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], object]) -> object:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Store, "_transaction", staticmethod(failing))
    handle = _run_fault(tmp_path, "io-error", "I/O error")
    assert handle.db_status.reads
    monkeypatch.undo()
    assert _earlier_present(tmp_path, device) == EARLIER


# -- the suite's extra faults -------------------------------------------------------------------


def test_file_truncated_mid_page(tmp_path: Path, device: str) -> None:
    _write_earlier(tmp_path, device)
    path = tmp_path / f"{device}.db"
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size - 4096 - 1000)  # lose the last page and a half
    handle = _handle(tmp_path)
    with _warnings() as caught:
        _convolve(handle)
    corrupt = [w for w in caught if issubclass(w.category, DatabaseWarning)]
    assert len(corrupt) == 1 and "corrupt" in str(corrupt[0].message)
    assert handle.db_status.ok  # set aside and rebuilt: the file works again
    assert len(list(tmp_path.glob(f"{device}.db.corrupt-*"))) == 1
    # The readable rows of the damaged file were copied into the new one (the cut-off page
    # held the rest; they stay in the set-aside file).
    assert "copied the" in str(corrupt[0].message)
    assert 0 < _earlier_present(tmp_path, device) < EARLIER


_WAL_WRITER = """
import sys, time
from pathlib import Path
from miocore.db import FindDb, FindDbEntry
from miocore.problem import ConvProblem
db = FindDb(sys.argv[1], user_dir=Path(sys.argv[2]), system_dir=Path(sys.argv[2]) / "none")
for i in range(int(sys.argv[3])):
    key = ConvProblem.from_sizes("forward", n=1 + i, c=7, k=5, in_spatial=(9, 9),
                                 filter_spatial=(1, 1)).key
    db.write(key, [FindDbEntry(solver="w.s", algorithm="gemm", time_ms=1.0, workspace_size=0)])
    print(i, flush=True)
    if i == 20:
        sys.stdin.readline()  # the test deletes the WAL here
db.close()
"""


def test_wal_deleted_while_another_process_writes(tmp_path: Path, device: str) -> None:
    _write_earlier(tmp_path, device)
    writes = 60
    proc = subprocess.Popen(
        [sys.executable, "-c", _WAL_WRITER, device, str(tmp_path), str(writes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    while proc.stdout.readline().strip() != "20":
        pass
    (tmp_path / f"{device}.db-wal").unlink(missing_ok=True)
    handle = _handle(tmp_path)
    with _warnings():
        _convolve(handle)  # runs beside the writer
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.wait(30) == 0
    # The writer's own connection still holds the deleted WAL and checkpoints it on close.
    db = FindDb(device, user_dir=tmp_path, system_dir=tmp_path / "none")
    assert len(db.keys()) >= EARLIER + 1
    assert _earlier_present(tmp_path, device) == EARLIER


_LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("DELETE FROM find_db WHERE key = 'nothing'")
print("locked", flush=True)
time.sleep(60)
"""


def test_lock_held_by_a_stopped_process(
    tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_earlier(tmp_path, device)
    monkeypatch.setenv("MIOCORE_DB_LOCK_TIMEOUT_S", "0.5")
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCKER, str(tmp_path / f"{device}.db")], stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"locked"
        proc.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        handle = _run_fault(tmp_path, "locked", "held the lock")
        assert time.monotonic() - started < 20
        assert handle.db_status.reads
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
    assert _earlier_present(tmp_path, device) == EARLIER


def test_no_fault_no_warning(tmp_path: Path, device: str) -> None:
    _write_earlier(tmp_path, device)
    _run_fault(tmp_path, None)
    assert _earlier_present(tmp_path, device) == EARLIER


# -- many writers, killed at random ---------------------------------------------------------------

WRITERS = 16
ROUNDS = 300

_KILLABLE_WRITER = """
import sys
from pathlib import Path
from miocore.db import FindDb, FindDbEntry
from miocore.problem import ConvProblem
device, folder, writer, start = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
db = FindDb(device, user_dir=folder, system_dir=folder / "none")
with open(folder / f"ack{writer}", "a") as ack:
    for r in range(start, int(sys.argv[5])):
        key = ConvProblem.from_sizes("forward", n=1 + r, c=1 + writer, k=3, in_spatial=(5, 5),
                                     filter_spatial=(1, 1)).key
        db.write(key, [FindDbEntry(solver=f"w{writer}", algorithm="gemm", time_ms=r + 0.5,
                                   workspace_size=writer)])
        ack.write(f"{r}\\n")  # written only after the commit returned
        ack.flush()
"""


def _acked(folder: Path, writer: int) -> list[int]:
    path = folder / f"ack{writer}"
    if not path.exists():
        return []
    return [int(t) for t in path.read_text().split("\n")[:-1]]  # a torn last line is not an ack


def test_sixteen_writers_killed_at_random_lose_no_acknowledged_record(
    tmp_path: Path, device: str
) -> None:
    rng = np.random.default_rng(16)

    def start(writer: int) -> subprocess.Popen[bytes]:
        done = _acked(tmp_path, writer)
        first = done[-1] + 1 if done else 0
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                _KILLABLE_WRITER,
                device,
                str(tmp_path),
                str(writer),
                str(first),
                str(ROUNDS),
            ]
        )

    procs = {w: start(w) for w in range(WRITERS)}
    kills = 0
    deadline = time.monotonic() + 120
    while procs and time.monotonic() < deadline:
        time.sleep(float(rng.uniform(0.05, 0.3)))
        for w, proc in list(procs.items()):
            if proc.poll() is not None:
                assert proc.returncode == 0, (w, proc.returncode)
                if len(_acked(tmp_path, w)) >= ROUNDS:
                    del procs[w]
                else:
                    procs[w] = start(w)
        live = [w for w, p in procs.items() if p.poll() is None]
        if live and kills < 24:  # a kill a round: writers start fast (no numpy to import)
            victim = int(rng.choice(live))
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            kills += 1
            procs[victim] = start(victim)
    assert not procs, "writers did not finish in time"
    assert kills >= 8
    conn = sqlite3.connect(tmp_path / f"{device}.db")
    assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    conn.close()
    db = FindDb(device, user_dir=tmp_path, system_dir=tmp_path / "none")
    records = {r.key: r for r in db.items()}
    lost = 0
    for w in range(WRITERS):
        assert sorted(set(_acked(tmp_path, w))) == list(range(ROUNDS))
        for r in range(ROUNDS):
            key = miocore.ConvProblem.from_sizes(
                "forward", n=1 + r, c=1 + w, k=3, in_spatial=(5, 5), filter_spatial=(1, 1)
            ).key
            rec = records.get(key)
            lost += rec is None or rec.entries[0].time_ms != r + 0.5
    assert lost == 0
    # And the database still serves a convolution.
    _run_fault(tmp_path, None)
