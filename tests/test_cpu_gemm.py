"""The CPU solvers' GEMM (miocore.backends.cpu_gemm): miocore's own OpenBLAS where numpy's runs
narrower kernels than the CPU has, numpy's BLAS otherwise; both against a float64 reference."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

from miocore import InvalidEnvironmentError, MiocoreError
from miocore.backends import cpu_blas, cpu_gemm

RNG = np.random.default_rng(20261127)


def _own_loads() -> bool:
    """Whether this machine can run the own OpenBLAS (AVX-512 flags, the wheel installed)."""
    return cpu_gemm.coretype_for(cpu_blas.cpu_flags()) is not None and (
        cpu_gemm._wheel_library() is not None
    )


@pytest.fixture(params=["numpy", "openblas"])
def blas(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once on numpy's BLAS and once on the own OpenBLAS (where it loads)."""
    if request.param == "openblas" and not _own_loads():
        pytest.skip("no AVX-512 CPU or scipy-openblas32 here")
    monkeypatch.setenv("MIOCORE_CPU_BLAS", request.param)
    monkeypatch.setattr(cpu_gemm, "MIN_MACS", 0)  # the small test products go through it too
    assert (cpu_gemm.own_blas() is not None) == (request.param == "openblas")
    return request.param


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray, k: int) -> bool:
    # float32 sums of k products of unit normals: error grows like sqrt(k) * eps
    return bool(np.allclose(got, want, rtol=1e-5, atol=2e-6 * np.sqrt(k) * 8))


@pytest.mark.parametrize(("m", "n", "k"), [(5, 7, 3), (64, 33, 129), (1, 9, 4), (8, 1, 5)])
def test_gemm_every_transpose_and_beta(blas: str, m: int, n: int, k: int) -> None:
    for ta, tb, beta in itertools.product([False, True], [False, True], [0.0, 1.0, 0.5]):
        a = _r(k, m).T if ta else _r(m, k)
        b = _r(n, k).T if tb else _r(k, n)
        c = _r(m, n)
        want = a.astype(np.float64) @ b.astype(np.float64) + beta * c.astype(np.float64)
        cpu_gemm.gemm(a, b, c, beta)
        assert _close(c, want, k), (blas, ta, tb, beta)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((4, 5, 6), (4, 6, 7)),
        ((5, 6), (3, 6, 7)),
        ((2, 3, 5, 6), (3, 6, 7)),
        ((2, 1, 5, 6), (1, 3, 6, 7)),
    ],
)
def test_matmul_broadcasts_batches_like_numpy(blas: str, a_shape, b_shape) -> None:
    a, b = _r(*a_shape), _r(*b_shape)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = np.empty(want.shape, np.float32)
    cpu_gemm.matmul(a, b, out)
    assert _close(out, want, a_shape[-1])
    # a transposed operand and an output whose rows are padded
    at = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    wide = np.full((*want.shape[:-1], want.shape[-1] + 3), np.nan, np.float32)
    cpu_gemm.matmul(at, b, wide[..., : want.shape[-1]])
    assert _close(wide[..., : want.shape[-1]], want, a_shape[-1])
    assert np.isnan(wide[..., want.shape[-1] :]).all()  # nothing written past the rows


def test_matmul_with_swapped_batch_axes_as_the_gemm_solvers_call_it(blas: str) -> None:
    groups, pixels, red, kg = 3, 10, 6, 4
    col, w = _r(pixels, groups, red), _r(groups, kg, red)
    y = np.empty((pixels, groups, kg), np.float32)
    cpu_gemm.matmul(col.swapaxes(0, 1), w.swapaxes(1, 2), y.swapaxes(0, 1))
    want = np.einsum("pgr,gkr->pgk", col.astype(np.float64), w.astype(np.float64))
    assert _close(y, want, red)


def test_the_own_library_runs_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    if not _own_loads():
        pytest.skip("no AVX-512 CPU or scipy-openblas32 here")
    monkeypatch.setenv("MIOCORE_CPU_BLAS", "openblas")
    lib = cpu_gemm.own_blas()
    assert lib is not None and lib.corename.lower() in cpu_blas.AVX512_CORETYPES
    calls: list[str] = []
    monkeypatch.setattr(lib, "sgemm", lambda *a: calls.append("one"))
    monkeypatch.setattr(lib, "sgemm_batch", lambda *a: calls.append("batch"))
    cpu_gemm.gemm(_r(128, 96), _r(96, 128), np.empty((128, 128), np.float32))
    cpu_gemm.matmul(_r(3, 128, 96), _r(3, 96, 128), np.empty((3, 128, 128), np.float32))
    assert calls == ["one", "batch"]
    # Products under MIN_MACS stay on numpy's call, which costs less than the library's.
    calls.clear()
    small = np.empty((16, 8), np.float32)
    cpu_gemm.gemm(_r(16, 32), _r(32, 8), small)
    cpu_gemm.matmul(_r(4, 16, 32), _r(4, 32, 8), np.empty((4, 16, 8), np.float32))
    assert calls == [] and cpu_gemm.MIN_MACS > 16 * 8 * 32 * 4


