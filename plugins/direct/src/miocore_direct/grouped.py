"""``direct.grouped``: grouped convolutions with narrow groups (ResNeXt's 32 groups of 4-16
channels) on the CPU, every group in one compiled loop.

The tensors are staged once in float32 with the group index innermost
(:mod:`miocore_direct.grouped_kernels`), so each (input, output) channel pair is one vector
loop over all groups; there is no per-group Python loop and no per-group GEMM. The result is
rounded once into the caller's tensor. Every direction, NCHW and NHWC, float32/float16/
bfloat16, any 2-D filter, stride, padding and dilation.

Groups as wide in as out of 2, 4, 8 or 16 channels (ResNeXt's) take the explicit-vector
kernels (:mod:`miocore_direct.grouped_vector`, :mod:`miocore_direct.grouped_simd`): no wasted
multiply-adds, 1.5-4x faster than the shifted-diagonal kernels
(:mod:`miocore_direct.grouped_shift`, staging in :mod:`miocore_direct.grouped_stage`), which
remain for other widths up to :data:`SHIFT_MAX_WIDTH` (3, 5, 6, 7), themselves 3-10x faster than
the group-innermost loop.
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
    DataType,
    Direction,
    ExecutionContext,
    InvalidArgumentError,
    InvokeParams,
    PerfConfig,
    Solver,
    not_applicable,
)
from miocore_direct.grouped_vector import VectorInvoker, VectorPlan, vector_applies
from miocore_direct.pool_choice import PooledInvoker
from miocore_direct.regions import Float32Regions

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    import numpy as np

#: Widest group (input or output channels per group) the solver takes; wider groups make
#: GEMMs that BLAS solvers run well.
MAX_GROUP_WIDTH = 16
#: Parts the backward-weights pass splits its rows into (one partial sum each).
WEIGHT_PARTS = 16
#: Widest group (in == out) that takes the shifted-diagonal kernels. Their generated bodies
#: grow with ``2W - 1`` shifts: width 16 compiled in about 300 s and wastes half its
#: multiply-adds, so wider groups keep the group-innermost loop.
SHIFT_MAX_WIDTH = 8
#: Widest filter row and largest column stride / dilation of the shifted-diagonal kernels.
SHIFT_MAX_FILTER = 7
SHIFT_MAX_STEP = 2
#: Bytes of input and dy rows per backward-weights call of the shifted-diagonal kernel.
CHUNK_BYTES = 384 * 1024
# Measured on the 2-core development machine (docs/performance-cpu-grouped.md): multiply-adds
# per ns per thread of the group-vectorised loops, staging bandwidth (strided numpy copies),
# and the fixed cost of a call.
_MACS_PER_NS = 6.0
_STAGE_GBPS = 1.5
_CALL_MS = 0.03
# The shifted-diagonal kernels: multiply-adds per ns per thread counting the wasted ones
# (``2W - 1`` per useful ``W``), measured 2026-11-25 on the kernels alone (one thread:
# 36 on 128 channels at 56x56, 27 on 256 at 28x28), and the staging copies (numpy, 14-29 GB/s).
_SHIFT_MACS_PER_NS = 28.0
_SHIFT_STAGE_GBPS = 12.0


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
        self.regions = Float32Regions((w_shape, x_shape, y_shape, (self.parts, *w_shape)))
        self.workspace_bytes = self.regions.nbytes
        self.macs = p.n * p.k * math.prod(p.out_spatial) * math.prod(self.filt) * self.cg
        self.staged_bytes = 8 * (math.prod(x_shape) + math.prod(y_shape))

    def predicted_ms(self, threads: int) -> float:
        """Measured multiply-add rate plus the staging copies and the call."""
        compute = self.macs / (_MACS_PER_NS * 1e6 * max(1, threads))
        return compute + self.staged_bytes / (_STAGE_GBPS * 1e6) + _CALL_MS

    def buffers(self, workspace: Any) -> list[np.ndarray]:
        """Float32 workspace regions shaped for weights, x, y and the partial sums."""
        return self.regions.views(workspace)


class _GroupedInvoker(PooledInvoker):
    """Stages, runs the kernel of the plan's direction and writes the result back."""

    plan: _Plan

    def _run(self, params: InvokeParams) -> None:
        import numpy as np

        from miocore_direct import grouped_kernels as kernels

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


