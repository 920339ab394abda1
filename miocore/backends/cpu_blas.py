"""Whether numpy's OpenBLAS runs the widest kernels the CPU has.

OpenBLAS chooses its kernels from the CPU model it reads. A virtual machine that hides the
model (the development VM reports "AMD EPYC" without its family) gets OpenBLAS's Haswell
(AVX2) kernels on a CPU with AVX-512: single-thread sgemm 88 GFLOP/s there, 223 with
``OPENBLAS_CORETYPE=SkylakeX`` set before numpy loads (2026-11-27), while oneDNN, which reads
the feature flags, runs its AVX-512 code. Every GEMM-based CPU solver then runs at under half
its speed, and find's choices follow. Checked once, on a find's first CPU timing (never on a
FindDb hit): threadpoolctl inspects the loaded libraries. Where miocore's own OpenBLAS
(:mod:`miocore.backends.cpu_gemm`) runs the solvers' GEMMs instead, there is nothing to warn of.
"""

from __future__ import annotations

import logging

__all__ = ["AVX512_CORETYPES", "blas_mismatch", "cpu_flags", "warn_if_narrow"]

_log = logging.getLogger(__name__)

#: OpenBLAS core types whose kernels use AVX-512 (lower case, as threadpoolctl reports them).
AVX512_CORETYPES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (Linux; empty where the file cannot be read)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def blas_mismatch(flags: frozenset[str], libraries: list[dict]) -> str | None:
    """A sentence naming an OpenBLAS that runs narrower kernels than the CPU has, or None.

    ``flags``: the CPU's feature flags; ``libraries``: threadpoolctl's ``threadpool_info()``."""
    if "avx512f" not in flags:
        return None
    for lib in libraries:
        arch = str(lib.get("architecture") or "")
        if lib.get("internal_api") == "openblas" and arch.lower() not in AVX512_CORETYPES:
            return (
                f"OpenBLAS {lib.get('version', '')} ({lib.get('filepath', '?')}) runs its "
                f"{arch or 'generic'} kernels on a CPU with AVX-512 (a CPU model it does not "
                "know, as on some virtual machines): GEMM-based CPU solvers run at under half "
                "their speed. Install scipy-openblas32 (miocore then runs its GEMMs on an "
                "OpenBLAS of its own) or set OPENBLAS_CORETYPE=SkylakeX before numpy is imported."
            )
    return None


def warn_if_narrow() -> str | None:
    """Log :func:`blas_mismatch` for the libraries this process has loaded (a warning); the
    sentence, or None. The CPU backend calls it once per process, where the solvers' GEMMs do
    not run on miocore's own OpenBLAS."""
    from threadpoolctl import threadpool_info

    found = blas_mismatch(cpu_flags(), threadpool_info())
    if found:
        _log.warning(found)
    return found
