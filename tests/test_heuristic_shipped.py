"""The shipped system databases, models and WTI tables: they load, rank sensibly, pass
SQLite's integrity check and are never written by reading."""

from __future__ import annotations

from pathlib import Path

import pytest

import miocore
from miocore.db.finddb import FindDb
from miocore.db.mathkeys import split_record_key
from miocore.db.packed import readable_db_file
from miocore.heuristic.features import problem_features
from miocore.heuristic.model import TreeModel
from miocore.heuristic.plugin import WTI_SUFFIX
from miocore.heuristic.wti import WtiTable
from miocore.problem.conv import ConvProblem

SHIPPED = Path(miocore.__file__).parent / "data" / "db"


@pytest.mark.skipif(
    not (SHIPPED / "cpu_x86_64_2.heuristic.npz").is_file(), reason="no shipped CPU model"
)
def test_the_shipped_cpu_model_table_and_database_load() -> None:
    model = TreeModel.load(SHIPPED / "cpu_x86_64_2.heuristic.npz")
    assert model.device == "cpu_x86_64_2" and "direct.naive" in model.solvers
    assert model.provenance["problems"] > 500
    table = WtiTable.load(SHIPPED / f"cpu_x86_64_2{WTI_SUFFIX}")
    assert table.by_solver
    db = FindDb("cpu_x86_64_2", user_dir=SHIPPED / "none", system_dir=SHIPPED)
    try:
        keys = db.keys("system")
        assert len(keys) > 500
        record = db.record(keys[0], "system")
        assert record is not None and record.entries[0].provenance["device"] == "cpu_x86_64_2"
    finally:
        db.close()


def test_the_shipped_sm90_model_ranks_a_depthwise_layer_away_from_the_generic_kernels() -> None:
    """The GPU files load without a GPU, and the model has learned what plain WTI gets worst
    on sm90 (docs/performance.md): a depthwise layer belongs to the depthwise kernel or a
    cuDNN engine, never to ``igemm.gpu_fma`` or the naive kernel."""
    model = TreeModel.load(SHIPPED / "sm90_132.heuristic.npz")
    assert model.device == "sm90_132" and model.provenance["problems"] > 900
    table = WtiTable.load(SHIPPED / f"sm90_132{WTI_SUFFIX}")
    assert {"direct.gpu_depthwise", "igemm.gpu_fma"} <= set(table.by_solver)
    db = FindDb("sm90_132", user_dir=SHIPPED / "none", system_dir=SHIPPED)
    try:
        keys = db.keys("system")
        assert len(keys) > 1000
        modes = [split_record_key(k) for k in keys]
        assert all(ConvProblem.from_key(base) is not None for base, _ in modes[:50])
        assert sum(mode == "tf32" for _, mode in modes) > 1000  # fp32 found in TF32 mode too
    finally:
        db.close()
    problem = ConvProblem.from_sizes(
        "forward",
        n=32,
        c=144,
        k=144,
        in_spatial=(56, 56),
        filter_spatial=(3, 3),
        pads=(1, 1),
        groups=144,
        dtype="float16",
        layout="NCHW",
    )
    candidates = ["direct.gpu_depthwise", "igemm.gpu_fma", "direct.gpu_naive", "gemm.gpu_im2col"]
    times = model.predict_ms(problem_features(problem), candidates)
    ranked = sorted(zip(candidates, times, strict=True), key=lambda p: p[1])
    assert ranked[0][0] == "direct.gpu_depthwise", ranked
    # In the tf32 math mode it knows the TF32 twins, and puts each ahead of its exact one on a
    # dense fp32 layer (tensor cores against FMA: measured 2-4x on such layers).
    dense = ConvProblem.from_sizes(
        "forward", n=32, c=256, k=256, in_spatial=(14, 14), filter_spatial=(3, 3), pads=(1, 1),
        dtype="float32", layout="NHWC",
    )  # fmt: skip
    pairs = [("gemm.gpu_nhwc_tf32", "gemm.gpu_nhwc"), ("igemm.gpu_tf32", "igemm.gpu_fma")]
    for twin, exact in pairs:
        t_twin, t_exact = model.predict_ms(problem_features(dense, "tf32"), [twin, exact])
        assert t_twin < t_exact, (twin, t_twin, exact, t_exact)


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.db*")), ids=lambda p: p.name)
def test_every_shipped_database_passes_sqlites_integrity_check(path: Path) -> None:
    """The system layer is opened without a whole-file check (it would cost every new process
    milliseconds), so the shipped files are checked here: packed (the form they ship in,
    miocore.db.packed), expanded as a reader expands them, and in SQLite's rollback mode."""
    import sqlite3

    assert path.name.endswith(".db.xz"), "ship system databases packed: miocore db pack"
    expanded = readable_db_file(path)
    conn = sqlite3.connect(f"file:{expanded}?mode=ro&immutable=1", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()


def test_reading_a_database_file_leaves_it_byte_for_byte(tmp_path: Path) -> None:
    """The tools that read a FindDb file (train, eval, the benchmarks) open it read-only: a
    shipped database is in SQLite's rollback mode, and opening it as a writable layer
    switched it to write-ahead mode (a changed header), which went unnoticed into the
    repository once."""
    import shutil

    from miocore.heuristic.train import DB_FILE_LAYER, open_db_file, read_samples

    shipped = readable_db_file(SHIPPED / "cpu_x86_64_2.db")  # expanded from the packed file
    copy = tmp_path / shipped.name
    shutil.copyfile(shipped, copy)
    before = copy.read_bytes()
    db = open_db_file(copy)
    try:
        samples = list(read_samples(db.items(DB_FILE_LAYER)))
    finally:
        db.close()
    assert len(samples) > 1000  # the records were read
    assert copy.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [shipped.name]  # no -wal, no user file
