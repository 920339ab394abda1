"""``fft.overlap_save``: FFT convolution, all directions, tiled by overlap-save.

Applies to every stride-1 convolution, 2-D and 3-D, any filter size, dilation (folded into a
sparse filter), groups (including depthwise), every layout and data type (arithmetic in
float32/complex64). The perf config picks the FFT length per tile (``fft_len``; 0 = one tile).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
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
from miocore_fft.plan import TILE_LENGTHS, FftPlan

# Cost-model constants, fitted by ``benchmarks/calibrate_fft.py`` (non-negative least squares
# over 27 problem/direction pairs, default configs, 2 pinned cores; fit within about 0.8-1.3x
# of measured on all but the tiniest problems, which it over-estimates by ~2x).
#: Fraction of the measured sgemm rate pocketfft's batched real transforms reach.
FFT_EFFICIENCY = 0.075
#: Fraction of the sgemm rate numpy's batched cgemm reaches on the per-bin reductions (small
#: matrices, one BLAS call per bin and group).
GEMM_EFFICIENCY = 0.12
#: Memory passes over the spectra and stages beyond one write and one read (copies into
#: matmul layout, strided tile gathers and scatters).
TRAFFIC_FACTOR = 2.5
#: Python and library overhead per chunk of transforms, milliseconds.
CHUNK_OVERHEAD_MS = 0.25
#: Fixed overhead of one call, milliseconds.
CALL_OVERHEAD_MS = 0.2

PERF_KEY = "fft_len"


class FftOverlapSave(TunableSolver):
    """FFT convolution with overlap-save tiling; the channel sums are batched complex GEMMs."""

    name = "fft.overlap_save"
    numerical_notes = frozenset({"fft"})
    algorithm = Algorithm.FFT
    is_dynamic = True  # nothing is compiled; sizes are read at run time

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Stride 1 in every dimension on the CPU; anything else is supported."""
        if ctx.backend != "cpu":
            return not_applicable(
                f"backend {ctx.backend!r}: the FFT solver runs on the CPU backend only "
                "(scipy.fft on numpy arrays)"
            )
        strides = problem.conv.strides
        if any(s != 1 for s in strides):
            return not_applicable(
                f"strides {strides}: FFT convolution needs stride 1 in every spatial dimension "
                "(a strided output would discard all but 1/stride of each transform)"
            )
        return APPLICABLE

    # -- perf configs ---------------------------------------------------------------------

    def _plan(self, problem: ConvProblem, config: PerfConfig | None, ctx: Any) -> FftPlan:
        if config is None:
            config = self.default_perf_config(ctx, problem)
        if not self.is_valid_perf_config(ctx, problem, config):
            raise InvalidArgumentError(
                f"not a valid {self.name} config for {problem.key}; expected "
                f"{{'{PERF_KEY}': 0 or one of {list(TILE_LENGTHS)} with at least one output "
                "per tile}",
                field="perf_config",
                value=dict(config),
            )
        return FftPlan(problem=problem, fft_len=int(config[PERF_KEY]))

    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterator[PerfConfig]:
        """No tiling, and every tile length that tiles at least one dimension; default first."""
        default = self.default_perf_config(ctx, problem)
        yield default
        nd = problem.spatial_dims
        plan0 = FftPlan(problem=problem, fft_len=0)
        longest = max(plan0.lengths)
        seen = {FftPlan(problem=problem, fft_len=int(default[PERF_KEY])).lengths}
        for length in (0, *TILE_LENGTHS):
            if length and (length >= longest or any(length < 2 * f - 1 for f in plan0.fd)):
                continue  # no tiling at all, or tiles shorter than the filter: not worth a try
            plan = FftPlan(problem=problem, fft_len=length)
            if plan.is_valid and plan.lengths not in seen and len(plan.lengths) == nd:
                seen.add(plan.lengths)
                yield PerfConfig({PERF_KEY: length})

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The benchmarked rule (README, "Default tile length"): tile unless depthwise.

        Tiles of the shortest listed length that is at least four times the longest dilated
        filter (and at least 16): many tiles give the per-bin GEMMs many rows and keep the
        filter spectra small, while the ``Fd - 1`` overlap wastes at most a quarter of each
        tile. Depthwise problems have no channel GEMM to feed, so they run untiled. When the
        chosen length is not shorter than the untiled transform, there is nothing to tile.
        """
        plan0 = FftPlan(problem=problem, fft_len=0)
        if problem.is_depthwise:
            return PerfConfig({PERF_KEY: 0})
        want = max(16, 4 * max(plan0.fd))
        length = next((t for t in TILE_LENGTHS if t >= want), 0)
        return PerfConfig({PERF_KEY: length if 0 < length < max(plan0.lengths) else 0})

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """``{"fft_len": 0}`` or a listed tile length giving every tile at least one output."""
        if set(config) != {PERF_KEY}:
            return False
        length = config[PERF_KEY]
        if isinstance(length, bool) or not isinstance(length, int):
            return False
        if length != 0 and length not in TILE_LENGTHS:
            return False
        return FftPlan(problem=problem, fft_len=length).is_valid

    # -- solution -------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Bytes of the stage, the three spectra and the two chunk buffers (see plan.py)."""
        return self._plan(problem, perf_config, ctx).workspace_bytes

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """A solution whose invoker runs the plan on the caller's arrays and workspace."""
        plan = self._plan(problem, perf_config, ctx)
        config = PerfConfig({PERF_KEY: plan.fft_len})

        def factory(_kernels: Any) -> Any:
            from miocore_fft.engine import FftEngine  # numpy and scipy.fft: to run only

            engine = FftEngine(plan)

            def invoker(_handle: Any, params: InvokeParams) -> None:
                engine(params)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace_bytes,
            invoker_factory=factory,
            perf_config=config,
        )

    def predicted_ms(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> float:
        """Estimated milliseconds: transforms + complex GEMMs + spectra traffic + overhead."""
        plan = self._plan(problem, perf_config, ctx)
        dtype = problem.dtype
        fft_ms = ctx.roofline_ms(plan.fft_flops, 0, dtype, FFT_EFFICIENCY)
        gemm_ms = ctx.roofline_ms(plan.gemm_flops, 0, dtype, GEMM_EFFICIENCY)
        mem_ms = ctx.roofline_ms(0, TRAFFIC_FACTOR * plan.traffic_bytes, dtype)
        chunks = math.ceil(plan.units / plan.a_chunk_units) * 2
        return fft_ms + gemm_ms + mem_ms + CALL_OVERHEAD_MS + CHUNK_OVERHEAD_MS * chunks

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Ideal time over the predicted time of the default config."""
        if not self.is_applicable(ctx, problem):
            return -1.0
        return ctx.wti(problem, self.predicted_ms(ctx, problem))
