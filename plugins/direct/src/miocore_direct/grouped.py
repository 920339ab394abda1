"""``direct.grouped``: grouped convolutions with narrow groups (ResNeXt's 32 groups of 4-16
channels) on the CPU, every group in one compiled loop.

The tensors are staged once in float32 with the group index innermost
(:mod:`miocore_direct.grouped_kernels`), so each (input, output) channel pair is one vector
loop over all groups; there is no per-group Python loop and no per-group GEMM. The result is
rounded once into the caller's tensor. Every direction, NCHW and NHWC, float32/float16/
bfloat16, any 2-D filter, stride, padding and dilation.
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    Direction,
    ExecutionContext,
    InvalidArgumentError,
    InvokeParams,
    PerfConfig,
    Solver,
    not_applicable,
)
from miocore.backends.cpu import workspace_view

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    import numpy as np

#: Widest group (input or output channels per group) the solver takes; wider groups make
#: GEMMs that BLAS solvers run well.
MAX_GROUP_WIDTH = 16
#: Parts the backward-weights pass splits its rows into (one partial sum each).
WEIGHT_PARTS = 16
_ALIGN = 64
# Measured on the 2-core development machine (docs/performance.md, issue 18): multiply-adds
# per ns per thread of the group-vectorised loops, staging bandwidth (strided numpy copies),
# and the fixed cost of a call.
_MACS_PER_NS = 6.0
_STAGE_GBPS = 1.5
_CALL_MS = 0.03


def _grouped_view(array: np.ndarray, groups: int) -> np.ndarray:
    """A logical (N, C, H, W) array as a (N, H, W, C/g, G) view (never a copy)."""
    import numpy as np

    n, c, h, w = array.shape
    sn, sc, sh, sw = array.strides
    split = np.lib.stride_tricks.as_strided(
        array, (n, groups, c // groups, h, w), (sn, sc * (c // groups), sc, sh, sw)
    )
    return split.transpose(0, 3, 4, 2, 1)


def _weight_view(w: np.ndarray, groups: int) -> np.ndarray:
    """Weights (K, C/g, FY, FX) as a (FY, FX, C/g, K/g, G) view."""
    import numpy as np

    k, cg, fy, fx = w.shape
    s0, s1, s2, s3 = w.strides
    split = np.lib.stride_tricks.as_strided(
        w, (groups, k // groups, cg, fy, fx), (s0 * (k // groups), s0, s1, s2, s3)
    )
    return split.transpose(3, 4, 2, 1, 0)


class _Plan:
    """Geometry and workspace layout of one grouped problem."""

    def __init__(self, p: ConvProblem) -> None:
        self.direction = p.direction
        self.g = p.groups
        self.cg, self.kg = p.c // p.groups, p.k // p.groups
        self.filt = p.filter_spatial
        self.geometry = (*p.conv.strides, *p.conv.pads, *p.conv.dilations)
        x_shape = (p.n, *p.in_spatial, self.cg, self.g)
        y_shape = (p.n, *p.out_spatial, self.kg, self.g)
        w_shape = (*self.filt, self.cg, self.kg, self.g)
        self.parts = 0
        if self.direction is Direction.BACKWARD_WEIGHTS:
            self.parts = max(1, min(WEIGHT_PARTS, p.n * p.out_spatial[0]))
        self.shapes = (w_shape, x_shape, y_shape, (self.parts, *w_shape))
        self.offsets: list[int] = []
        total = 0
        for shape in self.shapes:
            self.offsets.append(total)
            total += -(-4 * math.prod(shape) // _ALIGN) * _ALIGN
        self.workspace_bytes = total
        self.macs = p.n * p.k * math.prod(p.out_spatial) * math.prod(self.filt) * self.cg
        self.staged_bytes = 8 * (math.prod(x_shape) + math.prod(y_shape))

    def predicted_ms(self, threads: int) -> float:
        """Measured multiply-add rate plus the staging copies and the call."""
        compute = self.macs / (_MACS_PER_NS * 1e6 * max(1, threads))
        return compute + self.staged_bytes / (_STAGE_GBPS * 1e6) + _CALL_MS

    def buffers(self, workspace: Any) -> list[np.ndarray]:
        """Float32 workspace regions shaped for weights, x, y and the partial sums."""
        import numpy as np

        ws = workspace_view(workspace, self.workspace_bytes)
        flat = ws[: self.workspace_bytes] if ws is not None else np.empty(0, np.uint8)
        return [
            flat[o : o + 4 * math.prod(s)].view(np.float32).reshape(s)
            for o, s in zip(self.offsets, self.shapes, strict=True)
        ]


class _GroupedInvoker:
    """Stages, runs the kernel of the plan's direction and writes the result back."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def __call__(self, handle: Any, params: InvokeParams) -> None:
        import numpy as np

        from miocore_direct import grouped_kernels as kernels
        from miocore_direct.depthwise import _apply_threads

        _apply_threads(handle)
        plan, g = self.plan, self.plan.g
        wt, xs, ys, partial = plan.buffers(params.workspace)
        x_view, y_view = _grouped_view(params.x, g), _grouped_view(params.y, g)
        w_view = _weight_view(params.w, g)
        if plan.direction is Direction.FORWARD:
            np.copyto(wt, w_view, casting="unsafe")
            np.copyto(xs, x_view, casting="unsafe")
            kernels.forward(xs, wt, ys, *plan.geometry)
            np.copyto(y_view, ys, casting="unsafe")
        elif plan.direction is Direction.BACKWARD_DATA:
            np.copyto(wt, w_view, casting="unsafe")
            np.copyto(ys, y_view, casting="unsafe")
            kernels.backward_data(ys, wt, xs, *plan.geometry)
            np.copyto(x_view, xs, casting="unsafe")
        else:
            np.copyto(xs, x_view, casting="unsafe")
            np.copyto(ys, y_view, casting="unsafe")
            kernels.backward_weights(xs, ys, partial, *plan.geometry)
            np.copyto(w_view, np.sum(partial, axis=0, out=wt), casting="unsafe")


