"""``direct.taps``: direct convolution with one BLAS call per filter tap, for small filters.

The solver (applicability, perf configs, workspace, wti). The phase-split buffers and their
index algebra are in :mod:`miocore_direct.taps_plan`; the per-tap passes and the invoker in
:mod:`miocore_direct.taps_passes`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    ExecutionContext,
    InvalidArgumentError,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore_direct.taps_plan import TapsPlan

#: Largest filter extent per spatial dimension, and largest tap count, the solver accepts.
MAX_FILTER = 7
MAX_TAPS = 81
#: Row-block sizes the tuner tries (0 = the whole problem in one block).
BLOCK_CHOICES = (0, 512, 2048, 8192, 32768)


class TapsDirectSolver(TunableSolver):
    """Direct convolution for small filters: one sgemm (or multiply-add) per filter tap.

    Applies to every direction, layout, dtype, group count, stride, padding and dilation
    whenever each filter extent is at most :data:`MAX_FILTER` and the filter has at most
    :data:`MAX_TAPS` taps. Workspace: the float32 weights, the phase-split padded input and
    the output grid (see the README for the formula); the caller's float32 NHWC tensors are
    used in place where no padding or phase split is needed.
    """

    name = "direct.taps"
    numerical_notes = frozenset()
    algorithm = Algorithm.DIRECT
    is_dynamic = True

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Small filters on the CPU: each filter extent <= 7 and at most 81 taps."""
        if ctx.backend not in self.backends:
            return not_applicable(f"direct.taps runs on the CPU only, not on {ctx.backend!r}")
        if problem.is_transposed:
            return not_applicable("expects the canonical (mode='conv') form of the problem")
        filt = problem.filter_spatial
        if max(filt) > MAX_FILTER:
            return not_applicable(
                f"filter {'x'.join(map(str, filt))} has an extent above {MAX_FILTER} "
                "(one GEMM per tap pays off only for small filters)"
            )
        if math.prod(filt) > MAX_TAPS:
            return not_applicable(
                f"filter {'x'.join(map(str, filt))} has {math.prod(filt)} taps, more than "
                f"{MAX_TAPS}"
            )
        return APPLICABLE

    # -- perf configs -----------------------------------------------------------------------

    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterable[PerfConfig]:
        """Row blocks worth trying: the default first, then every smaller block."""
        default = self.default_perf_config(ctx, problem)
        yield default
        length = TapsPlan(problem, 0).length
        for block in BLOCK_CHOICES:
            config = PerfConfig(block=block)
            if config != default and (block == 0 or block < length):
                yield config

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """Blocks of about a megabyte of output for the elementwise path; none for BLAS."""
        plan = TapsPlan(problem, 0)
        if not plan.elementwise:
            return PerfConfig(block=0)
        rows = max(512, (1 << 18) // max(1, plan.g * plan.kg))
        choice = max((b for b in BLOCK_CHOICES if 0 < b <= rows), default=BLOCK_CHOICES[1])
        return PerfConfig(block=choice if choice < plan.length else 0)

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """Any config with one ``block`` from :data:`BLOCK_CHOICES`."""
        return set(config) == {"block"} and config["block"] in BLOCK_CHOICES

    def _plan(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None
    ) -> TapsPlan:
        config = perf_config if perf_config is not None else self.default_perf_config(ctx, problem)
        if not self.is_valid_perf_config(ctx, problem, config):
            raise InvalidArgumentError(
                f"expected {{'block': one of {list(BLOCK_CHOICES)}}}",
                field="perf_config",
                value=dict(config),
            )
        return TapsPlan(problem, int(config["block"]))

    # -- solver contract ----------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Bytes of the float32 weights, P, Q and elementwise scratch (see the README)."""
        return self._plan(ctx, problem, perf_config).workspace_bytes

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The plan for ``problem`` wrapped in an invoker."""
        answer = self.is_applicable(ctx, problem)
        if not answer:
            raise InvalidArgumentError(answer.reason, field="problem", value=problem.key)
        plan = self._plan(ctx, problem, perf_config)
        from miocore_direct.taps_passes import TapsInvoker  # numpy, SciPy's BLAS: to run only

        invoker = TapsInvoker(plan)
        config = perf_config if perf_config is not None else self.default_perf_config(ctx, problem)
        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace_bytes,
            invoker_factory=lambda _k: invoker,
            perf_config=config,
        )

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Roofline of the per-tap GEMMs (wasted margin rows included) plus the staging copies."""
        plan = self._plan(ctx, problem, None)
        return ctx.wti(problem, plan.predicted_ms(ctx, problem.dtype))
