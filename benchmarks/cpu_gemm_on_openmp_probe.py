"""Probe (twenty-first session): a GEMM split in row blocks over numba's OpenMP threads, each
block a single-threaded sgemm of miocore's OpenBLAS, against the same GEMM on OpenBLAS's own
two-thread pool; alone and right after a PyTorch convolution (PyTorch imported first, so numba
shares PyTorch's libgomp, as in ``cpu_vs_onednn.py`` and ``miocore.torch``).

    python benchmarks/cpu_gemm_on_openmp_probe.py

Not a solver: the numbers behind the last section of docs/performance-cpu-winograd.md. The
kernel calls OpenBLAS through an address given at run time, so numba caches it on disk (a
second process loads it: 0.34 s to the first result, numba's import included).
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time
from collections.abc import Callable

os.environ["OMP_NUM_THREADS"] = "2"

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from miocore.backends import cpu_gemm

_LIB = cpu_gemm.own_blas()
assert _LIB is not None, "miocore's own OpenBLAS is not in use on this machine"
#: The address of the library's ``cblas_sgemm``, passed to the kernel at run time: a ctypes
#: function used as a global would tie the compiled kernel to this process (no disk cache).
_SGEMM = ctypes.cast(ctypes.CDLL(_LIB.path).scipy_cblas_sgemm, ctypes.c_void_p).value


@intrinsic
def _sgemm_at(typingctx, fn, m, n, k, a, lda, b, ldb, c, ldc):  # type: ignore[no-untyped-def]
    """``cblas_sgemm(RowMajor, NoTrans, NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)``
    through the function address ``fn``; every argument an int64 (pointers as integers)."""
    signature = types.void(*([types.int64] * 10))

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        fnty = ir.FunctionType(ir.VoidType(), [i32] * 6 + [f32, i64, i32, i64, i32, f32, i64, i32])
        ptr = builder.inttoptr(args[0], fnty.as_pointer())
        m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_ = args[1:]

        def narrow(v):  # type: ignore[no-untyped-def]
            return builder.trunc(v, i32)

        flags = [ir.Constant(i32, 101), ir.Constant(i32, 111), ir.Constant(i32, 111)]
        one, zero = ir.Constant(f32, 1.0), ir.Constant(f32, 0.0)
        builder.call(
            ptr,
            [*flags, narrow(m_), narrow(n_), narrow(k_), one, a_, narrow(lda_), b_,
             narrow(ldb_), zero, c_, narrow(ldc_)],
        )  # fmt: skip
        return context.get_dummy_value()

    return signature, codegen


@njit(parallel=True, nogil=True, cache=True)
def omp_gemm(fn: int, a: np.ndarray, b: np.ndarray, c: np.ndarray, parts: int) -> None:
    """``c = a @ b`` (row-major float32), one row block per OpenMP thread."""
    m, k = a.shape
    n = b.shape[1]
    step = (m + parts - 1) // parts
    for p in prange(parts):
        r0 = p * step
        r1 = min(m, r0 + step)
        if r1 > r0:
            a0 = a.ctypes.data + r0 * k * 4
            c0 = c.ctypes.data + r0 * n * 4
            _sgemm_at(fn, r1 - r0, n, k, a0, k, b.ctypes.data, n, c0, n)


def median_ms(call: Callable[[], object], n: int = 40) -> float:
    call()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.set_num_threads(2)
    numba.set_num_threads(2)
    x = torch.randn(1, 64, 56, 56).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(64, 64, 3, 3)

    def torch_op() -> object:
        return torch.nn.functional.conv2d(x, wt, padding=1)

    for m, k, n in [(3136, 64, 64), (3136, 256, 64), (784, 512, 128), (25088, 64, 256)]:
        a = np.random.rand(m, k).astype(np.float32)
        b = np.random.rand(k, n).astype(np.float32)
        mine, pool = np.empty((m, n), np.float32), np.empty((m, n), np.float32)

        def on_pool(a: np.ndarray = a, b: np.ndarray = b, c: np.ndarray = pool) -> None:
            cpu_gemm.gemm(a, b, c)

        def on_omp(a: np.ndarray = a, b: np.ndarray = b, c: np.ndarray = mine) -> None:
            omp_gemm(_SGEMM, a, b, c, 2)

        _LIB.set_threads(2)
        t_pool = median_ms(on_pool)
        t_pool_after = median_ms(lambda f=on_pool: (torch_op(), f())) - median_ms(torch_op)
        _LIB.set_threads(1)  # each block on its calling thread
        on_omp()
        assert np.allclose(mine, pool, rtol=1e-4, atol=1e-3)
        t_omp = median_ms(on_omp)
        t_omp_after = median_ms(lambda f=on_omp: (torch_op(), f())) - median_ms(torch_op)
        _LIB.set_threads(2)
        print(
            f"{m}x{k}x{n}: OpenBLAS's pool {t_pool:.3f} ms (after a torch conv "
            f"{t_pool_after:.3f}); on OpenMP {t_omp:.3f} (after {t_omp_after:.3f})"
        )


if __name__ == "__main__":
    main()