def test_layouts_blas_cannot_take_fall_back_to_numpy(blas: str) -> None:
    a = _r(6, 10)[:, ::2]  # no unit stride
    b = _r(5, 4)
    out = np.empty((6, 4), np.float32)
    cpu_gemm.matmul(a, b, out)
    assert _close(out, a.astype(np.float64) @ b, 5)
    half = np.empty((6, 4), np.float16)  # other dtypes: numpy's matmul
    cpu_gemm.matmul(a.astype(np.float16), b.astype(np.float16), half)
    assert np.allclose(half, a.astype(np.float64) @ b, rtol=1e-2, atol=1e-2)


def test_bad_choice_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_CPU_BLAS", "mkl")
    with pytest.raises(InvalidEnvironmentError) as info:
        cpu_gemm.own_blas()
    assert isinstance(info.value, MiocoreError)
    assert "MIOCORE_CPU_BLAS" in str(info.value) and "mkl" in str(info.value)


@pytest.mark.parametrize(
    ("flags", "coretype"),
    [
        ({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, "SkylakeX"),
        ({"avx2", "avx512f"}, None),  # first-generation AVX-512 (Xeon Phi): OpenBLAS knows best
        ({"avx2", "fma"}, None),
    ],
)
def test_coretype_follows_the_flags(flags: set[str], coretype: str | None) -> None:
    assert cpu_gemm.coretype_for(frozenset(flags)) == coretype


def test_the_thread_cap_reaches_the_own_library() -> None:
    """A cap applied before the own library loads holds for it; one applied after reaches it
    through threadpoolctl like every other pool."""
    if not _own_loads():
        pytest.skip("no AVX-512 CPU or scipy-openblas32 here")
    script = (
        "import os; os.environ['MIOCORE_CPU_BLAS'] = 'openblas'\n"
        "from threadpoolctl import threadpool_info, threadpool_limits\n"
        "from miocore.backends import cpu_gemm\n"
        "import numpy\n"
        "threadpool_limits(1)\n"
        "lib = cpu_gemm.own_blas()\n"
        "def own():\n"
        "    return [p['num_threads'] for p in threadpool_info() if p['filepath'] == lib.path]\n"
        "print(own())\n"
        "threadpool_limits(2)\n"
        "print(own())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[1]", "[2]"]


def test_the_narrow_blas_warning_is_silent_when_the_own_library_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from miocore.backends import cpu

    if not _own_loads():
        pytest.skip("no AVX-512 CPU or scipy-openblas32 here")
    monkeypatch.setenv("MIOCORE_CPU_BLAS", "openblas")
    monkeypatch.setattr(cpu, "_blas_checked", False)
    monkeypatch.setattr(cpu_blas, "blas_mismatch", lambda flags, libraries: "narrow")
    with caplog.at_level(logging.WARNING, logger="miocore.backends.cpu_blas"):
        cpu.CpuBackend().time_ms(lambda: None)
    assert not caplog.records


def test_the_library_loads_with_its_core_type_and_a_short_spin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OPENBLAS_CORETYPE and OPENBLAS_THREAD_TIMEOUT are set while the library loads (its
    constructor reads them) and restored after; a caller's own timeout is kept."""
    seen: list[dict[str, str | None]] = []

    def fake_cdll(path: str) -> None:
        seen.append(
            {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_THREAD_TIMEOUT")}
        )
        raise OSError("stop here")

    monkeypatch.setattr(cpu_gemm.ctypes, "CDLL", fake_cdll)
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    with pytest.raises(OSError):
        cpu_gemm.OwnOpenBlas("/nowhere/libscipy_openblas.so", "SkylakeX")
    assert seen[-1] == {
        "OPENBLAS_CORETYPE": "SkylakeX",
        "OPENBLAS_THREAD_TIMEOUT": str(cpu_gemm.THREAD_TIMEOUT),
    }
    assert "OPENBLAS_CORETYPE" not in os.environ and "OPENBLAS_THREAD_TIMEOUT" not in os.environ
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "20")
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    with pytest.raises(OSError):
        cpu_gemm.OwnOpenBlas("/nowhere/libscipy_openblas.so", "SkylakeX")
    assert seen[-1] == {"OPENBLAS_CORETYPE": "SkylakeX", "OPENBLAS_THREAD_TIMEOUT": "20"}
    assert os.environ["OPENBLAS_CORETYPE"] == "Haswell"
