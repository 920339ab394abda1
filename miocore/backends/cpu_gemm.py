"""The CPU solvers' single-precision GEMM: numpy's BLAS, or an OpenBLAS of miocore's own.

numpy's OpenBLAS picks its kernels from the CPU model. Where it cannot read one (virtual
machines that report "AMD EPYC" or a generic model), it runs its Haswell (AVX2) kernels on
CPUs with AVX-512, at about half the speed oneDNN reaches on the same cores
(:mod:`miocore.backends.cpu_blas` detects this). OpenBLAS reads ``OPENBLAS_CORETYPE`` only when
it loads, long before miocore runs, so miocore loads a second OpenBLAS (the ``scipy-openblas32``
wheel, symbols prefixed ``scipy_``, so it never clashes with numpy's) with the core type the
CPU's feature flags call for, and the CPU solvers' float32 GEMMs of :data:`MIN_MACS` or more go
through it. Everywhere else (numpy's OpenBLAS already right, another BLAS, the wheel absent,
other dtypes, small products) they are numpy's own ``matmul``, or SciPy's sgemm where a
product accumulates into its output.

``MIOCORE_CPU_BLAS`` chooses: ``auto`` (the default: the own OpenBLAS only where numpy's runs
narrower kernels than the CPU has), ``numpy``, ``openblas`` (the own OpenBLAS whenever it
loads, with the core type the flags call for).

The own library's threads follow threadpoolctl like every other pool (it finds the library by
its ``libscipy_openblas`` prefix); on loading it takes the thread count numpy's BLAS has then,
so a cap applied before it loaded holds for it too. Its parallel work runs on OpenMP teams, the
threads numba's kernels (and PyTorch) run on, where numba is installed
(:mod:`miocore.backends.cpu_gemm_openmp`; ``MIOCORE_CPU_BLAS_THREADS=auto|openmp|openblas``).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import threading

import numpy as np

from miocore import env
from miocore.backends.cpu_gemm_openmp import LOCK, OpenMpJobs
from miocore.errors import InvalidEnvironmentError

__all__ = [
    "MIN_MACS",
    "THREAD_TIMEOUT",
    "OwnOpenBlas",
    "coretype_for",
    "gemm",
    "gemms_on_openmp",
    "matmul",
    "own_blas",
]

_log = logging.getLogger(__name__)

_F32 = np.dtype(np.float32)
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_INT_MAX = 2**31 - 1  # scipy-openblas32's blasint is 32-bit
#: Multiply-adds under which a product stays on numpy's call (4 us cheaper than the library's
#: through ctypes): numpy's OpenBLAS runs products up to 65536 x 4 multiply-adds on the calling
#: thread (its GEMM_MULTITHREAD_THRESHOLD), so its own pool never wakes, and never spins (below).
MIN_MACS = (1 << 18) + 1
#: ``OPENBLAS_THREAD_TIMEOUT`` of the own library: its idle workers spin 2**14 cycles (a few
#: microseconds) before they sleep, not OpenBLAS's default 2**28 (about 0.1 s). On a machine
#: whose cores are all busy with one call's threads, a worker still spinning after a GEMM holds
#: a core that the next numba kernel's OpenMP region waits for: a 0.05 ms region took 4-8 ms
#: right after a two-thread GEMM (development VM, 2026-11-27); with 2**14, 0.057 ms, for 2-15%
#: on back-to-back GEMMs.
THREAD_TIMEOUT = 14
_CHOICES = ("auto", "numpy", "openblas")
_POOLS = ("auto", "openmp", "openblas")


def coretype_for(flags: frozenset[str]) -> str | None:
    """The OpenBLAS core type whose kernels a CPU with these feature flags runs best, where
    that is an AVX-512 one (None otherwise: OpenBLAS's own choice is then right)."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    return None


#: One matrix operand in BLAS terms: (address, transpose flag, leading dimension in elements).
_Matrix = tuple[int, int, int]


class OwnOpenBlas:
    """``scipy-openblas32`` loaded with a chosen core type: ``sgemm`` and its strided batch."""

    def __init__(self, path: str, coretype: str) -> None:
        # Both are read once, by the library's constructor; a caller's own timeout is kept.
        settings = {"OPENBLAS_CORETYPE": coretype}
        if not os.environ.get("OPENBLAS_THREAD_TIMEOUT"):
            settings["OPENBLAS_THREAD_TIMEOUT"] = str(THREAD_TIMEOUT)
        saved = {name: os.environ.get(name) for name in settings}
        os.environ.update(settings)
        try:
            lib = ctypes.CDLL(path)
        finally:
            for name, value in saved.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value
        lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
        self.path = path
        self.corename = lib.scipy_openblas_get_corename().decode("ascii", "replace")
        i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
        self._sgemm = lib.scipy_cblas_sgemm
        self._sgemm.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
        self._sgemm.restype = None
        self._batch = lib.scipy_cblas_sgemm_batch_strided
        self._batch.argtypes = [i, i, i, i, i, i, f, p, i, i, p, i, i, f, p, i, i, i]
        self._batch.restype = None
        self._set_threads = lib.scipy_openblas_set_num_threads
        self._set_threads.argtypes = [i]
        #: Set where the library runs its threads on numba's OpenMP pool (:meth:`use_openmp`).
        self.openmp: OpenMpJobs | None = None

    def use_openmp(self, enable: bool) -> bool:
        """Run the library's parallel work on numba's OpenMP threads (enable) or on its own
        pool (:mod:`miocore.backends.cpu_gemm_openmp`); whether it now runs on OpenMP's."""
        from miocore.backends.cpu_gemm_openmp import install, uninstall

        with LOCK:
            self.openmp = install(self.path) if enable else None
            if self.openmp is None:
                uninstall(self.path)
        return self.openmp is not None

    def set_threads(self, threads: int) -> None:
        """Size the library's thread pool."""
        self._set_threads(max(1, int(threads)))

    def sgemm(
        self, a: _Matrix, b: _Matrix, c: _Matrix, m: int, n: int, k: int, beta: float
    ) -> None:
        """Row-major ``c = a @ b + beta * c`` for one matrix each: ``(pointer, trans, ld)``."""
        args = (_ROW_MAJOR, a[1], b[1], m, n, k, 1.0, a[0], a[2], b[0], b[2], beta, c[0], c[2])
        if self.openmp is None:
            self._sgemm(*args)
            return
        with LOCK:
            self._sgemm(*args)

    def sgemm_batch(
        self, a: _Matrix, b: _Matrix, c: _Matrix, m: int, n: int, k: int, steps: tuple[int, ...],
        count: int,
    ) -> None:  # fmt: skip
        """Row-major ``c[i] = a[i] @ b[i]`` for ``count`` matrices ``steps`` elements apart."""
        args = (
            _ROW_MAJOR, a[1], b[1], m, n, k, 1.0, a[0], a[2], steps[0], b[0], b[2], steps[1],
            0.0, c[0], c[2], steps[2], count,
        )  # fmt: skip
        if self.openmp is None:
            self._batch(*args)
            return
        with LOCK:
            self._batch(*args)


_lock = threading.Lock()
#: (the raw settings, the library) of the last choice
_chosen: tuple[str, OwnOpenBlas | None] | None = None


def _setting(name: str, choices: tuple[str, ...]) -> str:
    """The variable's value, one of ``choices`` (the first is the default)."""
    value = env.get(name, choices[0]).strip().lower()
    if value not in choices:
        raise InvalidEnvironmentError(
            f"expected one of {', '.join(choices)}", field=name, value=value
        )
    return value


def _load(choice: str) -> OwnOpenBlas | None:
    from miocore.backends.cpu_blas import AVX512_CORETYPES, blas_mismatch, cpu_flags

    if choice == "numpy":
        return None
    flags = cpu_flags()
    coretype = coretype_for(flags)
    if coretype is None:
        return None
    from threadpoolctl import threadpool_info

    numpy_pools = threadpool_info()
    if choice == "auto" and blas_mismatch(flags, numpy_pools) is None:
        return None
    path = _wheel_library()
    if path is None:
        _log.info("scipy-openblas32 is not installed: the CPU solvers' GEMMs stay on numpy's BLAS")
        return None
    try:
        own = OwnOpenBlas(path, coretype)
    except (OSError, AttributeError) as exc:
        _log.warning("could not load %s (%s): GEMMs stay on numpy's BLAS", path, exc)
        return None
    if own.corename.lower() not in AVX512_CORETYPES:
        # Someone loaded the wheel's library before (importing scipy_openblas32 does): it kept
        # the core type it chose then, and gains nothing over numpy's.
        _log.info(
            "%s was loaded before with %s kernels: GEMMs stay on numpy's BLAS", path, own.corename
        )
        return None
    blas = [p for p in numpy_pools if p.get("user_api") == "blas"]
    if blas:
        own.set_threads(int(blas[0].get("num_threads") or 1))
    teams = _setting("MIOCORE_CPU_BLAS_THREADS", _POOLS) != "openblas"
    pool = "OpenMP" if own.use_openmp(teams) else "its own"
    _log.info("CPU GEMMs through %s (%s kernels, threads: %s)", own.path, own.corename, pool)
    return own


def _wheel_library() -> str | None:
    """The shared library of the ``scipy-openblas32`` wheel, found without importing the
    package (its ``__init__`` loads the library, before a core type could be set)."""
    spec = importlib.util.find_spec("scipy_openblas32")
    if spec is None or not spec.submodule_search_locations:
        return None
    libdir = os.path.join(next(iter(spec.submodule_search_locations)), "lib")
    try:
        names = sorted(n for n in os.listdir(libdir) if n.startswith("libscipy_openblas"))
    except OSError:
        return None
    return os.path.join(libdir, names[0]) if names else None


def own_blas() -> OwnOpenBlas | None:
    """The own OpenBLAS the CPU solvers' GEMMs run on, or None where they use numpy's. Chosen
    once per process and per value of ``MIOCORE_CPU_BLAS`` and ``MIOCORE_CPU_BLAS_THREADS``
    (two dictionary lookups a call)."""
    global _chosen
    environ = os.environ
    raw = environ.get("MIOCORE_CPU_BLAS", "") + "/" + environ.get("MIOCORE_CPU_BLAS_THREADS", "")
    current = _chosen
    if current is not None and current[0] == raw:
        return current[1]
    with _lock:
        if _chosen is None or _chosen[0] != raw:
            _chosen = (raw, _load(_setting("MIOCORE_CPU_BLAS", _CHOICES)))
        return _chosen[1]


def gemms_on_openmp() -> bool:
    """Whether the CPU solvers' GEMMs run their parallel work on OpenMP teams, the threads
    numba's kernels use (:mod:`miocore.backends.cpu_gemm_openmp`)."""
    lib = own_blas()
    return lib is not None and lib.openmp is not None


def _layout(shape: tuple[int, ...], strides: tuple[int, ...], output: bool) -> tuple[int, int]:
    """``(trans, ld)`` of the last two axes in row-major BLAS terms; ``ld`` 0 where BLAS cannot
    take them (no unit stride; an output must have its columns contiguous)."""
    rows, cols = shape[-2], shape[-1]
    rs, cs = strides[-2], strides[-1]
    if rs & 3 or cs & 3:
        return _NO_TRANS, 0
    if cs == 4 or cols == 1:
        ld = rs >> 2 if rows > 1 else cols
        return _NO_TRANS, (ld if ld >= cols else 0)
    if not output and (rs == 4 or rows == 1):
        ld = cs >> 2 if cols > 1 else rows
        return _TRANS, (ld if ld >= rows else 0)
    return _NO_TRANS, 0


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, beta: float = 0.0) -> None:
    """``c = a @ b + beta * c`` in place, for 2-D float32 arrays; ``c`` must not overlap ``a``
    or ``b``. Any unit-stride layout of ``a`` and ``b`` (row-major or a transposed view).
    Products of :data:`MIN_MACS` or more run on :func:`own_blas` where it is in use, the rest
    (and everything elsewhere) on SciPy's sgemm, in place, or numpy."""
    lib = own_blas()
    if lib is not None and c.size * a.shape[1] >= MIN_MACS and _fits(a, b, c):
        ta, lda = _layout(a.shape, a.strides, False)
        tb, ldb = _layout(b.shape, b.strides, False)
        _, ldc = _layout(c.shape, c.strides, True)
        if lda and ldb and ldc:
            pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
            m, k = a.shape
            lib.sgemm((pa, ta, lda), (pb, tb, ldb), (pc, 0, ldc), m, b.shape[1], k, float(beta))
            return
    if not _scipy_gemm(a, b, c, beta):
        if beta == 0.0:
            np.matmul(a, b, out=c)
        else:
            if beta != 1.0:
                c *= beta
            c += a @ b


