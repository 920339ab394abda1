"""miocore plugin entry point of the Winograd family."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_winograd.gpu import GPU_SOLVERS, KERNEL_DIR
from miocore_winograd.solver import WinogradRxS


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """CPU: ``winograd.rxs``; GPU: ``winograd.gpu_f2x3`` and ``winograd.gpu_f4x3``."""
    yield miocore.SolverRecord(solver=WinogradRxS())
    for solver in GPU_SOLVERS:
        yield miocore.SolverRecord(solver=solver)


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the Winograd family (``winograd/winograd_gpu.cu``)."""
    yield miocore.KernelSourceRecord(name="winograd", path=KERNEL_DIR)
