"""Triton implicit-GEMM solvers: ``triton.igemm_fwd``, ``triton.igemm_bwd`` (backward data) and
``triton.igemm_wrw`` (backward weights), fp16/bf16 with fp32 accumulation and fp32 through
TF32 (only in the ``"tf32"`` math mode), on NVIDIA (sm_80 and later; ``wgmma`` on sm_90) and
AMD (fp16/bf16) GPUs.

The kernels (``kernels/conv_igemm.py``) are compiled per layer (every size but the batch is a
compile-time constant) and tile configuration by :mod:`miocore_triton.builder`, cached in
miocore's binary cache and launched through miocore's backend. The default configuration
follows a wave rule (the largest tile that still gives every SM two programs); exhaustive find
and ``miocore tune`` search the rest of the space.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any, ClassVar

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
    KernelInfo,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore_triton.geometry import (
    CONFIG_KEYS,
    GEMM_TILES,
    KERNELS,
    MAX_PARTIALS,
    MAX_REACH,
    REDUCE_BLOCK,
    SPLITS,
    TF32_BWD_TILES,
    TF32_FWD_TILES,
    TF32_MIN_COLUMNS,
    TRITON_TYPES,
    WRW_MIN_SLICES,
    WRW_PROGRAMS_PER_SM,
    WRW_TF32_TILES,
    WRW_TILES,
    Tile,
    config,
    constants,
    gemm_columns,
    gemm_rows,
    gemm_tiles,
    is_phased,
    partial_bytes,
    phases,
    pow2_at_least,
    reach,
    reduction_channels,
    shared_estimate,
    tile_of,
    transposed_filter_bytes,
    transposed_filter_strides,
    transposes_filter,
    wrw_tiles,
)

SOURCE = "triton/conv_igemm.py"
#: Shared memory a block may hold: sm_90's 227 KiB, AMD's 64 KiB of LDS.
_SHARED_LIMIT = {"cuda": 227 * 1024, "hip": 64 * 1024}
#: Fraction of the device's fp16 tensor ceiling the kernels reach on a full grid (H200,
#: 2026-11-26, the prototype's 3x3 layers: 0.42-0.48 of the 8192^3 matmul rate, itself 0.71
#: of the ceiling the device reports); TF32 runs at half the rate.
_EFFICIENCY = {
    Direction.FORWARD: 0.32,
    Direction.BACKWARD_DATA: 0.26,
    Direction.BACKWARD_WEIGHTS: 0.24,
}
#: Launch, pipeline fill and epilogue beyond the roofline.
_FIXED_MS = 0.008
#: Not channels-last: the loads are scalars (not measured; a guess well below the vector path).
_STRIDED_FACTOR = 0.25


@functools.cache
def triton_installed() -> bool:
    """Whether Triton can be imported here (looked up, not imported)."""
    return importlib.util.find_spec("triton") is not None


def _channels_last(p: ConvProblem) -> bool:
    return all(d.strides[1] == 1 for d in (p.x, p.w, p.y))


class TritonConvSolver(TunableSolver):
    """One direction of the Triton implicit GEMM (subclasses set ``direction``)."""

    algorithm = Algorithm.IMPLICIT_GEMM
    backends = frozenset({"cuda", "hip"})
    direction: ClassVar[Direction]

    # -- applicability -----------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D, one group, this solver's direction, fp16/bf16 (fp32 in the ``tf32`` math mode
        on NVIDIA), any strides within 32-bit offsets, Triton installed."""
        p = problem
        if p.direction is not self.direction:
            return not_applicable(
                f"{p.direction.value}: this solver computes {self.direction.value}"
            )
        if p.dtype not in TRITON_TYPES:
            return not_applicable(f"{p.dtype.value}: the kernels compute fp16, bf16 and TF32")
        if p.dtype is DataType.FLOAT32:
            if ctx.backend != "cuda":
                return not_applicable("fp32: TF32 tensor cores are NVIDIA's")
            mode = getattr(ctx, "math_mode", "exact")
            if mode != "tf32":
                return not_applicable(
                    f"math mode is {mode!r}: these kernels round fp32 inputs to TF32; pass "
                    "Handle(..., math_mode='tf32') to allow it"
                )
        if p.spatial_dims != 2:
            return not_applicable(f"{p.spatial_dims}-D problem: the kernels are 2-D")
        if p.groups != 1:
            return not_applicable(f"{p.groups} groups: the kernels compute one group")
        if ctx.backend == "cuda" and _sm(ctx) < 80:
            return not_applicable(f"{ctx.device.arch}: the kernels need sm_80 or later")
        if reach(p) >= MAX_REACH:
            return not_applicable("a tensor reaches past the kernels' 32-bit offsets")
        if not triton_installed():
            return not_applicable("Triton is not installed (pip install triton)")
        if not self.perf_config_space(ctx, p):
            return not_applicable("no tile configuration fits (shared memory or split limits)")
        return APPLICABLE

    def notes_for(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> frozenset[str]:
        """``tf32`` on fp32 problems (inputs rounded to 10 mantissa bits), else none."""
        return frozenset({"tf32"}) if problem.dtype is DataType.FLOAT32 else frozenset()

    # -- configs -------------------------------------------------------------------------------

    def _tiles(self, p: ConvProblem) -> tuple[Tile, ...]:
        tf32 = p.dtype is DataType.FLOAT32
        if self.direction is Direction.BACKWARD_WEIGHTS:
            return WRW_TF32_TILES if tf32 else WRW_TILES
        if self.direction is Direction.BACKWARD_DATA:
            return TF32_BWD_TILES if tf32 else GEMM_TILES
        return TF32_FWD_TILES if tf32 else GEMM_TILES

    def _fitted_tiles(self, ctx: ExecutionContext, p: ConvProblem) -> list[Tile]:
        """The direction's tiles cut to the problem: no taller than the rows, columns and the
        reduction slice narrowed to the problem's (16 at least: the smallest tensor-core
        shape), within shared memory; duplicates dropped."""
        limit = _SHARED_LIMIT.get(ctx.backend, 48 * 1024)
        if self.direction is Direction.BACKWARD_WEIGHTS:
            k, c = p.w.lengths[0], p.w.lengths[1]
            rows, cols, depth = k, c, gemm_rows(p)
        else:
            rows, cols, depth = gemm_rows(p), gemm_columns(p), reduction_channels(p)
        out: list[Tile] = []
        for t in self._tiles(p):
            if t.bm > max(64, pow2_at_least(rows)):
                continue
            narrowest = TF32_MIN_COLUMNS if p.dtype is DataType.FLOAT32 else 16
            fitted = t._replace(
                bn=max(narrowest, min(t.bn, pow2_at_least(cols))),
                bk=max(16, min(t.bk, pow2_at_least(depth))),
            )
            if shared_estimate(p, fitted) > limit or fitted in out:
                continue
            out.append(fitted)
        return out

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """The fitted tiles; backward weights also splits its reduction (1 to 64 ways)
        where the tiles alone leave SMs idle and each share keeps 4 slices or more."""
        p = problem
        if p.direction is not self.direction or p.dtype not in TRITON_TYPES:
            return []
        if p.spatial_dims != 2 or p.groups != 1:
            return []
        tiles = self._fitted_tiles(ctx, p)
        if self.direction is not Direction.BACKWARD_WEIGHTS:
            return [config(t) for t in tiles]
        sms = max(1, ctx.device.compute_units)
        out = []
        for t in tiles:
            blocks = -(-gemm_rows(p) // t.bk)
            for split in SPLITS:
                if split > 1 and (
                    blocks < 4 * split
                    or partial_bytes(p, split) > MAX_PARTIALS
                    or wrw_tiles(p, t.bm, t.bn) * split > 4 * sms
                ):
                    continue
                out.append(config(t, split))
        return out

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The direction's first tile fitted to the problem (measured on ResNet-50, see
        :mod:`miocore_triton.geometry`); backward weights splits its reduction into the most
        shares (up to 64) that keep at most 3 programs per SM and 8 slices per share."""
        p = problem
        space = self.perf_config_space(ctx, p)
        if not space:
            return config(self._tiles(p)[-1])
        first = tile_of(space[0])
        if self.direction is not Direction.BACKWARD_WEIGHTS:
            return space[0]
        sms = max(1, ctx.device.compute_units)
        same_tile = [c for c in space if tile_of(c) == first]
        blocks = -(-gemm_rows(p) // first.bk)
        tiles = wrw_tiles(p, first.bm, first.bn)
        fitting = [
            c
            for c in same_tile
            if c["split"] == 1
            or (
                tiles * c["split"] <= WRW_PROGRAMS_PER_SM * sms
                and blocks >= WRW_MIN_SLICES * c["split"]
            )
        ]
        return max(fitting or same_tile[:1], key=lambda c: c["split"])

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """The six keys, a configuration of this problem's space."""
        try:
            values = {k: int(config[k]) for k in CONFIG_KEYS}
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
        """Backward weights split k ways: k fp32 partial filters; TF32 backward data: the
        transposed filter; otherwise none."""
        if self.direction is not Direction.BACKWARD_WEIGHTS:
            return transposed_filter_bytes(problem)
        return partial_bytes(problem, self._config(ctx, problem, perf_config)["split"])

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The GEMM's roofline at the measured fraction of the fp16 tensor rate (half for
        TF32), scaled down where the default configuration leaves SMs idle, and by far where
        the tensors are not channels-last."""
        p = problem
        cfg = self.default_perf_config(ctx, p)
        sms = max(1, ctx.device.compute_units)
        if self.direction is Direction.BACKWARD_WEIGHTS:
            programs = wrw_tiles(p, cfg["bm"], cfg["bn"]) * cfg["split"]
        else:
            programs = gemm_tiles(p, cfg["bm"], cfg["bn"]) * phases(p)
        eff = _EFFICIENCY[self.direction] * max(0.25, min(1.0, programs / sms))
        if p.dtype is DataType.FLOAT32:
            eff /= 2
        if not _channels_last(p):
            eff *= _STRIDED_FACTOR
        flops = float(p.flops)
        if self.direction is Direction.BACKWARD_DATA and not is_phased(p):
            flops *= p.conv.strides[0] * p.conv.strides[1]  # masked taps cost their dots
        ms = ctx.roofline_ms(flops, p.bytes_moved, DataType.FLOAT16, eff)
        return ctx.wti(p, ms + _FIXED_MS)

    # -- solution ------------------------------------------------------------------------------

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The direction's kernel compiled for the layer and tile; backward weights split k
        ways adds the reduction kernel."""
        p = problem
        cfg = self._config(ctx, p, perf_config)
        t = tile_of(cfg)
        split = cfg["split"]
        ty = TRITON_TYPES[p.dtype]
        shape = constants(p)
        transposed = transposes_filter(p)
        main_shape = {**shape, **transposed_filter_strides(p)} if transposed else shape
        common = [f"{k}={v}" for k, v in main_shape.items()]
        common += [
            f"BLOCK_M={t.bm}",
            f"BLOCK_N={t.bn}",
            f"BLOCK_K={t.bk}",
            f"STAGES={t.stages}",
            f"PRECISION={'tf32' if p.dtype is DataType.FLOAT32 else 'ieee'}",
            f"num_warps={t.warps}",
            f"num_stages={t.stages}",
            *(f"sig.{name}=*{ty}" for name in ("x_ptr", "w_ptr", "y_ptr")),
            "sig.M=i32",
        ]
        rows = gemm_rows(p)
        warp = 64 if ctx.backend == "hip" else 32
        wrw = self.direction is Direction.BACKWARD_WEIGHTS
        if wrw:
            options = (*common, "sig.part_ptr=*fp32", f"SPLITS={split}")
            grid: tuple[int, ...] = (wrw_tiles(p, t.bm, t.bn), split)
        elif self.direction is Direction.BACKWARD_DATA:
            options = (*common, "GROUP_M=8", f"PHASED={is_phased(p)}")
            grid = (gemm_tiles(p, t.bm, t.bn), phases(p))
        else:
            options = (*common, "GROUP_M=8")
            grid = (gemm_tiles(p, t.bm, t.bn),)
        kernels = []
        k, c, r, s = p.w.lengths
        if transposed:
            wt_options = [f"{n}={shape[n]}" for n in ("C", "K", "R", "S", "WK", "WC", "WR", "WS")]
            wt_options += [f"BLOCK={REDUCE_BLOCK}", "num_warps=4", "num_stages=1"]
            wt_options += [f"sig.w_ptr=*{ty}", f"sig.wt_ptr=*{ty}"]
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name="conv_wtrans",
                    options=tuple(sorted(wt_options)),
                    grid=(-(-(k * c * r * s) // REDUCE_BLOCK),),
                    block=(4 * warp,),
                )
            )
        kernels.append(
            KernelInfo(
                source=SOURCE,
                kernel_name=KERNELS[self.direction],
                options=tuple(sorted(options)),
                grid=grid,
                block=(t.warps * warp,),
            )
        )
        if wrw and split > 1:
            reduce_options = [
                f"{n}={shape[n]}" for n in ("C", "K", "R", "S", "WK", "WC", "WR", "WS")
            ]
            reduce_options += [
                f"SPLITS={split}",
                f"BLOCK={REDUCE_BLOCK}",
                "num_warps=4",
                "num_stages=1",
                "sig.part_ptr=*fp32",
                f"sig.w_ptr=*{ty}",
            ]
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name="conv_wrw_reduce",
                    options=tuple(sorted(reduce_options)),
                    grid=(-(-(k * c * r * s) // REDUCE_BLOCK),),
                    block=(4 * warp,),
                )
            )
        workspace = partial_bytes(p, split) if wrw else transposed_filter_bytes(p)
        direction = self.direction

        def factory(compiled: Any) -> Any:
            from miocore.backends.gpu_kernels import KernelArgs

            first = 1 if transposed else 0
            main = compiled[first]
            _check_launchable(main)
            shared, threads = int(main.meta["shared"]), (int(main.meta["threads"]),)
            # Triton appends two scratch pointers (global, profile) to the parameters; two
            # more NULL slots cost nothing where a version appends fewer.
            tail = [("ptr", 0)] * 4
            if wrw:
                args = KernelArgs([("ptr", 0)] * 4 + [("i32", rows), *tail])
            else:
                args = KernelArgs([("ptr", 0)] * 3 + [("i32", rows), *tail])
            reduce = compiled[1] if wrw and len(compiled) > 1 else None
            wtrans = compiled[0] if transposed else None
            wtargs = KernelArgs([("ptr", 0)] * 2 + tail) if wtrans is not None else None
            wtthreads = (int(wtrans.meta["threads"]),) if wtrans is not None else None
            rargs = KernelArgs([("ptr", 0)] * 2 + tail) if reduce is not None else None
            rshared = int(reduce.meta["shared"]) if reduce is not None else 0
            rthreads = (int(reduce.meta["threads"]),) if reduce is not None else None

            def invoker(handle: Any, ip: InvokeParams) -> None:
                _check_aligned(ip)
                if direction is Direction.BACKWARD_WEIGHTS:
                    part = _aligned_workspace(ip) if workspace else 0
                    args.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr, part)
                    main.launch(args, block=threads, shared=shared)
                    if reduce is not None and rargs is not None:
                        rargs.set_pointers(part, ip.w.ptr)
                        reduce.launch(rargs, block=rthreads, shared=rshared)
                    return
                w_ptr = ip.w.ptr
                if wtrans is not None and wtargs is not None:
                    w_ptr = _aligned_workspace(ip)
                    wtargs.set_pointers(ip.w.ptr, w_ptr)
                    wtrans.launch(wtargs, block=wtthreads, shared=int(wtrans.meta["shared"]))
                args.set_pointers(ip.x.ptr, w_ptr, ip.y.ptr)
                main.launch(args, block=threads, shared=shared)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            kernels=tuple(kernels),
        )


