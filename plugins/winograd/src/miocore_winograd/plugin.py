"""miocore plugin entry point of the Winograd family.

Every process that uses miocore imports this module, so it imports nothing of the solvers:
each is declared lazily (name, family, backends) and its module is imported when a find first
asks it a question (``winograd.plans`` pulls in ``fractions``; the GPU solvers the compiler).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import miocore

#: The GPU kernel sources (``miocore_winograd.gpu.KERNEL_DIR``), without importing it.
KERNEL_DIR = Path(__file__).parent / "kernels"

_GPU = ("cuda", "hip")


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """CPU: ``winograd.rxs`` and ``winograd.fused``; GPU: ``winograd.gpu_f2x3`` and
    ``winograd.gpu_f4x3``."""
    for factory, name, backends in (
        ("miocore_winograd.solver:WinogradRxS", "winograd.rxs", ("cpu",)),
        ("miocore_winograd.fused:WinogradFused", "winograd.fused", ("cpu",)),
        ("miocore_winograd.gpu:WinogradGpuF2x3", "winograd.gpu_f2x3", _GPU),
        ("miocore_winograd.gpu:WinogradGpuF4x3", "winograd.gpu_f4x3", _GPU),
    ):
        yield miocore.SolverRecord(
            factory=factory, name=name, algorithm="winograd", backends=backends
        )


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the Winograd family (``winograd/winograd_gpu.cu``)."""
    yield miocore.KernelSourceRecord(name="winograd", path=KERNEL_DIR)