def _fortran(m: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``(array, trans)`` with ``op(array) == m.T`` and ``array`` Fortran-contiguous."""
    if m.flags.c_contiguous:
        return m.T, 0
    if m.flags.f_contiguous:
        return m, 1
    return None


def _scipy_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, beta: float) -> bool:
    """``c = a @ b + beta * c`` through SciPy's sgemm, in place (no temporary for ``beta``),
    where SciPy is installed and the arrays are contiguous float32 (or transposed views)."""
    fa, fb = _fortran(a), _fortran(b)
    if fa is None or fb is None or not c.flags.c_contiguous or not _fits(a, b, c):
        return False
    try:
        from scipy.linalg.blas import sgemm  # imported on first use: about half a second
    except ImportError:
        return False
    # Row-major c = a @ b is column-major c.T = b.T @ a.T: the transposes are Fortran arrays.
    got = sgemm(1.0, fb[0], fa[0], beta=beta, c=c.T, trans_a=fb[1], trans_b=fa[1], overwrite_c=1)
    if got.ctypes.data != c.ctypes.data:  # f2py copied c after all: write the result back
        c[...] = got.T
    return True


def _fits(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> bool:
    """float32, not empty, and every size and stride within the library's 32-bit integers."""
    for x in (a, b, c):
        if x.dtype != _F32 or not 0 < x.size <= _INT_MAX or not x.flags.aligned:
            return False
        if x.ndim and max(x.strides) > 4 * _INT_MAX:
            return False
    return True


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b, out=out)`` (batch dimensions broadcast as numpy does) for float32
    arrays through :func:`own_blas` where it is in use and the product has :data:`MIN_MACS`
    multiply-adds or more; numpy's own ``matmul`` otherwise. ``out`` must not overlap ``a`` or
    ``b``."""
    lib = own_blas()
    if (
        lib is not None
        and a.ndim >= 2
        and b.ndim >= 2
        and out.size * a.shape[-1] >= MIN_MACS  # smaller: numpy's call costs less
        and _fits(a, b, out)
        and _batched(lib, a, b, out)
    ):
        return out
    np.matmul(a, b, out=out)
    return out


def _batched(lib: OwnOpenBlas, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """Run a (batched) matmul as sgemm / strided-batch sgemm calls; False where the layout does
    not allow it (the caller then uses numpy)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = out.shape[:-2]
    if b.shape[-2] != k or out.shape[-2:] != (m, n) or len(batch) < max(a.ndim, b.ndim) - 2:
        return False
    if a.shape[:-2] != batch or b.shape[:-2] != batch:  # broadcast batch dimensions
        try:
            a = np.broadcast_to(a, (*batch, m, k))
            b = np.broadcast_to(b, (*batch, k, n))
        except ValueError:
            return False
    ta, lda = _layout(a.shape, a.strides, False)
    tb, ldb = _layout(b.shape, b.strides, False)
    _, ldc = _layout(out.shape, out.strides, True)
    if not (lda and ldb and ldc):
        return False
    pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data
    if not batch:
        lib.sgemm((pa, ta, lda), (pb, tb, ldb), (pc, 0, ldc), m, n, k, 0.0)
        return True
    dims = _merged(batch, (a.strides, b.strides, out.strides))
    if dims is None:
        return False
    *outer, (count, steps) = dims or [(1, (0, 0, 0))]
    for index in np.ndindex(*(size for size, _ in outer)):
        sa = sb = sc = 0
        for i, (_, st) in zip(index, outer, strict=True):
            sa, sb, sc = sa + 4 * i * st[0], sb + 4 * i * st[1], sc + 4 * i * st[2]
        mats = (pa + sa, ta, lda), (pb + sb, tb, ldb), (pc + sc, 0, ldc)
        if count == 1:
            lib.sgemm(*mats, m, n, k, 0.0)
        else:
            lib.sgemm_batch(*mats, m, n, k, steps, count)
    return True


def _merged(
    shape: tuple[int, ...], strides: tuple[tuple[int, ...], ...]
) -> list[tuple[int, tuple[int, ...]]] | None:
    """Batch dimensions as ``(size, (step_a, step_b, step_out))`` in elements, neighbours merged
    where every operand steps evenly across them; the last one becomes the strided batch."""
    dims: list[tuple[int, tuple[int, ...]]] = []
    for axis, size in enumerate(shape):
        if size == 1:
            continue
        steps = tuple(s[axis] for s in strides)
        if any(st % 4 or st < 0 for st in steps):
            return None
        steps = tuple(st // 4 for st in steps)
        if dims:
            prev_size, prev = dims[-1]
            if all(p == st * size for p, st in zip(prev, steps, strict=True)):
                dims[-1] = (prev_size * size, steps)
                continue
        dims.append((size, steps))
    return dims
