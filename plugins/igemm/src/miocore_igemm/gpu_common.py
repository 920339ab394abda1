"""What the igemm GPU solvers share, whatever the direction.

The kernel folder and block size, the parameter-struct packing (every field an int64, in the
kernel's declaration order), the AMD matrix-core test, the TF32 math-mode gate, the fallback
from an invalid tuning config to the default one, and the pointer alignment check that the
invokers make before a launch. ``gpu.py`` (forward, backward data), ``gpu_wrw.py`` (backward
weights) and ``gpu_fma.py`` (exact fp32, every direction) build on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from miocore import (
    Algorithm,
    ConvProblem,
    DataType,
    ExecutionContext,
    InvalidArgumentError,
    PerfConfig,
    TunableSolver,
)
from miocore.backends.gpu_kernels import GPU_BACKENDS

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    pass

KERNEL_DIR = Path(__file__).parent / "kernels"
#: Threads of every igemm GEMM block (8 warps).
THREADS = 256
#: Dynamic shared memory a block may use without an opt-in (both vendors).
SHARED_LIMIT = 48 * 1024
#: Split-K partials beyond this are not worth the traffic (and the caller's memory).
MAX_SPLIT_WORKSPACE = 256 << 20
#: Reduction elements per pipeline stage the tensor-core kernels offer, per element type.
MMA_BK = {DataType.FLOAT16: (32, 64), DataType.BFLOAT16: (32, 64), DataType.FLOAT32: (16, 32)}
#: AMD targets whose kernels take the MFMA path (``MIO_MFMA`` in ``miocore_gpu.h``).
MFMA_ARCHS = frozenset({"gfx90a", "gfx940", "gfx941", "gfx942"})


def uses_mfma(ctx: ExecutionContext) -> bool:
    """Whether this context's kernels run on AMD matrix cores (HIP on gfx90a / gfx94x)."""
    return ctx.backend == "hip" and ctx.device.arch.split(":", 1)[0] in MFMA_ARCHS


def pack_fields(fields: tuple[str, ...], values: dict[str, int]) -> bytes:
    """A kernel's parameter struct by value: every field an int64, in ``fields`` order."""
    import numpy as np

    if set(values) != set(fields):
        raise ValueError(f"parameter fields differ: {sorted(set(values) ^ set(fields))}")
    return np.array([values[f] for f in fields], dtype=np.int64).tobytes()


def pow2_at_least(v: int) -> int:
    """The smallest power of two >= ``v`` (1 for ``v`` <= 1)."""
    return 1 << max(0, (v - 1).bit_length())


def check_alignment(tensors: Iterable[tuple[str, int, int]], what: str) -> None:
    """Raise unless each ``(name, pointer, alignment)`` is aligned; ``what`` names the kernels
    (the vector loads they were compiled with need it)."""
    for name, ptr, align in tensors:
        if ptr % align:
            raise InvalidArgumentError(
                f"{what} need {align}-byte aligned {name} here",
                field=f"{name} pointer",
                value=hex(ptr),
            )


class MmaSolverBase(TunableSolver):
    """A GPU implicit-GEMM solver: its dtypes, the math-mode gate, the config fallback."""

    algorithm = Algorithm.IMPLICIT_GEMM
    backends = GPU_BACKENDS
    dtypes: frozenset[DataType] = frozenset()

    def _math_reason(self, ctx: ExecutionContext) -> str | None:
        """Why this context's math mode excludes the solver (None: it does not)."""
        return None

    def _config(
        self, ctx: ExecutionContext, p: ConvProblem, perf_config: PerfConfig | None
    ) -> PerfConfig:
        """``perf_config`` where it is valid for ``p``, else the default config."""
        if perf_config is not None and self.is_valid_perf_config(ctx, p, perf_config):
            return perf_config
        return self.default_perf_config(ctx, p)


class Tf32Only:
    """Mixin of the fp32-through-TF32 solvers: they apply only in the ``"tf32"`` math mode,
    so a caller asking for fp32 never gets TF32 results silently."""

    dtypes = frozenset({DataType.FLOAT32})

    def _math_reason(self, ctx: ExecutionContext) -> str | None:
        mode = getattr(ctx, "math_mode", "exact")
        if mode != "tf32":
            return (
                f"math mode is {mode!r}: TF32 rounds fp32 inputs to 10 mantissa bits; pass "
                "Handle(..., math_mode='tf32') to allow it"
            )
        return None
