"""``triton.depthwise_wrw``: depthwise backward weights (``kernels/depthwise.py``).

Depthwise layers (one group per channel, one filter each) have no GEMM to give tensor cores:
each channel's filter gradient is a reduction over the whole batch, memory-bound. The kernel
reads channels-last x and dy in 16-byte vectors along the channels, splits the (n, p, q) rows
over grid axis 1 to fill the GPU, and sums the fp32 partials with the implicit GEMM's reduction
kernel. fp32 is exact here (no tensor cores), so it applies in every math mode.
"""

from __future__ import annotations

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    Direction,
    ExecutionContext,
    KernelInfo,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore_triton.geometry import MAX_REACH, REDUCE_BLOCK, SPLITS, TRITON_TYPES, reach
from miocore_triton.launches import Step, invoker_factory
from miocore_triton.solvers import _sm, triton_installed

SOURCE = "triton/depthwise.py"
REDUCE_SOURCE = "triton/conv_igemm.py"
#: (rows, channels) blocks of a program; 4 warps. The default first.
BLOCKS = ((64, 32), (32, 64), (128, 32), (64, 64), (32, 32))
#: A split run aims at this many programs per SM at most, each share keeping this many blocks.
PROGRAMS_PER_SM = 4
MIN_BLOCKS_PER_SHARE = 4
#: Fraction of the memory bandwidth the kernel reaches (each tap re-reads x, mostly from cache)
#: and its launch, before a measurement fits them.
_BANDWIDTH_SHARE = 0.5
_FIXED_MS = 0.006


def _taps_pad(p: ConvProblem) -> int:
    r, s = p.w.lengths[2:]
    return 1 << max(0, (r * s - 1).bit_length())


def _rows(p: ConvProblem) -> int:
    n = p.x.lengths[0]
    return n * p.y.lengths[2] * p.y.lengths[3]


