"""The ``miocore`` entry point of the direct family: registers its solvers.

Every process that uses miocore imports this module, so it imports nothing of the solvers:
each is declared lazily (name, family, backends) and its module is imported when a find first
asks it a question (numba-backed CPU kernels, the GPU solvers' compiler: only when used).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import miocore

#: The GPU kernel sources (``miocore_direct.gpu.KERNEL_DIR``), without importing it.
KERNEL_DIR = Path(__file__).parent / "kernels"

_CPU = ("cpu",)
_GPU = ("cuda", "hip")

#: (factory, name, backends) of every solver, in registration order.
_SOLVERS = (
    ("miocore_direct.depthwise:DepthwiseDirectSolver", "direct.depthwise", _CPU),
    ("miocore_direct.grouped:GroupedDirectSolver", "direct.grouped", _CPU),
    ("miocore_direct.taps:TapsDirectSolver", "direct.taps", _CPU),
    ("miocore_direct.naive:NaiveDirectSolver", "direct.naive", _CPU),
    ("miocore_direct.gpu:GpuNaiveDirectSolver", "direct.gpu_naive", _GPU),
    ("miocore_direct.gpu_tiled:GpuTiledDirectSolver", "direct.gpu_tiled", _GPU),
    ("miocore_direct.gpu_depthwise:GpuDepthwiseSolver", "direct.gpu_depthwise", _GPU),
)


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Yield the direct family's solvers: depthwise, grouped, per-tap BLAS, naive, GPU."""
    for factory, name, backends in _SOLVERS:
        yield miocore.SolverRecord(
            factory=factory, name=name, algorithm="direct", backends=backends
        )


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the direct family (``direct/naive_conv.cu``)."""
    yield miocore.KernelSourceRecord(name="direct", path=KERNEL_DIR)
