"""Probe (twenty-first session): a GEMM split in row blocks over numba's OpenMP threads, each
block a single-threaded sgemm of miocore's OpenBLAS, against the same GEMM on OpenBLAS's own
two-thread pool; alone and right after a PyTorch convolution (PyTorch imported first, so numba
shares PyTorch's libgomp, as in ``cpu_vs_onednn.py`` and ``miocore.torch``).

    python benchmarks/cpu_gemm_on_openmp_probe.py

Not a solver: the numbers behind the last section of docs/performance-cpu-winograd.md.
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
from numba import njit, prange

from miocore.backends import cpu_gemm

_LIB = cpu_gemm.own_blas()
assert _LIB is not None, "miocore's own OpenBLAS is not in use on this machine"
_SGEMM = ctypes.CDLL(_LIB.path).scipy_cblas_sgemm
_INT, _PTR, _FLT = ctypes.c_int, ctypes.c_size_t, ctypes.c_float  # pointers as integers
_SGEMM.argtypes = [_INT] * 6 + [_FLT, _PTR, _INT, _PTR, _INT, _FLT, _PTR, _INT]
_SGEMM.restype = None


@njit(parallel=True, nogil=True)
def omp_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, parts: int) -> None:
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
            one, zero = np.float32(1.0), np.float32(0.0)
            _SGEMM(101, 111, 111, r1 - r0, n, k, one, a0, k, b.ctypes.data, n, zero, c0, n)


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
            omp_gemm(a, b, c, 2)

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
