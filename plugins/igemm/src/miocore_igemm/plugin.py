"""The ``igemm`` entry point: registers the implicit-GEMM solvers with miocore.

Every process that uses miocore imports this module, so it imports nothing of the solvers:
each is declared lazily (name, family, backends) and its module is imported when a find first
asks it a question (a CPU handle never imports the GPU solvers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import miocore

#: The GPU kernel sources (``miocore_igemm.gpu_common.KERNEL_DIR``), without importing it.
KERNEL_DIR = Path(__file__).parent / "kernels"

_GPU = ("cuda", "hip")

#: (factory, name, backends) of every solver, in registration order.
_SOLVERS = (
    ("miocore_igemm.solvers:ImplicitGemmForward", "igemm.fwd", ("cpu",)),
    ("miocore_igemm.solvers:ImplicitGemmBackwardData", "igemm.bwd", ("cpu",)),
    ("miocore_igemm.solvers:ImplicitGemmBackwardWeights", "igemm.wrw", ("cpu",)),
    ("miocore_igemm.gpu:GpuMmaIgemmSolver", "igemm.gpu_mma", _GPU),
    ("miocore_igemm.gpu:GpuTf32IgemmSolver", "igemm.gpu_tf32", _GPU),
    # exact fp32 on CUDA cores, all directions
    ("miocore_igemm.gpu_fma:GpuFmaIgemmSolver", "igemm.gpu_fma", _GPU),
    # backward weights on tensor cores
    ("miocore_igemm.gpu_wrw:GpuMmaWrwSolver", "igemm.gpu_mma_wrw", _GPU),
    ("miocore_igemm.gpu_wrw:GpuTf32WrwSolver", "igemm.gpu_tf32_wrw", _GPU),
    # forward and stride-1 backward data on Hopper's warpgroup tensor cores, TMA-fed (sm_90)
    ("miocore_igemm.gpu_wgmma:GpuWgmmaSolver", "igemm.gpu_wgmma", ("cuda",)),
    ("miocore_igemm.gpu_wgmma:GpuWgmmaTf32Solver", "igemm.gpu_wgmma_tf32", ("cuda",)),
    # backward weights on the same tensor cores, fp16/bf16 (sm_90)
    ("miocore_igemm.gpu_wgmma_wrw:GpuWgmmaWrwSolver", "igemm.gpu_wgmma_wrw", ("cuda",)),
)


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """CPU: ``igemm.fwd``, ``igemm.bwd``, ``igemm.wrw``; GPU: ``igemm.gpu_mma`` (fp16/bf16
    tensor cores) and ``igemm.gpu_tf32`` (fp32 through TF32, only in the ``tf32`` math mode),
    ``igemm.gpu_fma``, ``igemm.gpu_mma_wrw``, ``igemm.gpu_tf32_wrw``, ``igemm.gpu_wgmma``
    (forward and stride-1 backward data, fp16/bf16, sm_90), ``igemm.gpu_wgmma_tf32`` (the
    same for fp32 through TF32, only in the ``tf32`` math mode) and ``igemm.gpu_wgmma_wrw``
    (backward weights, fp16/bf16, sm_90)."""
    for factory, name, backends in _SOLVERS:
        yield miocore.SolverRecord(
            factory=factory, name=name, algorithm="implicit_gemm", backends=backends
        )


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the igemm family (``igemm/igemm_mma.cu``)."""
    yield miocore.KernelSourceRecord(name="igemm", path=KERNEL_DIR)