def _threads() -> int:
    numba = sys.modules.get("numba")  # wti must not pay numba's import
    return numba.get_num_threads() if numba is not None else (os.cpu_count() or 1)


class GroupedDirectSolver(Solver):
    """Grouped convolution with narrow groups (1 < G < C, at most 16 channels per group in and
    out) on the CPU: every direction, 2-D, NCHW/NHWC, float32/float16/bfloat16."""

    name = "direct.grouped"
    algorithm = Algorithm.DIRECT
    is_dynamic = True

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D CPU problems with 1 < groups < C and groups at most 16 channels wide."""
        if ctx.backend not in self.backends:
            return not_applicable(f"direct.grouped runs on the CPU only, not on {ctx.backend!r}")
        if problem.is_transposed:
            return not_applicable("expects the canonical (mode='conv') form of the problem")
        if len(problem.in_spatial) != 2:
            return not_applicable("2-D convolutions only")
        if not 1 < problem.groups < problem.c:
            return not_applicable(
                f"groups {problem.groups} is not between 1 and the {problem.c} input channels "
                "(dense and depthwise layers have their own solvers)"
            )
        width = max(problem.c, problem.k) // problem.groups
        if width > MAX_GROUP_WIDTH:
            return not_applicable(
                f"groups of {width} channels are wider than {MAX_GROUP_WIDTH} (BLAS solvers)"
            )
        return APPLICABLE

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Bytes of the staged float32 weights, x, y and backward-weights partial sums."""
        return _Plan(problem).workspace_bytes

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The plan for ``problem`` wrapped in an invoker."""
        answer = self.is_applicable(ctx, problem)
        if not answer:
            raise InvalidArgumentError(answer.reason, field="problem", value=problem.key)
        plan = _Plan(problem)
        invoker = _GroupedInvoker(plan)
        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace_bytes,
            invoker_factory=lambda _k: invoker,
        )

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The measured multiply-add rate per thread plus staging copies."""
        return ctx.wti(problem, _Plan(problem).predicted_ms(_threads()))
