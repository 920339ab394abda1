"""The database tests' shared helpers: a test device name, real MIOpen keys, entries, and raw
SQLite access (each test file keeps its own `dirs` and `db` fixtures)."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from pathlib import Path

from miocore.db import FindDbEntry
from miocore.problem import ConvProblem

DEVICE = "cpu_test_4"

#: A MIOpen text FindDb line of two entries (key() of 64 images, forward)
BRIEF_LINE = (
    "64-56-56-3x3-64-56-56-64-1x1-1x1-1x1-0-NCHW-FP32-F=gemm.im2col:1.25,4096,"
    "miopenConvolutionFwdAlgoGEMM;direct.naive:3.5,0,miopenConvolutionFwdAlgoDirect"
)


def key(n: int = 64, c: int = 64, k: int = 64, direction: str = "forward", **kw: object) -> str:
    """A real MIOpen key built from sizes (3x3, pad 1 unless told)."""
    kw.setdefault("in_spatial", (56, 56))
    kw.setdefault("filter_spatial", (3, 3))
    kw.setdefault("pads", (1, 1))
    return ConvProblem.from_sizes(direction, n=n, c=c, k=k, **kw).key  # type: ignore[arg-type]


def entry(solver: str, time_ms: float, algorithm: str = "direct", **kw: object) -> FindDbEntry:
    return FindDbEntry(solver=solver, algorithm=algorithm, time_ms=time_ms, workspace_size=0, **kw)


def query(path: Path, sql: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute(sql).fetchall()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def set_version(path: Path, version: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()  # closing checkpoints the WAL into the file
