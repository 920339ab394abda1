"""The check that numpy's OpenBLAS runs the CPU's widest kernels (miocore.backends.cpu_blas)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from miocore.backends import cpu_blas

OPENBLAS = {"internal_api": "openblas", "version": "0.3.31", "filepath": "/x/libopenblas.so"}


@pytest.mark.parametrize(
    ("flags", "arch", "mismatch"),
    [
        ({"avx2", "avx512f"}, "Haswell", True),  # a VM hiding an AVX-512 CPU's model
        ({"avx2", "avx512f"}, "Zen", True),
        ({"avx2", "avx512f"}, "SkylakeX", False),
        ({"avx2", "avx512f"}, "SapphireRapids", False),
        ({"avx2"}, "Haswell", False),  # no AVX-512: Haswell kernels are the widest
    ],
)
def test_mismatch_needs_avx512_and_a_narrow_openblas(flags, arch, mismatch) -> None:
    found = cpu_blas.blas_mismatch(frozenset(flags), [{**OPENBLAS, "architecture": arch}])
    assert (found is not None) == mismatch
    if mismatch:
        assert arch in found and "OPENBLAS_CORETYPE=SkylakeX" in found


def test_other_libraries_are_not_judged() -> None:
    mkl = {"internal_api": "mkl", "architecture": "Haswell"}
    omp = {"internal_api": "openmp"}
    assert cpu_blas.blas_mismatch(frozenset({"avx512f"}), [mkl, omp]) is None


def test_cpu_flags_reads_the_flags_line(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n")
    assert cpu_blas.cpu_flags(str(info)) == {"fpu", "avx2", "avx512f"}
    assert cpu_blas.cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_a_cpu_find_warns_once_per_process(monkeypatch, caplog) -> None:
    # The CPU backend's first timing in the process checks; later timings do not. (With the
    # own OpenBLAS running the GEMMs there is nothing to warn of: test_cpu_gemm.py.)
    import threadpoolctl

    monkeypatch.setenv("MIOCORE_CPU_BLAS", "numpy")

    from miocore.backends import cpu

    monkeypatch.setattr(cpu, "_blas_checked", False)
    monkeypatch.setattr(cpu_blas, "cpu_flags", lambda: frozenset({"avx512f"}))
    monkeypatch.setattr(
        threadpoolctl, "threadpool_info", lambda: [{**OPENBLAS, "architecture": "Haswell"}]
    )
    backend = cpu.CpuBackend()
    with caplog.at_level(logging.WARNING, logger="miocore.backends.cpu_blas"):
        backend.time_ms(lambda: None)
        backend.time_ms(lambda: None)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "OPENBLAS_CORETYPE=SkylakeX" in caplog.text
