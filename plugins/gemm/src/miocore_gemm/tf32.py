"""The TF32 twins of the GPU GEMM solvers: the same lowering and BLAS calls, the BLAS allowed
to round float32 inputs to TF32 (cuBLAS ``CUBLAS_COMPUTE_32F_FAST_TF32``; hipBLAS keeps exact
fp32), offered only in the ``"tf32"`` math mode so that an exact-fp32 caller never gets
10-bit mantissa products."""

from __future__ import annotations

from typing import Any, ClassVar

from miocore import Applicability, ConvProblem, DataType, ExecutionContext, not_applicable


class Tf32Twin:
    """Mixin before an exact GEMM solver whose invoker passes its ``tf32`` flag to every BLAS
    call; ``exact_name`` names that exact twin in the reasons it gives."""

    numerical_notes = frozenset({"tf32"})
    tf32 = True
    exact_name: ClassVar[str]

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """float32 problems in the ``"tf32"`` math mode, then as the exact twin."""
        mode = getattr(ctx, "math_mode", "exact")
        if mode != "tf32":
            return not_applicable(
                f"math mode is {mode!r}: TF32 rounds fp32 inputs to 10 mantissa bits; pass "
                f"Handle(..., math_mode='tf32') to allow it ({self.exact_name} is the exact twin)"
            )
        if problem.dtype is not DataType.FLOAT32:
            return not_applicable(f"{problem.dtype.value} problem: TF32 applies to float32 only")
        parent: Any = super()
        return parent.is_applicable(ctx, problem)

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The exact twin's, with the BLAS at the TF32 tensor rate (half the device's fp16
        ceiling) instead of the fp32 one, at most 1. On the H200 ``gemm.gpu_nhwc_tf32``
        measured 0.77 of cuDNN's TF32 time over ResNet-50 where its exact twin measured 0.28."""
        gflops = ctx.device.ceilings.gflops
        speedup = gflops[DataType.FLOAT16] / 2 / gflops[DataType.FLOAT32]
        parent: Any = super()
        return min(1.0, parent.wti(ctx, problem) * max(1.0, speedup))
