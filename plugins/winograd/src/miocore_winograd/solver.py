"""The Winograd solver: ``winograd.rxs``, tunable over the output tile and the chunk size."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    DataType,
    ExecutionContext,
    InvokeParams,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore_winograd.configs import TileBlockConfigs
from miocore_winograd.plans import Plan, forward_axis, make_plan

#: Float32 error (max abs error / max abs reference) per output tile size at a reduction of 16
#: or fewer: what the plugin's tests allow, measured at about a third of it.
FP32_ERROR_BY_TILE = {2: 2e-6, 4: 3e-5, 6: 1e-4}

#: Output tile sizes per axis: F(2,3), F(4,3), F(6,3) (and F(m,2)/F(m,1) for phase pieces).
TILES: tuple[int, ...] = (2, 4, 6)
#: Tiles per chunk: small chunks keep the transformed tiles in L2, big ones make longer GEMMs.
BLOCKS: tuple[int, ...] = (128, 512, 2048, 8192)
#: Largest stride handled by splitting into phases (stride**2 phases, each a sub-problem).
MAX_STRIDE = 4
#: Below this many 4x4 output tiles the default tile is F(2,3) (measured on ResNet-50 and VGG-16
#: 3x3 layers: 7x7 and 14x14 images at batch 1 are faster with F(2,3), batch 8 with F(4,3)).
SMALL_TILES = 32
#: Cost model, fitted (within about 20%) to single-thread times of the ResNet-50 and VGG-16 3x3
#: layers on the development machine, in fractions of a 94 GFLOP/s single-thread sgemm peak so
#: that the WTI does not depend on how the peak was measured: the batched GEMM runs at about 0.52
#: of it, the filter transform (GEMMs with a contraction of r^2 = 9 writing alpha^2/r^2 times
#: the filter) at 0.12, and every float32 value of the transformed tiles (gather, transform,
#: output transform, scatter: memory-bound numpy passes) costs as much as 45 peak flops.
GEMM_EFFICIENCY = 0.52
FILTER_EFFICIENCY = 0.12
TILE_BYTE_FLOPS = 45.0
#: Backward data copies the flipped, channel-transposed filter (a transposing copy with short
#: inner loops: about 4 ns per float32 measured on 512 x 512 x 3 x 3).
FILTER_COPY_BYTE_FLOPS = 100.0
#: Python and numpy dispatch per chunk and per run (about 30 numpy calls per chunk).
CHUNK_OVERHEAD_MS = 0.1
RUN_OVERHEAD_MS = 0.1


@functools.lru_cache(maxsize=512)
def _plan(problem: ConvProblem, tile: int, block: int) -> Plan:
    return make_plan(problem, tile, block)


def _axis_pieces(problem: ConvProblem) -> list[int]:
    """Largest effective stride-1 piece per axis (after phase splitting), at most ``R_MAX``."""
    out = []
    for f, s, q, n in zip(
        problem.filter_spatial,
        problem.conv.strides,
        problem.conv.pads,
        problem.out_spatial,
        strict=True,
    ):
        out.append(forward_axis(f, q, s, n, 2)[0].r)
    return out


class WinogradRxS(TileBlockConfigs, TunableSolver):
    """Winograd ``F(m x m, r x r)`` for every direction, any filter size (split into pieces of
    at most 3x3), strides up to 4 (split into phases), groups and depthwise, any padding.

    Perf config: ``{"tile": m, "block": tiles per chunk}``. ``m`` = 2, 4 or 6 outputs per axis;
    backward weights uses ``F(r, m)`` with ``m x m`` dy tiles.
    """

    name = "winograd.rxs"
    numerical_notes = frozenset({"winograd"})
    algorithm = Algorithm.WINOGRAD
    is_dynamic = True
    tiles = TILES
    blocks = BLOCKS

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D, dilation 1, stride <= 4, not a 1x1 (or phase-wise 1x1) filter, CPU."""
        p = problem
        if ctx.backend not in self.backends:
            return not_applicable(f"runs on the CPU backend only, not {ctx.backend!r}")
        if p.spatial_dims != 2:
            return not_applicable("3-D convolutions are not covered (2-D tiles only)")
        if any(d != 1 for d in p.conv.dilations):
            return not_applicable(f"dilation {p.conv.dilations} is not supported (only dilation 1)")
        if any(s > MAX_STRIDE for s in p.conv.strides):
            return not_applicable(
                f"stride {p.conv.strides} > {MAX_STRIDE} (phase splitting is capped there)"
            )
        if all(f == 1 for f in p.filter_spatial):
            return not_applicable("1x1 filter: Winograd saves no multiplication (use GEMM)")
        if all(r == 1 for r in _axis_pieces(p)):
            return not_applicable(
                f"filter {p.filter_spatial} with stride {p.conv.strides} splits into 1x1 phase "
                "filters: Winograd saves no multiplication"
            )
        return APPLICABLE

    # -- perf configs -----------------------------------------------------------------------

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """F(4,3) unless the problem has fewer than :data:`SMALL_TILES` 4x4 output tiles (then
        F(2,3): the filter transform, 36/9 times the filter for F(4,3) and 16/9 for F(2,3),
        dominates there); chunks of 128 tiles (their transform blocks stay in L2; a problem of
        at most 128 tiles is one chunk whose filter transform is fused with the GEMM)."""
        tiles = problem.n * math.prod(-(-o // 4) for o in problem.out_spatial)
        return PerfConfig(tile=4 if tiles >= SMALL_TILES else 2, block=128)

    def expected_error(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> float | None:
        """Float32 error bound of the tile size in use, growing with the square root of the
        Winograd-domain reduction (channels per group times 3x3 filter pieces): rounding
        errors of the transforms add up like a random walk over that sum. Calibrated so the
        measured errors (F(4,3): 3.5e-6 at 4 channels, 2.0e-5 at 512) sit at a third or less
        of the bound. float16 and bfloat16 are dominated by their own output rounding."""
        if problem.dtype is not DataType.FLOAT32:
            return None
        config = perf_config if perf_config is not None else self.default_perf_config(ctx, problem)
        pieces = max(1, math.prod(problem.filter_spatial) // 9)
        reduction = (problem.c // problem.groups) * pieces
        return FP32_ERROR_BY_TILE[config["tile"]] * max(1.0, math.sqrt(reduction / 16))

    # -- solution ---------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Padded float32 source, filter pieces and their transform, and the per-chunk tile
        buffers (gathered, transformed, GEMM output), each 64-byte aligned."""
        tile, block = self._config(ctx, problem, perf_config)
        return _plan(problem, tile, block).layout.total

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """Plan once; the invoker only runs the plan on the caller's buffers."""
        answer = self.is_applicable(ctx, problem)
        if not answer:
            from miocore import NotApplicableError

            raise NotApplicableError(f"{self.name} on {problem.key}: {answer.reason}")
        tile, block = self._config(ctx, problem, perf_config)
        plan = _plan(problem, tile, block)
        from miocore_winograd.engine import execute  # numpy: to run only

        def invoker(handle: Any, params: InvokeParams) -> None:
            execute(plan, params.x, params.w, params.y, params.workspace)

        def factory(_kernels: Sequence[Any]) -> Any:
            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=plan.layout.total,
            invoker_factory=factory,
            perf_config=PerfConfig(tile=tile, block=block),
        )

    def predicted_ms(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Cost model of the default config (see :data:`GEMM_EFFICIENCY`): GEMM and filter
        transform flops at their measured efficiencies, transformed-tile traffic as flops,
        plus dispatch overhead per chunk."""
        tile, block = self._config(ctx, problem, None)
        plan = _plan(problem, tile, block)
        dtype = problem.dtype
        gemm = ctx.roofline_ms(plan.flops_gemm, 0, dtype, GEMM_EFFICIENCY)
        filt = ctx.roofline_ms(plan.flops_filter, 0, dtype, FILTER_EFFICIENCY)
        tiles = ctx.roofline_ms(TILE_BYTE_FLOPS * plan.tile_bytes, 0, dtype)
        tiles += ctx.roofline_ms(FILTER_COPY_BYTE_FLOPS * plan.filter_copy_bytes, 0, dtype)
        n_chunks = sum(
            math.ceil(plan.n * r.y.tiles * r.x.tiles / block) for r in plan.runs if not r.empty
        )
        overhead = RUN_OVERHEAD_MS * len(plan.runs) + CHUNK_OVERHEAD_MS * n_chunks
        return gemm + filt + tiles + overhead


__all__ = ["BLOCKS", "TILES", "WinogradRxS"]
