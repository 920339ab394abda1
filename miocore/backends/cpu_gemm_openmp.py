"""OpenBLAS's threads on the OpenMP pool that numba's kernels (and PyTorch) run on.

miocore's own OpenBLAS (:mod:`miocore.backends.cpu_gemm`) is a pthreads build with a pool of
its own. A CPU solver's call alternates numba kernels (OpenMP threads) with GEMMs (OpenBLAS's
threads), and in a PyTorch process PyTorch's operations run between them on the same OpenMP
pool numba shares. On a machine whose cores are all in use, every switch from one pool to the
other waits for the cores the other pool's idle threads still hold: a GEMM right after a PyTorch
convolution took 4.8 ms where it takes 2.2 alone, and ResNet-50's layers in sequence on two
threads ran at 0.55-0.66 of oneDNN's pass (development VM, 2026-11-27,
docs/performance-cpu-winograd.md).

OpenBLAS lets the caller run its parallel work (``openblas_set_threads_callback_function``):
it splits a product into as many jobs as its thread setting allows and hands them to a
callback. Here the callback starts one OpenMP team of exactly that many threads on the GNU
OpenMP runtime numba's kernels run on (PyTorch's own, where PyTorch was imported first), so a
GEMM runs on the same, already awake threads as the kernels around it, with OpenBLAS's own
partitioning. The jobs of one product wait on each other (threads share packed panels), which
is why the team is sized to the job count rather than taken from a setting. OpenBLAS indexes
per-thread buffers by job number, so only one product may run through the callback at a time
(:data:`LOCK`).

The callback is compiled by numba (a ``cfunc``, :mod:`miocore.backends.cpu_gemm_openmp_kernels`)
and cached on disk: the first process compiles it once; later ones load it, with numba's own
start, in about half a second at their first large product.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from typing import Any

__all__ = ["LOCK", "OpenMpJobs", "install", "uninstall"]

_log = logging.getLogger(__name__)

#: One product at a time through the callback: OpenBLAS gives the jobs of every product the
#: buffers of thread numbers 0..n-1 (the pthreads pool's own calls are serialised by its lock,
#: but its batched calls are not).
LOCK = threading.Lock()

#: ``void callback(int sync, dojob_fn dojob, int numjobs, size_t jobdata_elsize, void *jobdata,
#: int dojob_data)``, pointers and sizes as 64-bit integers (the same registers on x86-64).
_CALLBACK_SIGNATURE = "void(int32, int64, int32, int64, int64, int32)"


class OpenMpJobs:
    """The compiled callback (and the team function it starts), kept alive as long as OpenBLAS
    may call them."""

    def __init__(self, callback: Any, member: Any) -> None:
        self.callback = callback
        self.member = member
        self.address: int = callback.address


#: The compiled functions, once per process (their symbols are registered once).
_compiled: OpenMpJobs | None = None


def _gomp() -> ctypes.CDLL | None:
    """The GNU OpenMP runtime numba's kernels start their teams on, as a library handle.

    numba's OpenMP pool extension needs ``libgomp``; the dynamic linker binds each of its calls
    on first use to the first runtime in the process's global scope (PyTorch's own copy, where
    PyTorch was imported: it loads it globally), else to the one the extension depends on. The
    callback must start its teams on the same runtime, or each GEMM after a kernel waits for
    the other runtime's spinning thread (8 ms a call, measured), so :func:`install` first runs
    one region of numba's own, which binds numba's calls, and then resolves the same way. None
    where numba has no OpenMP pool.
    """
    import importlib.util

    spec = importlib.util.find_spec("numba.np.ufunc.omppool")
    if spec is None or not spec.origin:
        return None
    try:
        pool = ctypes.CDLL(spec.origin)
    except OSError:
        return None
    program = ctypes.CDLL(None)  # the global scope
    return program if hasattr(program, "GOMP_parallel") else pool


def install(library_path: str) -> OpenMpJobs | None:
    """Route the OpenBLAS at ``library_path`` (the ``scipy_`` prefixed build) through OpenMP
    teams; None (nothing changed) where numba or its GNU OpenMP pool is missing, the caller
    chose OpenMP's passive wait (every team would then start cold: GEMMs measured 1.1-4.5x
    slower than on OpenBLAS's pool), OpenMP may shrink a team, or the library has no callback
    hook."""
    if _passive_chosen(os.environ) or _teams_may_shrink(os.environ):
        _log.info("OpenMP's settings (wait policy, team sizes): OpenBLAS keeps its own threads")
        return None
    try:
        import numba
        from llvmlite import binding
    except ImportError:
        return None
    lib = ctypes.CDLL(library_path)
    hook = getattr(lib, "scipy_openblas_set_threads_callback_function", None)
    if hook is None or lib.scipy_openblas_get_parallel() != 1:
        return None  # the callback exists in pthreads builds only (parallel == 1)
    global _compiled
    if _compiled is None:
        import numpy as np

        from miocore.backends import cpu_gemm_openmp_kernels as kernels

        kernels.bind_runtime(np.empty(2, np.int64))
        if numba.threading_layer() != "omp":  # no GNU OpenMP pool to share
            return None
        gomp = _gomp()
        if gomp is None:
            return None

        start, thread_number = kernels.SYMBOLS[0], kernels.SYMBOLS[1]
        binding.add_symbol(start, ctypes.cast(gomp.GOMP_parallel, ctypes.c_void_p).value)
        number_address = ctypes.cast(gomp.omp_get_thread_num, ctypes.c_void_p).value
        binding.add_symbol(thread_number, number_address)
        member = numba.cfunc("void(int64)", nopython=True, cache=True)(kernels.team_member)
        binding.add_symbol(kernels.SYMBOLS[2], member.address)
        compile_callback = numba.cfunc(_CALLBACK_SIGNATURE, nopython=True, cache=True)
        _compiled = OpenMpJobs(compile_callback(kernels.run_openblas_jobs), member)
    jobs = _compiled
    hook.argtypes = [ctypes.c_void_p]
    hook.restype = None
    hook(jobs.address)
    _log.info("OpenBLAS runs its threads on OpenMP teams (%s)", library_path)
    return jobs


def _passive_chosen(environ: Any) -> bool:
    """Whether the process asked OpenMP for the passive wait (and no spin count)."""
    policy = environ.get("OMP_WAIT_POLICY", "").strip().lower()
    return policy == "passive" and not environ.get("GOMP_SPINCOUNT")


def _teams_may_shrink(environ: Any) -> bool:
    """Whether OpenMP may start fewer threads than asked (a thread limit, dynamic teams): a
    product's jobs would then wait forever for a job that never starts."""
    dynamic = environ.get("OMP_DYNAMIC", "").strip().lower() in ("true", "1", "yes")
    return dynamic or bool(environ.get("OMP_THREAD_LIMIT"))


def uninstall(library_path: str) -> None:
    """Give the OpenBLAS at ``library_path`` its own threads back (no callback)."""
    hook = getattr(ctypes.CDLL(library_path), "scipy_openblas_set_threads_callback_function", None)
    if hook is not None:
        hook.argtypes = [ctypes.c_void_p]
        hook.restype = None
        hook(None)