def shift_applies(p: ConvProblem) -> bool:
    """Whether ``p`` (already a ``direct.grouped`` problem) takes the shifted-diagonal path."""
    width = p.c // p.groups
    return (
        width == p.k // p.groups
        and width <= SHIFT_MAX_WIDTH
        and p.filter_spatial[1] <= SHIFT_MAX_FILTER
        and p.conv.strides[1] <= SHIFT_MAX_STEP
        and p.conv.dilations[1] <= SHIFT_MAX_STEP
    )


def _direct_nhwc(desc: Any) -> bool:
    """Whether a caller tensor can be the kernels' float32 channels-last array itself."""
    return desc.dtype is DataType.FLOAT32 and desc.is_packed and desc.layout == "NHWC"


class _ShiftPlan:
    """Geometry and workspace of the shifted-diagonal path: diagonal weights
    ``(FY, FX, 2W-1, C)``, the padded input (x, or zero-inserted dy for backward data) and,
    unless the caller's tensor is packed float32 NHWC, the unpadded other tensor (y, dx or
    dy)."""

    def __init__(self, p: ConvProblem) -> None:
        self.direction = p.direction
        self.width = p.c // p.groups
        self.shifts = 2 * self.width - 1
        self.filt = fy, fx = p.filter_spatial
        (self.sh, self.sw), (ph, pw), (self.dh, self.dw) = (
            p.conv.strides,
            p.conv.pads,
            (p.conv.dilations),
        )
        (h, w), (oh, ow) = p.in_spatial, p.out_spatial
        margin = self.width - 1
        if self.direction is Direction.BACKWARD_DATA:  # dy zero-inserted, flipped filter
            rows, cols = h + (fy - 1) * self.dh, w + (fx - 1) * self.dw
            self.offsets = ((fy - 1) * self.dh - ph, (fx - 1) * self.dw - pw, margin)
            self.steps = (self.sh, self.sw)
            other, other_desc = (p.n, h, w, p.c), p.x
        else:
            rows, cols = (
                (oh - 1) * self.sh + (fy - 1) * self.dh + 1,
                (ow - 1) * self.sw + (fx - 1) * self.dw + 1,
            )
            self.offsets, self.steps = (ph, pw, margin), (1, 1)
            other, other_desc = (p.n, oh, ow, p.k), p.y
        self.direct = _direct_nhwc(other_desc)
        self.shapes = (
            (fy, fx, self.shifts, p.k),
            (p.n, rows, cols, p.c + 2 * margin),
            other if not self.direct else (0,),
        )
        self.other = other
        # backward weights: output rows per kernel call, about CHUNK_BYTES of x and dy rows
        # (b8 128x56x56: 31 ms in one call, 11-12 ms in chunks of 4-16 rows)
        row_bytes = 4 * (cols * (p.c + 2 * margin) * self.dh * fy + other[2] * other[3])
        self.chunk_rows = max(1, CHUNK_BYTES // row_bytes)
        self.regions = Float32Regions(self.shapes)
        self.workspace_bytes = self.regions.nbytes
        useful = p.n * p.k * math.prod(p.out_spatial) * fy * fx * self.width
        if self.direction is Direction.BACKWARD_DATA:
            useful *= self.sh * self.sw  # the zero-inserted rows and columns are computed
        self.macs = useful * self.shifts // self.width
        self.staged_bytes = 8 * (math.prod(self.shapes[1]) + math.prod(self.shapes[2]))

    def generated(self) -> list[tuple[str, str]]:
        """The generated kernel (name prefix, source) the invoker loads."""
        from miocore_direct import grouped_shift as kernels

        if self.direction is Direction.BACKWARD_WEIGHTS:
            return [kernels.weights_spec(self.sw, self.dw, self.shifts)]
        sw = 1 if self.direction is Direction.BACKWARD_DATA else self.sw  # zero-inserted dy
        return [kernels.forward_spec(self.filt[1], sw, self.dw, self.shifts)]

    def predicted_ms(self, threads: int) -> float:
        """Measured multiply-add rate (wasted lanes included) plus staging and the call."""
        compute = self.macs / (_SHIFT_MACS_PER_NS * 1e6 * max(1, threads))
        return compute + self.staged_bytes / (_SHIFT_STAGE_GBPS * 1e6) + _CALL_MS

    def buffers(self, workspace: Any) -> list[np.ndarray]:
        """Float32 workspace regions: diagonal weights, padded input, unpadded other."""
        return self.regions.views(workspace)


class _ShiftInvoker(PooledInvoker):
    """Stages, runs the generated shifted-diagonal kernel and writes the result back."""

    plan: _ShiftPlan

    def __init__(self, plan: _ShiftPlan) -> None:
        super().__init__(plan)
        self.gather: np.ndarray | None = None

    def _run(self, params: InvokeParams) -> None:
        import numpy as np

        from miocore_direct import grouped_shift as kernels
        from miocore_direct import grouped_stage as stage

        plan = self.plan
        wd, padded, region = plan.buffers(params.workspace)
        if plan.direction is Direction.BACKWARD_WEIGHTS:
            stage.pad(params.x, padded, plan.offsets)
            dy = self._other(params.y, region, load=True)
            kernel = kernels.weights_kernel(plan.sw, plan.dw, plan.shifts)
            rows = dy.shape[0] * dy.shape[1]
            for r0 in range(0, rows, plan.chunk_rows):  # each tap rereads a chunk: keep it cached
                r1 = min(rows, r0 + plan.chunk_rows)
                kernel(padded, dy, wd, plan.sh, plan.dh, r0, r1, r0 > 0)
            stage.undiagonal_weights(wd, plan.width, params.w)
            return
        backward = plan.direction is Direction.BACKWARD_DATA
        src, dst = (params.y, params.x) if backward else (params.x, params.y)
        if self.gather is None:  # built once per invoker: the weights' shape is fixed
            self.gather = stage.diagonal_gather(params.w.shape, plan.width, backward)
        stage.diagonal_weights(params.w, plan.width, wd, backward, self.gather)
        stage.pad(src, padded, plan.offsets, plan.steps)
        out = self._other(dst, region, load=False)
        sh, sw = (1, 1) if backward else (plan.sh, plan.sw)
        kernels.forward_kernel(plan.filt[1], sw, plan.dw, plan.shifts)(padded, wd, out, sh, plan.dh)
        if not plan.direct:
            view = dst.transpose(0, 2, 3, 1)
            if dst.dtype == np.float32 and dst.flags.c_contiguous:
                from miocore_direct.depthwise_kernels import nhwc_to_nchw

                nhwc_to_nchw(out, dst)
            else:
                np.copyto(view, out, casting="unsafe")

    def _other(self, array: np.ndarray, region: np.ndarray, load: bool) -> np.ndarray:
        """The caller's (N, C, H, W) tensor as a float32 (N, H, W, C) array: itself when packed
        float32 NHWC, else the workspace region (filled from it when ``load``)."""
        import numpy as np

        view = array.transpose(0, 2, 3, 1)
        if self.plan.direct:
            return view
        if load:
            if array.dtype == np.float32 and array.flags.c_contiguous:
                from miocore_direct.depthwise_kernels import nchw_to_nhwc

                nchw_to_nhwc(array, region)
            else:
                np.copyto(region, view, casting="unsafe")
        return region


def _threads() -> int:
    numba = sys.modules.get("numba")  # wti must not pay numba's import
    return numba.get_num_threads() if numba is not None else (os.cpu_count() or 1)


class GroupedDirectSolver(Solver):
    """Grouped convolution with narrow groups (1 < G < C, at most 16 channels per group in and
    out) on the CPU: every direction, 2-D, NCHW/NHWC, float32/float16/bfloat16."""

    name = "direct.grouped"
    algorithm = Algorithm.DIRECT
    is_dynamic = True
    # 1 (2026-11-26, session 14): small calls run on one thread where that is faster
    # (miocore_direct.pool_choice); entries recorded before are measured again.
    # 2 (2026-11-27): widths 2, 4, 8 and 16 run the explicit-vector kernels.
    # 3 (2026-11-27): width 16 runs sliding-window kernels (3x3 rows), self-staged for NCHW
    # and strided passes; width-16 weights rearranged by 16x16 transposes; groups of 32 on
    # the vector kernels (new problems: nothing recorded before).
    # 4 (2026-11-27): width 32 runs sliding-window kernels of both lane blocks of a group
    # (miocore_direct.grouped_wide), self-staged for packed float32 tensors in forward,
    # stride-1 backward data (KYXC weights read in place) and backward weights; its weights
    # rearranged by transposes.
    # 5 (2026-11-27): 8-wide groups' NCHW strided backward data in the self-staging phase
    # kernel and their NCHW 3x3 backward weights self-staged; staged passes over 6 MiB one
    # image at a time.
    # 6 (2026-11-27): width-16 self-staging backward weights stage 8 groups a task from NHWC.
    revision = 6

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D CPU problems with 1 < groups < C and groups at most 16 channels wide, or 32
        (:func:`miocore_direct.grouped_vector.vector_applies`)."""
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
        if width > MAX_GROUP_WIDTH and not vector_applies(problem):
            return not_applicable(
                f"groups of {width} channels are wider than {MAX_GROUP_WIDTH} (BLAS solvers)"
            )
        return APPLICABLE

    def compiles_for(self, ctx: ExecutionContext, problem: ConvProblem) -> bool:
        """Whether the vector or shifted-diagonal path's generated kernel (2-12 s / 9-45 s to
        compile) is neither loaded nor in numba's disk cache (the group-innermost kernels
        compile once per machine for every problem); see ``direct.depthwise``."""
        from miocore.backends.cpu_generated import generated_ready

        if not self.is_applicable(ctx, problem):
            return False
        plan = _plan(problem)
        specs = plan.generated() if isinstance(plan, (_ShiftPlan, VectorPlan)) else []
        return not all(generated_ready(*spec) for spec in specs)

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Bytes of the staged float32 weights, x, y and backward-weights partial sums."""
        return _plan(problem).workspace_bytes

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The plan for ``problem`` wrapped in an invoker."""
        answer = self.is_applicable(ctx, problem)
        if not answer:
            raise InvalidArgumentError(answer.reason, field="problem", value=problem.key)
        plan = _plan(problem)
        invoker: Any
        if isinstance(plan, VectorPlan):
            invoker = VectorInvoker(plan)
        elif isinstance(plan, _ShiftPlan):
            invoker = _ShiftInvoker(plan)
        else:
            invoker = _GroupedInvoker(plan)
        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace_bytes,
            invoker_factory=lambda _k: invoker,
        )

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The measured multiply-add rate per thread plus staging copies."""
        return ctx.wti(problem, _plan(problem).predicted_ms(_threads()))


def _plan(p: ConvProblem) -> VectorPlan | _ShiftPlan | _Plan:
    """The explicit-vector plan where it applies, else the shifted-diagonal one, else the
    group-innermost one."""
    if vector_applies(p):
        return VectorPlan(p)
    return _ShiftPlan(p) if shift_applies(p) else _Plan(p)
