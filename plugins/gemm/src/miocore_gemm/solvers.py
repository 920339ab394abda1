"""The GEMM solvers: MIOpen's GemmFwd*/GemmBwd*/GemmWrw* fallback on numpy's BLAS.

* ``gemm.1x1`` (MIOpen's GemmFwd1x1_0_1/_0_2, GemmBwd1x1_stride1/2, GemmWrw1x1_stride1):
  1x1 filters without padding. Stride 1 multiplies the tensors in place, without im2col;
  a stride above 1 gathers (or, backward data, scatters) the subsampled pixels.
* ``gemm.im2col`` (GemmFwdRest, GemmBwdRest, GemmWrwUniversal): every problem, through a
  column matrix built tile by tile with one strided copy per filter tap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    DataType,
    Direction,
    ExecutionContext,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore_gemm._plan import F32, TILE_LINES, GemmPlan, make_plan

if TYPE_CHECKING:  # the engine (numpy) is imported to run a plan, never to describe one
    from miocore_gemm._engine import PlanInvoker

#: Fraction of the measured BLAS peak (a 384^3 float32 matmul) that numpy's matmul reaches on
#: the GEMM shapes of convolutions (ResNet-50 layers: 50-80% of that ceiling, noisy here).
BLAS_EFFICIENCY = 0.6
#: Matrix side below which BLAS efficiency falls off (small GEMMs are dominated by packing).
_SMALL_SIDE = 64


class _GemmSolver(TunableSolver):
    """Shared machinery: planning, workspace, the invoker, the roofline estimate."""

    algorithm: ClassVar[Algorithm] = Algorithm.GEMM
    is_dynamic: ClassVar[bool] = True  # nothing is compiled per problem
    allow_direct: ClassVar[bool]

    def plan(self, problem: ConvProblem, perf_config: PerfConfig | None = None) -> GemmPlan:
        """The plan this solver runs ``problem`` with (pure arithmetic on sizes and strides)."""
        return make_plan(problem, allow_direct=self.allow_direct, perf_config=perf_config)

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Bytes of the planned buffers: see :func:`miocore_gemm._plan.make_plan`."""
        return self.plan(problem, perf_config).workspace

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """A solution whose invoker runs the plan on the caller's arrays and workspace."""
        plan = self.plan(problem, perf_config)

        def invoker_factory(_kernels: Iterable[object]) -> PlanInvoker:
            from miocore_gemm._engine import PlanInvoker

            return PlanInvoker(plan)

        config = perf_config or PerfConfig({TILE_LINES: plan.tiling.lines})
        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace,
            invoker_factory=invoker_factory,
            perf_config=config,
        )

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """Tiles sized so the per-tile buffers stay within 32 MiB."""
        return PerfConfig({TILE_LINES: self.plan(problem).tiling.lines})

    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterable[PerfConfig]:
        """The default tile, a quarter and four times it, one image and the whole batch."""
        default = self.plan(problem).tiling.lines
        per_image = math.prod(problem.out_spatial[:-1])
        seen: list[int] = []
        for lines in (default, max(1, default // 4), default * 4, per_image, problem.n * per_image):
            lines = min(lines, problem.n * per_image)
            normalized = self.plan(problem, PerfConfig({TILE_LINES: lines})).tiling.lines
            if normalized not in seen:
                seen.append(normalized)
        return [PerfConfig({TILE_LINES: lines}) for lines in seen]

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """Any positive tile size is valid (it is rounded down to a legal tiling)."""
        lines = config.get(TILE_LINES)
        return set(config) == {TILE_LINES} and type(lines) is int and lines >= 1

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Roofline: BLAS rate on the GEMM flops plus the traffic of im2col/col2im and staging."""
        plan = self.plan(problem)
        g = problem.groups
        gemm_sides = (
            problem.k // g,
            problem.c // g * plan.taps,
            plan.tile_pixels * (plan.tiling.images if plan.channels_last else 1),
        )
        efficiency = BLAS_EFFICIENCY * math.prod(min(1.0, s / _SMALL_SIDE) for s in gemm_sides)
        compute_ms = ctx.roofline_ms(problem.flops, 0, problem.dtype, max(efficiency, 1e-3))
        memory_ms = ctx.roofline_ms(0, _traffic_bytes(problem, plan), problem.dtype)
        return ctx.wti(problem, compute_ms + memory_ms)


def _traffic_bytes(problem: ConvProblem, plan: GemmPlan) -> float:
    """Bytes moved outside the GEMM: tensors, column matrix written and read, staging."""
    item = problem.dtype.itemsize
    pixels = problem.n * math.prod(problem.out_spatial)
    total = float(problem.bytes_moved)
    if not plan.direct_col:
        col = pixels * problem.c * plan.taps
        total += col * (F32 + F32 + item)  # im2col reads x, writes col; the GEMM reads col
        if plan.accumulate_dx:
            total += col * 2 * F32  # col2im: read-modify-write of the dx accumulator
    if not plan.y_direct:
        total += pixels * problem.k * (F32 + item)
    if not plan.w_direct:
        total += problem.w.element_count * (F32 + item)
    if plan.direction is Direction.BACKWARD_WEIGHTS:
        adds = plan.num_tiles if plan.wrw_transposed else plan.num_tiles - 1
        total += adds * problem.w.element_count * 3 * F32  # dW^T or partial sums added in
    return total


class Gemm1x1Solver(_GemmSolver):
    """1x1 filter, no padding: a plain matmul over channels (strided: a subsample first).

    Stride 1 on float32 tensors whose pixels are contiguous runs in place: forward and
    backward data with no workspace; backward weights with a weights-sized dW^T buffer (and
    a column chunk for an NCHW batch above 1, which cannot fold into the GEMM reduction
    without a copy). Float16/bfloat16 stage operands in float32.
    """

    name: ClassVar[str] = "gemm.1x1"
    numerical_notes = frozenset()
    allow_direct: ClassVar[bool] = True

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Applies to 1x1 (1x1x1) filters with zero padding, any stride, dilation, group."""
        if ctx.backend != "cpu":
            return not_applicable(f"runs on the CPU only, not {ctx.backend}")
        if any(f != 1 for f in problem.filter_spatial):
            return not_applicable(f"filter {problem.filter_spatial} is not 1x1")
        if any(problem.conv.pads):
            return not_applicable(f"pads {problem.conv.pads} are not all 0")
        return _common_checks(problem)


class GemmIm2colSolver(_GemmSolver):
    """im2col (forward, backward weights) / col2im (backward data) around one GEMM per tile."""

    name: ClassVar[str] = "gemm.im2col"
    numerical_notes = frozenset()
    allow_direct: ClassVar[bool] = False

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Applies to every 2-D and 3-D convolution on the CPU."""
        if ctx.backend != "cpu":
            return not_applicable(f"runs on the CPU only, not {ctx.backend}")
        return _common_checks(problem)


def _common_checks(problem: ConvProblem) -> Applicability:
    if problem.conv.mode != "conv":
        return not_applicable("expects the canonical (mode='conv') form of the problem")
    if problem.dtype not in (DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16):
        return not_applicable(f"data type {problem.dtype.value} is not supported")
    return APPLICABLE


SOLVERS = (Gemm1x1Solver(), GemmIm2colSolver())

__all__ = ["BLAS_EFFICIENCY", "SOLVERS", "Gemm1x1Solver", "GemmIm2colSolver"]
