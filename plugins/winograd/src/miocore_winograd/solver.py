"""The Winograd solver: ``winograd.rxs``, tunable over the output tile and the chunk size."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    ExecutionContext,
    InvalidArgumentError,
    InvokeParams,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore_winograd.engine import Plan, execute, forward_axis, make_plan

#: Output tile sizes per axis: F(2,3), F(4,3), F(6,3) (and F(m,2)/F(m,1) for phase pieces).
TILES: tuple[int, ...] = (2, 4, 6)
#: Tiles per chunk: small chunks keep the transformed tiles in L2, big ones make longer GEMMs.
BLOCKS: tuple[int, ...] = (128, 512, 2048, 8192)
#: Largest stride handled by splitting into phases (stride**2 phases, each a sub-problem).
MAX_STRIDE = 4
#: Fraction of the BLAS ceiling the batched GEMM stage reaches, and the transform GEMMs
#: (short contraction dimension alpha^2) reach (measured on the development machine, see README).
GEMM_EFFICIENCY = 0.6
TRANSFORM_EFFICIENCY = 0.3
#: Python and numpy dispatch per chunk and per run (measured: about 40 numpy calls per chunk).
CHUNK_OVERHEAD_MS = 0.15
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


class WinogradRxS(TunableSolver):
    """Winograd ``F(m x m, r x r)`` for every direction, any filter size (split into pieces of
    at most 3x3), strides up to 4 (split into phases), groups and depthwise, any padding.

    Perf config: ``{"tile": m, "block": tiles per chunk}``. ``m`` = 2, 4 or 6 outputs per axis;
    backward weights uses ``F(r, m)`` with ``m x m`` dy tiles.
    """

    name = "winograd.rxs"
    algorithm = Algorithm.WINOGRAD
    is_dynamic = True

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

    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterable[PerfConfig]:
        """Every ``tile`` x ``block``, the default first."""
        default = self.default_perf_config(ctx, problem)
        yield default
        for tile in TILES:
            for block in BLOCKS:
                config = PerfConfig(tile=tile, block=block)
                if config != default:
                    yield config

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """F(4,3) unless the output is so small that 4x4 tiles waste most of their work (then
        F(2,3)); chunks of 512 tiles (the best block in the README's measurements)."""
        tile = 4 if min(problem.out_spatial) >= 8 else 2
        return PerfConfig(tile=tile, block=512)

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """``tile`` in :data:`TILES` and ``block`` in :data:`BLOCKS`."""
        return config.get("tile") in TILES and config.get("block") in BLOCKS and len(config) == 2

    def _config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig | None
    ) -> tuple[int, int]:
        if config is None:
            config = self.default_perf_config(ctx, problem)
        if not self.is_valid_perf_config(ctx, problem, config):
            raise InvalidArgumentError(
                f"expected {{'tile': one of {TILES}, 'block': one of {BLOCKS}}}",
                field="perf_config",
                value=dict(config),
            )
        return int(config["tile"]), int(config["block"])

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
        """Roofline estimate of the default config: GEMM flops at the measured GEMM efficiency,
        transform flops and float32 traffic, plus dispatch overhead per chunk."""
        tile, block = self._config(ctx, problem, None)
        plan = _plan(problem, tile, block)
        gemm = ctx.roofline_ms(plan.flops_gemm, 0, problem.dtype, GEMM_EFFICIENCY)
        transforms = ctx.roofline_ms(
            plan.flops_transform, plan.bytes_moved, problem.dtype, TRANSFORM_EFFICIENCY
        )
        n_chunks = sum(
            math.ceil(plan.n * r.y.tiles * r.x.tiles / block) for r in plan.runs if not r.empty
        )
        overhead = RUN_OVERHEAD_MS * len(plan.runs) + CHUNK_OVERHEAD_MS * n_chunks
        return gemm + transforms + overhead

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Ideal time over :meth:`predicted_ms`."""
        if not self.is_applicable(ctx, problem):
            return -1.0
        return ctx.wti(problem, self.predicted_ms(ctx, problem))


__all__ = ["BLOCKS", "TILES", "WinogradRxS"]
