"""Triton implicit-GEMM solvers: ``triton.igemm_fwd``, ``triton.igemm_bwd`` (backward data) and
``triton.igemm_wrw`` (backward weights), fp16/bf16 with fp32 accumulation and fp32 through
TF32 (only in the ``"tf32"`` math mode), 2-D and 3-D, on NVIDIA (sm_80 and later; ``wgmma``
on sm_90) and AMD (fp16/bf16) GPUs.

The kernels (``kernels/conv_igemm.py`` and ``kernels/conv_wrw.py``, with the copies around
them in ``kernels/copies.py``) are compiled per layer (every size but the batch is a
compile-time constant) and tile configuration by :mod:`miocore_triton.builder`, cached in
miocore's binary cache and launched through miocore's backend (the launches of a solution:
:mod:`miocore_triton.launches`). The default configuration is each direction's first tile
fitted to the problem, measured on ResNet-50 and VGG-16 (:mod:`miocore_triton.geometry`), or
a larger one where the launch fills it (measured on the 3-D U-Net); exhaustive find and
``miocore tune`` search the rest.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import ClassVar

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
from miocore_triton.depth import depth_declines, depth_view, is_image
from miocore_triton.geometry import (
    BIG_TILE_ROW_FILL,
    BIG_TILE_WAVES,
    CONFIG_KEYS,
    GEMM_MIN_ITERATIONS,
    GEMM_PROGRAMS_PER_SM,
    GEMM_SPLIT_DEFAULT_PROGRAMS_PER_SM,
    GEMM_SPLIT_FILL,
    GEMM_TILES,
    IMAGE_BIG_TILE_WAVES,
    IMAGE_FWD_TILES,
    MAX_PARTIALS,
    MAX_REACH,
    MIN_TILE_CHANNELS,
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
    gemm_columns,
    gemm_rows,
    gemm_tiles,
    image_tiles,
    is_phased,
    partial_bytes,
    phases,
    pow2_at_least,
    reach,
    reduction_channels,
    row_fill,
    shared_estimate,
    split_iterations,
    splits_gemm,
    spreads,
    tile_of,
    wrw_columns,
    wrw_tiles,
)
from miocore_triton.launches import copied, invoker_factory, plan, tensor_bytes

#: Shared memory a block may hold: sm_90's 227 KiB, AMD's 64 KiB of LDS.
_SHARED_LIMIT = {"cuda": 227 * 1024, "hip": 64 * 1024}
#: Fraction of the device's fp16 tensor ceiling the kernels reach on a full grid, and the
#: launch, pipeline fill and epilogue beyond the roofline: fitted (least squares on the log
#: of the time) to the defaults' measured times on ResNet-50's and VGG-16's layers but the
#: stem, fp16 NHWC, H100, 2026-11-26 (``gpu_h100_triton_fp16_resnet50_vgg16.json``): typical
#: error of a prediction 29% / 31% / 37% (the first guesses, from the prototype, predicted
#: forward and backward data 21-24% too slow). TF32 runs at half the rate.
_EFFICIENCY = {
    Direction.FORWARD: 0.40,
    Direction.BACKWARD_DATA: 0.40,
    Direction.BACKWARD_WEIGHTS: 0.26,
}
_FIXED_MS = {
    Direction.FORWARD: 0.004,
    Direction.BACKWARD_DATA: 0.008,
    Direction.BACKWARD_WEIGHTS: 0.008,
}


@functools.cache
def triton_installed() -> bool:
    """Whether Triton can be imported here (looked up, not imported)."""
    return importlib.util.find_spec("triton") is not None


class TritonConvSolver(TunableSolver):
    """One direction of the Triton implicit GEMM (subclasses set ``direction``)."""

    algorithm = Algorithm.IMPLICIT_GEMM
    backends = frozenset({"cuda", "hip"})
    direction: ClassVar[Direction]
    #: Whether the solution runs the layer as its depth image (the ``depth`` solvers).
    depth: ClassVar[bool] = False

    # -- applicability -----------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D or 3-D, one group, this solver's direction, fp16/bf16 (fp32 in the ``tf32`` math mode
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
        if p.spatial_dims not in (2, 3):
            return not_applicable(f"{p.spatial_dims}-D problem: the kernels are 2-D and 3-D")
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
        if tf32:
            return TF32_FWD_TILES
        return IMAGE_FWD_TILES if image_tiles(p) else GEMM_TILES

    def _fitted_tiles(self, ctx: ExecutionContext, p: ConvProblem) -> list[Tile]:
        """The direction's tiles cut to the problem: no taller than the rows, columns and the
        reduction slice narrowed to the problem's (16 at least: the smallest tensor-core
        shape), within shared memory; duplicates dropped."""
        limit = _SHARED_LIMIT.get(ctx.backend, 48 * 1024)
        if self.direction is Direction.BACKWARD_WEIGHTS:
            rows, cols, depth = p.w.lengths[0], wrw_columns(p), gemm_rows(p)
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
        if p.spatial_dims not in (2, 3) or p.groups != 1:
            return []
        tiles = self._fitted_tiles(ctx, p)
        sms = max(1, ctx.device.compute_units)
        if self.direction is not Direction.BACKWARD_WEIGHTS:
            return [config(t, split) for t in tiles for split in self._gemm_splits(p, t, sms)]
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

    @staticmethod
    def _gemm_splits(p: ConvProblem, t: Tile, sms: int) -> list[int]:
        """Forward's and unphased backward data's reduction splits for tile ``t``: 1, and
        where the output tiles alone fill at most ``GEMM_SPLIT_FILL`` of the SMs, the splits
        that keep at most ``GEMM_PROGRAMS_PER_SM`` programs per SM and
        ``GEMM_MIN_ITERATIONS`` loop iterations per share (partials within
        ``MAX_PARTIALS``)."""
        programs = gemm_tiles(p, t.bm, t.bn)
        if not splits_gemm(p) or programs > GEMM_SPLIT_FILL * sms:
            return [1]
        iterations = split_iterations(p, t.bk)
        return [
            split
            for split in SPLITS
            if split == 1
            or (
                programs * split <= GEMM_PROGRAMS_PER_SM * sms
                and iterations >= GEMM_MIN_ITERATIONS * split
                and partial_bytes(p, split) <= MAX_PARTIALS
            )
        ]

    @staticmethod
    def _default_split(p: ConvProblem, space: list[PerfConfig], tile: Tile, sms: int) -> PerfConfig:
        """Forward's and backward data's configuration of ``tile``: unsplit, or where its
        programs fill at most ``GEMM_SPLIT_FILL`` of the SMs, the most shares of the space
        that keep at most ``GEMM_SPLIT_DEFAULT_PROGRAMS_PER_SM`` programs per SM."""
        same_tile = [cfg for cfg in space if tile_of(cfg) == tile]
        if not same_tile:
            return space[0]
        programs = gemm_tiles(p, tile.bm, tile.bn)
        if programs > GEMM_SPLIT_FILL * sms:
            return same_tile[0]
        budget = GEMM_SPLIT_DEFAULT_PROGRAMS_PER_SM * sms
        fitting = [cfg for cfg in same_tile if programs * cfg["split"] <= budget]
        return max(fitting or same_tile[:1], key=lambda cfg: cfg["split"])

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The direction's first tile fitted to the problem (measured on ResNet-50, see
        :mod:`miocore_triton.geometry`), or a larger one where the problem has the work for
        it: forward and backward data take the largest tile that still launches
        ``BIG_TILE_WAVES`` programs per SM (``IMAGE_BIG_TILE_WAVES`` with row tiles inside
        one image, whose rows it must fill about as well as the first tile), then split their
        reduction where that tile leaves most SMs idle (:meth:`_default_split`); backward
        weights the largest whose rows and columns K and C fill, then splits its reduction
        into the most shares (up to 64) that keep at most 3 programs per SM and 8 slices per
        share.

        The larger tiles (TF32 only in image tiles) were measured on the 3-D U-Net's layers
        (fp16, H100, channels-last; in NCDHW on an H200, see ``IMAGE_BIG_TILE_WAVES``): the
        first tile ran 20% (forward, backward data) and 26% (backward weights) behind each layer's
        best on average, the larger ones 10% and 11%; on ResNet-50 and VGG-16 they moved
        forward 5.7 → 6.3%, backward data 7.5 → 5.5%, backward weights 6.9 → 5.8%
        (``benchmarks/results/gpu_h100_triton_fp16_unet3d.json``)."""
        p = problem
        space = self.perf_config_space(ctx, p)
        if not space:
            return config(self._tiles(p)[-1])
        sms = max(1, ctx.device.compute_units)
        first = tile_of(space[0])
        tiles = sorted({tile_of(c) for c in space}, key=lambda t: (-t.bm * t.bn, -t.bk, t.warps))
        larger = [t for t in tiles if t.bm * t.bn > first.bm * first.bn]
        if p.dtype is DataType.FLOAT32 and not image_tiles(p):
            # TF32 channels-last keeps its fitted first tiles (the larger ones' rule took its
            # ResNet-50 defaults from 1.02x the best's time to 1.05x); in image tiles the
            # larger ones pay as in fp16 (U-Net NCDHW 1.09x -> 1.04x, ResNet-50's NCHW 1x1
            # layers 1.14x -> 1.04x; H200)
            larger = []
        if self.direction is not Direction.BACKWARD_WEIGHTS:
            waves = IMAGE_BIG_TILE_WAVES if image_tiles(p) else BIG_TILE_WAVES
            fill = BIG_TILE_ROW_FILL * row_fill(p, first.bm)
            tile = next(
                (
                    t
                    for t in larger
                    if gemm_tiles(p, t.bm, t.bn) >= waves * sms and row_fill(p, t.bm) >= fill
                ),
                first,
            )
            return self._default_split(p, space, tile, sms)
        k, c = p.w.lengths[0], wrw_columns(p)
        first = next((t for t in larger if t.bm <= k and t.bn <= c), first)
        same_tile = [cfg for cfg in space if tile_of(cfg) == first]
        blocks = -(-gemm_rows(p) // first.bk)
        programs = wrw_tiles(p, first.bm, first.bn)
        fitting = [
            cfg
            for cfg in same_tile
            if cfg["split"] == 1
            or (
                programs * cfg["split"] <= WRW_PROGRAMS_PER_SM * sms
                and blocks >= WRW_MIN_SLICES * cfg["split"]
            )
        ]
        return max(fitting or same_tile[:1], key=lambda cfg: cfg["split"])

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
        """The copies of inputs the GEMM cannot read as they lie, then TF32 backward data's
        transposed filter or a split backward-weights run's fp32 partials."""
        return plan(ctx, problem, self._config(ctx, problem, perf_config), depth=self.depth)[1]

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The GEMM's roofline at the measured fraction of the fp16 tensor rate (half for
        TF32), scaled down where the default configuration leaves SMs idle, plus the copies
        of inputs the GEMM cannot read as they lie."""
        return ctx.wti(problem, self._predicted_ms(ctx, problem))

    def _predicted_ms(self, ctx: ExecutionContext, p: ConvProblem) -> float:
        """:meth:`wti`'s predicted milliseconds of the solution on ``p``."""
        cfg = self.default_perf_config(ctx, p)
        sms = max(1, ctx.device.compute_units)
        if self.direction is Direction.BACKWARD_WEIGHTS:
            programs = wrw_tiles(p, cfg["bm"], cfg["bn"]) * cfg["split"]
        else:
            programs = gemm_tiles(p, cfg["bm"], cfg["bn"]) * phases(p) * cfg["split"]
        eff = _EFFICIENCY[self.direction] * max(0.25, min(1.0, programs / sms))
        if p.dtype is DataType.FLOAT32:
            eff /= 2
        if self.direction is not Direction.BACKWARD_WEIGHTS:  # (tap, c) columns there
            # A tap's reduction slice (forward) and a tile's columns (backward data: dx's
            # channels) are 16 wide at least: a stem's 3 channels fill 3/16 of each product
            # (its forward ran 18x its roofline, its backward data 17x; H200, 2026-11-28).
            eff *= min(1.0, min(reduction_channels(p), gemm_columns(p)) / MIN_TILE_CHANNELS)
        flops = float(p.flops)
        if self.direction is Direction.BACKWARD_DATA and not (is_phased(p) or spreads(p)):
            flops *= p.conv.strides[0] * p.conv.strides[1]  # masked taps cost their dots
        ms = ctx.roofline_ms(flops, p.bytes_moved, DataType.FLOAT16, eff)
        # inputs copied before the GEMM (channels-last, or TF32 wrw's channels-first): read
        # and written once more
        moved = sum(2 * tensor_bytes(getattr(p, name)) for name in copied(p))
        ms += 1e3 * moved / (ctx.device.peak_gbps * 1e9)
        return ms + _FIXED_MS[self.direction]

    # -- solution ------------------------------------------------------------------------------

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The direction's GEMM compiled for the layer and tile, after the copies it reads
        (inputs copied to the order it reads, TF32's transposed filter) and before the split
        reduction (:mod:`miocore_triton.launches`)."""
        cfg = self._config(ctx, problem, perf_config)
        steps, workspace = plan(ctx, problem, cfg, depth=self.depth)
        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=invoker_factory(steps),
            kernels=tuple(step.kernel for step in steps),
        )


def _sm(ctx: ExecutionContext) -> int:
    """The compute capability of a CUDA device as one number (``sm90`` -> 90)."""
    digits = "".join(ch for ch in ctx.device.arch if ch.isdigit())
    return int(digits) if digits else 0


class TritonForward(TritonConvSolver):
    """Forward convolution as a Triton implicit GEMM (tensor cores; fp16/bf16, TF32)."""

    name = "triton.igemm_fwd"
    direction = Direction.FORWARD
    #: 1: larger tiles in channels-first outputs' image tiles, and split reductions where
    #: the tiles are few, by default (2026-11-28).
    revision = 1


class TritonBackwardData(TritonConvSolver):
    """Backward data as a Triton implicit GEMM over dy and w (strided taps masked)."""

    name = "triton.igemm_bwd"
    direction = Direction.BACKWARD_DATA
    #: 1: strided 1x1 layers into a channels-first dx spread their results (``spreads``);
    #: 2: the forward's new defaults (larger image tiles, split reductions; 2026-11-28).
    revision = 2


class TritonBackwardWeights(TritonConvSolver):
    """Backward weights as a Triton GEMM over (n, p, q), split-K with an fp32 reduction."""

    name = "triton.igemm_wrw"
    direction = Direction.BACKWARD_WEIGHTS
    #: 1: NCHW dy (and a 1x1 layer's x) read in place, (tap, c) columns below 16 channels;
    #: 2: TF32 reads an NCHW x in place too (``wrw_x_in_place``: 3-5x faster there);
    #: 3: TF32 copies channels-last x and dy channels-first to read them so
    #: (``wrw_channels_first``; 2026-11-28).
    revision = 3


class _DepthImage(TritonConvSolver):
    """The direction's GEMM on a few-channel layer's depth image (:mod:`miocore_triton.depth`):
    its configurations, default and cost are the image's."""

    depth = True

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """A layer :func:`~miocore_triton.depth.depth_declines` accepts, whose depth image the
        direction's GEMM runs."""
        if problem.direction is not self.direction:
            return super().is_applicable(ctx, problem)  # which says why
        reason = depth_declines(problem)
        if reason:
            return not_applicable(reason)
        if reach(problem) >= MAX_REACH:  # the copies index the layer's own tensors
            return not_applicable("a tensor reaches past the kernels' 32-bit offsets")
        return super().is_applicable(ctx, depth_view(problem))

    @staticmethod
    def _image(problem: ConvProblem) -> ConvProblem | None:
        """The depth image the GEMM runs (an image's is itself: the base class's checks ask
        about it again); None where the layer has none."""
        if not depth_declines(problem):
            return depth_view(problem)
        return problem if is_image(problem) else None

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """The depth image's configurations."""
        image = self._image(problem)
        return [] if image is None else super().perf_config_space(ctx, image)

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The depth image's default."""
        return super().default_perf_config(ctx, self._image(problem) or problem)

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig
    ) -> bool:
        return super().is_valid_perf_config(ctx, self._image(problem) or problem, perf_config)

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The image's GEMM (:meth:`TritonConvSolver.wti`) plus the copies into and out of
        the image, against the layer's own ideal time (the image's padded channels are work
        the layer does not need)."""
        image = self._image(problem)
        if image is None or image is problem:
            return super().wti(ctx, problem)
        # x read and its image written before the GEMM (whose roofline counts the image);
        # backward data's the other way round after it: the same bytes
        copies = tensor_bytes(problem.x) + tensor_bytes(image.x)
        ms = self._predicted_ms(ctx, image) + 1e3 * copies / (ctx.device.peak_gbps * 1e9)
        return ctx.wti(problem, ms)


class TritonDepthForward(_DepthImage):
    """Forward of a few-channel layer (a stem, a first layer) as its depth image."""

    name = "triton.depth_fwd"
    direction = Direction.FORWARD


class TritonDepthBackwardData(_DepthImage):
    """Backward data of a strided few-channel layer as its depth image."""

    name = "triton.depth_bwd"
    direction = Direction.BACKWARD_DATA


class TritonDepthBackwardWeights(_DepthImage):
    """Backward weights of a few-channel layer as its depth image."""

    name = "triton.depth_wrw"
    direction = Direction.BACKWARD_WEIGHTS


SOLVERS = (
    TritonForward(),
    TritonBackwardData(),
    TritonBackwardWeights(),
    TritonDepthForward(),
    TritonDepthBackwardData(),
    TritonDepthBackwardWeights(),
)
