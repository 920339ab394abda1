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

#: (factory, name) of every solver, in registration order.
_SOLVERS = (
    ("miocore_triton.solvers:TritonForward", "triton.igemm_fwd"),
    ("miocore_triton.solvers:TritonBackwardData", "triton.igemm_bwd"),
    ("miocore_triton.solvers:TritonBackwardWeights", "triton.igemm_wrw"),
    ("miocore_triton.solvers:TritonDepthForward", "triton.depth_fwd"),
    ("miocore_triton.solvers:TritonDepthBackwardData", "triton.depth_bwd"),
    ("miocore_triton.solvers:TritonDepthBackwardWeights", "triton.depth_wrw"),
)


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """``triton.igemm_fwd``, ``triton.igemm_bwd`` and ``triton.igemm_wrw``, and their
    depth-image forms ``triton.depth_fwd``, ``triton.depth_bwd``, ``triton.depth_wrw`` (GPU
    only)."""
    for factory, name in _SOLVERS:
        yield miocore.SolverRecord(
            factory=factory, name=name, algorithm="implicit_gemm", backends=_GPU
        )


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The Triton sources (``triton/conv_igemm.py``, ``triton/conv_wrw.py``,
    ``triton/copies.py``, ``triton/depth.py``), built by Triton, not NVRTC."""
    yield miocore.KernelSourceRecord(
        name="triton", path=KERNEL_DIR, builder="miocore_triton.builder:BUILDER"
    )