class TritonDepthwiseWeights(TunableSolver):
    """Depthwise backward weights: per-channel reductions over the batch, split and summed."""

    name = "triton.depthwise_wrw"
    algorithm = Algorithm.DIRECT
    backends = frozenset({"cuda", "hip"})
    direction = Direction.BACKWARD_WEIGHTS

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D backward weights, groups == input channels == output channels, x and dy
        channels-last (NHWC), fp16/bf16/fp32, filters up to 64 taps, 32-bit offsets."""
        p = problem
        if p.direction is not Direction.BACKWARD_WEIGHTS:
            return not_applicable(f"{p.direction.value}: this solver computes backward weights")
        if p.spatial_dims != 2:
            return not_applicable(f"{p.spatial_dims}-D problem: the kernel is 2-D")
        c, k = p.x.lengths[1], p.w.lengths[0]
        if not (p.groups == c == k and c > 1):
            return not_applicable(f"{p.groups} groups, {c} -> {k} channels: not depthwise")
        if p.dtype not in TRITON_TYPES:
            return not_applicable(f"{p.dtype.value}: the kernel computes fp16, bf16 and fp32")
        for name in ("x", "y"):
            if getattr(p, name).strides[1] != 1:
                return not_applicable(f"{name} is not channels-last: the kernel reads NHWC")
        if p.w.lengths[2] * p.w.lengths[3] > 64:
            return not_applicable("more than 64 filter taps")
        if ctx.backend == "cuda" and _sm(ctx) < 80:
            return not_applicable(f"{ctx.device.arch}: the kernels need sm_80 or later")
        if reach(p) >= MAX_REACH:
            return not_applicable("a tensor reaches past the kernel's 32-bit offsets")
        if not triton_installed():
            return not_applicable("Triton is not installed (pip install triton)")
        return APPLICABLE

    # -- configs -------------------------------------------------------------------------------

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Every block with every split that keeps at most 4 programs per SM and 4 row blocks
        per share (one split always)."""
        p = problem
        if not self.is_applicable(ctx, p):
            return []
        sms = max(1, ctx.device.compute_units)
        c = p.x.lengths[1]
        out = []
        for bp, bc in BLOCKS:
            blocks = -(-_rows(p) // bp)
            c_tiles = -(-c // bc)
            for split in SPLITS:
                if split > 1 and (
                    c_tiles * split > PROGRAMS_PER_SM * sms or blocks < MIN_BLOCKS_PER_SHARE * split
                ):
                    continue
                out.append(PerfConfig(bp=bp, bc=bc, split=split))
        return out

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The first block, split into the most shares the space allows (the GPU filled)."""
        space = self.perf_config_space(ctx, problem)
        if not space:
            return PerfConfig(bp=BLOCKS[0][0], bc=BLOCKS[0][1], split=1)
        first = [c for c in space if (c["bp"], c["bc"]) == BLOCKS[0]] or space
        return max(first, key=lambda c: c["split"])

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """A configuration of this problem's space."""
        try:
            values = {k: int(config[k]) for k in ("bp", "bc", "split")}
        except (KeyError, TypeError, ValueError):
            return False
        return PerfConfig(**values) in self.perf_config_space(ctx, problem)

    def _config(self, ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig | None) -> PerfConfig:
        if cfg is not None and self.is_valid_perf_config(ctx, p, cfg):
            return cfg
        return self.default_perf_config(ctx, p)

    # -- cost ----------------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """A split run's fp32 partials."""
        return self._plan(ctx, problem, self._config(ctx, problem, perf_config))[1]

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Memory-bound: x and dy read once at half the device's bandwidth, plus a launch."""
        p = problem
        ms = ctx.roofline_ms(float(p.flops), p.bytes_moved, p.dtype, 1.0)
        ms = max(ms, 1e3 * p.bytes_moved / (ctx.device.peak_gbps * 1e9 * _BANDWIDTH_SHARE))
        return ctx.wti(p, ms + _FIXED_MS)

    # -- solution ------------------------------------------------------------------------------

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The reduction kernel for the layer and block, then the sum of a split run."""
        steps, workspace = self._plan(ctx, problem, self._config(ctx, problem, perf_config))
        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=invoker_factory(steps),
            kernels=tuple(step.kernel for step in steps),
        )

    def _plan(self, ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig) -> tuple[list, int]:
        ty = TRITON_TYPES[p.dtype]
        warp = 64 if ctx.backend == "hip" else 32
        c = p.x.lengths[1]
        h, w = p.x.lengths[2:]
        pp, qq = p.y.lengths[2:]
        r, s = p.w.lengths[2:]
        xs, ys, ws = p.x.strides, p.y.strides, p.w.strides
        sh, sw = p.conv.strides
        ph, pw = p.conv.pads
        dh, dw = p.conv.dilations
        split = cfg["split"]
        options = [
            f"C={c}", f"H={h}", f"W={w}", f"P={pp}", f"Q={qq}", f"R={r}", f"S={s}",
            f"SH={sh}", f"SW={sw}", f"PH={ph}", f"PW={pw}", f"DH={dh}", f"DW={dw}",
            f"XN={xs[0]}", f"XH={xs[2]}", f"XW={xs[3]}", f"YN={ys[0]}", f"YH={ys[2]}",
            f"YW={ys[3]}", f"WK={ws[0]}", f"WR={ws[2]}", f"WS={ws[3]}",
            f"BLOCK_P={cfg['bp']}", f"BLOCK_C={cfg['bc']}", f"TAPS_PAD={_taps_pad(p)}",
            f"SPLITS={split}", "num_warps=4", "num_stages=2",
            f"sig.x_ptr=*{ty}", f"sig.y_ptr=*{ty}", f"sig.w_ptr=*{ty}", "sig.part_ptr=*fp32",
            "sig.M=i32",
        ]  # fmt: skip
        kernel = KernelInfo(
            source=SOURCE,
            kernel_name="dw_wrw",
            options=tuple(sorted(options)),
            grid=(-(-c // cfg["bc"]), split),
            block=(4 * warp,),
        )
        steps = [Step(kernel, ("x", "y", "w", 0 if split > 1 else "none"), _rows(p))]
        if split == 1:
            return steps, 0
        reduce_options = [
            f"SPLITS={split}", "C=1", f"K={c}", "T=1", f"R={r}", f"S={s}",
            f"WK={ws[0]}", f"WC={ws[1]}", "WT=0", f"WR={ws[2]}", f"WS={ws[3]}",
            f"BLOCK={REDUCE_BLOCK}", "num_warps=4", "num_stages=1",
            "sig.part_ptr=*fp32", f"sig.w_ptr=*{ty}",
        ]  # fmt: skip
        reduce = KernelInfo(
            source=REDUCE_SOURCE,
            kernel_name="conv_wrw_reduce",
            options=tuple(sorted(reduce_options)),
            grid=(-(-(c * r * s) // REDUCE_BLOCK),),
            block=(4 * warp,),
        )
        steps.append(Step(reduce, (0, "w")))
        return steps, split * c * r * s * 4
