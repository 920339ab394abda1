"""The plugin module named by the ``miocore`` entry point: registers the FFT solvers.

Every process that uses miocore imports this module, so it imports nothing of the solvers:
each is declared lazily (name, family, backends) and its module is imported when a find first
asks it a question (a CPU handle never imports the GPU solver).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import miocore
from miocore import KernelSourceRecord, SolverRecord

#: The GPU kernel sources (``miocore_fft.gpu.KERNEL_DIR``), without importing it.
KERNEL_DIR = Path(__file__).parent / "kernels"


@miocore.hookimpl
def miocore_solvers() -> Iterator[SolverRecord]:
    """Yield the FFT family's solvers: ``fft.overlap_save`` (CPU), ``fft.gpu_rfft`` (GPU)."""
    yield SolverRecord(
        factory="miocore_fft.solver:FftOverlapSave",
        name="fft.overlap_save",
        algorithm="fft",
        backends=("cpu",),
    )
    yield SolverRecord(
        factory="miocore_fft.gpu:GpuRfftSolver",
        name="fft.gpu_rfft",
        algorithm="fft",
        backends=("cuda", "hip"),
    )


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[KernelSourceRecord]:
    """The FFT family's GPU kernel sources (``fft/fft_conv.cu``)."""
    yield KernelSourceRecord(name="fft", path=KERNEL_DIR)
