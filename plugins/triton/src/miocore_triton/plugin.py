"""The ``triton`` entry point: registers the Triton implicit-GEMM solvers and their kernel
folder, whose sources Triton compiles (:mod:`miocore_triton.builder`).

Imports nothing of the solvers nor Triton: each solver is declared lazily and the builder is
named by a string, imported on the first compile.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import miocore

#: The Triton kernel sources.
KERNEL_DIR = Path(__file__).parent / "kernels"

_GPU = ("cuda", "hip")

#: (factory, name, algorithm) of every solver, in registration order.
_SOLVERS = (
    ("miocore_triton.solvers:TritonForward", "triton.igemm_fwd", "implicit_gemm"),
    ("miocore_triton.solvers:TritonBackwardData", "triton.igemm_bwd", "implicit_gemm"),
    ("miocore_triton.solvers:TritonBackwardWeights", "triton.igemm_wrw", "implicit_gemm"),
    ("miocore_triton.depthwise:TritonDepthwiseWeights", "triton.depthwise_wrw", "direct"),
)


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """``triton.igemm_fwd``, ``triton.igemm_bwd``, ``triton.igemm_wrw`` and
    ``triton.depthwise_wrw`` (GPU only)."""
    for factory, name, algorithm in _SOLVERS:
        yield miocore.SolverRecord(factory=factory, name=name, algorithm=algorithm, backends=_GPU)


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The Triton sources (``triton/conv_igemm.py``, ``triton/depthwise.py``), built by
    Triton, not NVRTC."""
    yield miocore.KernelSourceRecord(
        name="triton", path=KERNEL_DIR, builder="miocore_triton.builder:BUILDER"
    )
