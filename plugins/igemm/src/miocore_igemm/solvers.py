"""The implicit-GEMM solvers: one per direction, each with native NCHW and NHWC paths.

Performance configurations are ``{"strategy": "tap" | "block", "block": int}``: for ``tap``,
``block`` is the number of images per chunk (the padded grid of that many images is staged at
once); for ``block`` it is the target number of output pixels per im2col column block.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, ClassVar

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
    NotApplicableError,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore_igemm import plans
from miocore_igemm.plans import BLOCK, TAP, Geometry, Plan

#: Column-block sizes (output pixels per im2col block) the search tries.
BLOCK_PIXELS = (256, 1024, 4096, 16384)
#: Default column blocks (output pixels): big enough for BLAS to run near its peak, small
#: enough to stay bounded (a 3x3x512 layer's 4608 columns x 4096 pixels is 72 MiB at most).
DEFAULT_PIXELS = 4096
DEFAULT_PIXELS_FORWARD = 1024
#: The tap strategy computes on the padded grid; beyond this waste the block strategy wins
#: for filters wider than 1x1 (3x3 pad 1: 1.07 at 56x56 and larger, 1.15 at 28x28).
MAX_GRID_WASTE = 1.1
#: Grid pixels a default tap chunk aims for (whole images; a power of two of them).
TAP_CHUNK_PIXELS = 1024
#: Measured on this repository's 2-core CI machine (see plugins/igemm/README.md): the
#: fraction of the calibrated BLAS rate that large igemm GEMMs reach, the half-rate size of a
#: GEMM dimension, and the host cost of one BLAS or numpy call.
GEMM_EFFICIENCY = 0.85
HALF_RATE_DIM = 24.0
CALL_OVERHEAD_MS = 0.004


def tap_unfit_reason(geo: Geometry) -> str | None:
    """Why the tap strategy does not fit ``geo`` (None when it does)."""
    if not geo.unit_strides:
        return (
            f"strides {geo.strides}: a tap's operand is a contiguous grid window only with unit "
            "strides (the block strategy gathers strided problems)"
        )
    if geo.depthwise:
        return (
            "depthwise: every (group, tap) GEMM would be 1x1 by 1xP, G*T BLAS calls of pure "
            "overhead; the block strategy batches the groups instead"
        )
    return None


def _powers_of_two_upto(n: int) -> list[int]:
    out = [1]
    while out[-1] * 2 <= n:
        out.append(out[-1] * 2)
    if out[-1] != n:
        out.append(n)
    return out


def candidate_configs(geo: Geometry) -> list[PerfConfig]:
    """Every configuration worth trying (unordered)."""
    configs = []
    if tap_unfit_reason(geo) is None:
        configs += [PerfConfig(strategy=TAP, block=nb) for nb in _powers_of_two_upto(geo.n)]
    configs += [PerfConfig(strategy=BLOCK, block=b) for b in BLOCK_PIXELS]
    return configs


def default_config(geo: Geometry) -> PerfConfig:
    """The benchmarked default rule (see the README for the measurements behind it).

    * 1x1 unit-stride layers run the tap strategy (one GEMM, no gather; float32 packed data
      is used in place). Chunks hold enough images for about :data:`TAP_CHUNK_PIXELS` grid
      pixels: one image from 28x28 up, whole small-image batches at 14x14 and 7x7.
    * Wider unit-stride filters run the tap strategy forward and backward-data when the grid
      waste is at most :data:`MAX_GRID_WASTE` (large images); below that, and for every
      strided, depthwise or backward-weights case, column blocks win.
    """
    pixels = DEFAULT_PIXELS_FORWARD if geo.direction is Direction.FORWARD else DEFAULT_PIXELS
    if tap_unfit_reason(geo) is not None or geo.g > 8:
        return PerfConfig(strategy=BLOCK, block=pixels)
    waste = geo.grid / geo.out_pix
    if geo.taps > 1 and (geo.direction is Direction.BACKWARD_WEIGHTS or waste > MAX_GRID_WASTE):
        return PerfConfig(strategy=BLOCK, block=pixels)
    want = max(1, TAP_CHUNK_PIXELS // geo.grid)
    nb = next(n for n in reversed(_powers_of_two_upto(geo.n)) if n <= want or n == 1)
    return PerfConfig(strategy=TAP, block=nb)


def predicted_ms(ctx: ExecutionContext, geo: Geometry, plan: Plan, problem: ConvProblem) -> float:
    """Roofline-style time of one plan: GEMM flops at a size-dependent BLAS efficiency, plus
    the staging traffic, plus per-call host overhead (all serial on this implementation)."""

    def eff(*dims: float) -> float:
        return GEMM_EFFICIENCY * math.prod(d / (d + HALF_RATE_DIM) for d in dims)

    g, cg, kg, t = geo.g, geo.cg, geo.kg, geo.taps
    staged = plan.workspace_size
    if plan.strategy == TAP:
        nb = plan.block
        chunks = -(-geo.n // nb)
        flops = 2.0 * geo.n * geo.grid * g * kg * cg * t
        efficiency = eff(nb * geo.grid, kg, cg)
        calls = chunks * (g * t + 4)
        # every tap streams the input grid again
        extra = (t - 1) * 4.0 * geo.n * geo.grid * geo.c
    else:
        blocks, bmax = plans.pixel_blocks(geo, plan.block)
        flops = float(problem.flops)
        efficiency = eff(min(bmax, geo.n * geo.out_pix), kg, cg * t)
        calls = len(blocks) * (4 + (t if geo.direction is Direction.BACKWARD_DATA else 0))
        # the column buffer is written and read once per block
        extra = 8.0 * geo.n * geo.out_pix * geo.c * t
    nbytes = problem.bytes_moved + 2.0 * staged + extra
    compute = ctx.roofline_ms(flops, 0, problem.dtype, efficiency=max(efficiency, 1e-3))
    memory = ctx.roofline_ms(0, nbytes, problem.dtype)
    return compute + memory + calls * CALL_OVERHEAD_MS


class ImplicitGemmSolver(TunableSolver):
    """Shared behaviour of the three directions (see the module docstring)."""

    algorithm = Algorithm.IMPLICIT_GEMM
    is_dynamic = True
    backends = frozenset({"cpu"})
    direction: ClassVar[Direction]

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Any canonical 2-D/3-D problem of this solver's direction, any dtype, layout, groups."""
        if ctx.backend not in self.backends:
            return not_applicable(
                f"{self.name} runs on the CPU backend (numpy + BLAS), not {ctx.backend!r}"
            )
        if problem.direction is not self.direction:
            return not_applicable(
                f"{self.name} solves {self.direction.value} problems, not {problem.direction.value}"
            )
        if problem.conv.mode != "conv":
            return not_applicable("expects the canonical (mode='conv') form of the problem")
        return APPLICABLE

    # -- performance configurations -------------------------------------------------------

    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterable[PerfConfig]:
        """Default first, then tap chunkings (unit strides only), then column-block sizes."""
        geo = Geometry.of(problem)
        first = default_config(geo)
        return [first, *(c for c in candidate_configs(geo) if c != first)]

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The rule of :func:`default_config`."""
        return default_config(Geometry.of(problem))

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """Exactly the keys ``strategy`` and ``block``, with a value from the search space."""
        if not isinstance(config, PerfConfig) or set(config) != {"strategy", "block"}:
            return False
        return config in candidate_configs(Geometry.of(problem))

    def _plan(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None
    ) -> tuple[Geometry, Plan, PerfConfig]:
        answer = self.is_applicable(ctx, problem)
        if not answer:
            raise NotApplicableError(f"{self.name}: {answer.reason}")
        geo = Geometry.of(problem)
        config = default_config(geo) if perf_config is None else perf_config
        if not self.is_valid_perf_config(ctx, problem, config):
            reason = ""
            if isinstance(config, PerfConfig) and config.get("strategy") == TAP:
                reason = tap_unfit_reason(geo) or ""
            raise InvalidArgumentError(
                f"not a valid {self.name} configuration for {problem.key}"
                + (f" ({reason})" if reason else "")
                + f"; valid: {[dict(c) for c in candidate_configs(geo)]}",
                field="perf_config",
                value=dict(config) if isinstance(config, PerfConfig) else config,
            )
        return geo, plans.make_plan(geo, config["strategy"], config["block"]), config

    # -- solution -------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Exactly the float32 staging the invoker carves (see :class:`plans.Plan`)."""
        return self._plan(ctx, problem, perf_config)[1].workspace_size

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """A solution whose invoker runs the configuration's plan on the caller's arrays."""
        geo, plan, config = self._plan(ctx, problem, perf_config)
        written = problem.direction.output_tensor

        def factory(kernels: Any) -> Any:
            from miocore_igemm import engine  # numpy, SciPy's BLAS: to run only
            from miocore_igemm.conform import conform

            def invoker(handle: Any, params: InvokeParams) -> None:
                if params.problem != problem:
                    raise InvalidArgumentError(
                        f"this invoker was built for {problem.key}",
                        field="params.problem",
                        value=params.problem.key,
                    )
                arrays = {
                    name: conform(
                        getattr(params, name), getattr(problem, name), name, name == written
                    )
                    for name in ("x", "w", "y")
                }
                engine.run(plan, geo, arrays["x"], arrays["w"], arrays["y"], params.workspace)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace_size,
            invoker_factory=factory,
            perf_config=config,
        )

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Ideal time over the predicted time of the default configuration."""
        if not self.is_applicable(ctx, problem):
            return -1.0
        geo = Geometry.of(problem)
        config = default_config(geo)
        plan = plans.make_plan(geo, config["strategy"], config["block"])
        return ctx.wti(problem, predicted_ms(ctx, geo, plan, problem))


class ImplicitGemmForward(ImplicitGemmSolver):
    """Forward: per tap ``y += x_tap @ w_tap`` (tap) or ``y = im2col(block) @ w`` (block)."""

    name = "igemm.fwd"
    numerical_notes = frozenset()
    direction = Direction.FORWARD


class ImplicitGemmBackwardData(ImplicitGemmSolver):
    """Backward data: per tap ``dx_tap += dy @ w_tap^T`` scattered on the padded grid (tap), or
    column gradients ``dy_block @ w^T`` scattered tap by tap (block)."""

    name = "igemm.bwd"
    numerical_notes = frozenset()
    direction = Direction.BACKWARD_DATA


class ImplicitGemmBackwardWeights(ImplicitGemmSolver):
    """Backward weights: per tap ``dw_tap += dy^T @ x_tap`` over image chunks (tap), or
    ``dw += dy_block^T @ im2col(block)`` over column blocks (block)."""

    name = "igemm.wrw"
    numerical_notes = frozenset()
    direction = Direction.BACKWARD_WEIGHTS


SOLVERS = (ImplicitGemmForward(), ImplicitGemmBackwardData(), ImplicitGemmBackwardWeights())