def _sm(ctx: ExecutionContext) -> int:
    """The compute capability of a CUDA device as one number (``sm90`` -> 90)."""
    digits = "".join(ch for ch in ctx.device.arch if ch.isdigit())
    return int(digits) if digits else 0


def _check_launchable(kernel: Any) -> None:
    """Refuse a binary whose launch needs more than miocore's launch gives it."""
    meta = kernel.meta
    if meta.get("global_scratch_size") or meta.get("profile_scratch_size"):
        raise InvalidArgumentError(
            "this Triton kernel asks for scratch memory, which miocore's launch does not give",
            field="global_scratch_size",
            value=meta.get("global_scratch_size"),
        )


def _aligned_workspace(ip: InvokeParams) -> int:
    """The workspace's address, refused unless 16-byte aligned (the kernels assume it)."""
    ptr = int(ip.workspace.ptr)
    if ptr % 16:
        raise InvalidArgumentError(
            "Triton kernels need a 16-byte aligned workspace",
            field="workspace pointer",
            value=hex(ptr),
        )
    return ptr


def _check_aligned(ip: InvokeParams) -> None:
    """The kernels were compiled for 16-byte aligned tensors (their vector loads need it)."""
    for name in ("x", "w", "y"):
        ptr = getattr(ip, name).ptr
        if ptr % 16:
            raise InvalidArgumentError(
                "Triton kernels need 16-byte aligned tensors",
                field=f"{name} pointer",
                value=hex(ptr),
            )


class TritonForward(TritonConvSolver):
    """Forward convolution as a Triton implicit GEMM (tensor cores; fp16/bf16, TF32)."""

    name = "triton.igemm_fwd"
    direction = Direction.FORWARD


class TritonBackwardData(TritonConvSolver):
    """Backward data as a Triton implicit GEMM over dy and w (strided taps masked)."""

    name = "triton.igemm_bwd"
    direction = Direction.BACKWARD_DATA


class TritonBackwardWeights(TritonConvSolver):
    """Backward weights as a Triton GEMM over (n, p, q), split-K with an fp32 reduction."""

    name = "triton.igemm_wrw"
    direction = Direction.BACKWARD_WEIGHTS


SOLVERS = (TritonForward(), TritonBackwardData(), TritonBackwardWeights())
