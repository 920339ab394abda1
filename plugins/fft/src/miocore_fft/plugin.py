"""The plugin module named by the ``miocore`` entry point: registers the FFT solvers."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore import KernelSourceRecord, SolverRecord
from miocore_fft.gpu import KERNEL_DIR, GpuRfftSolver
from miocore_fft.solver import FftOverlapSave


@miocore.hookimpl
def miocore_solvers() -> Iterator[SolverRecord]:
    """Yield the FFT family's solvers: ``fft.overlap_save`` (CPU), ``fft.gpu_rfft`` (GPU)."""
    yield SolverRecord(solver=FftOverlapSave())
    yield SolverRecord(solver=GpuRfftSolver())


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[KernelSourceRecord]:
    """The FFT family's GPU kernel sources (``fft/fft_conv.cu``)."""
    yield KernelSourceRecord(name="fft", path=KERNEL_DIR)
