"""The GEMM view of a 2-D or 3-D convolution for ``kernels/conv_igemm.py`` and
``kernels/conv_wrw.py``: the kernels'
compile-time constants, the rows that carry the batch, the tile configurations and the launch
grids.

Logical lengths (N, C, [D,] H, W) of x and y and (K, C, [T,] R, S) of w, with each tensor's own
strides: any layout compiles; channels-last (NHWC, NDHWC, KRSC) is the one whose loads are
vectors. A 2-D problem is a 3-D one of depth 1.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from miocore import ConvProblem, DataType, Direction, PerfConfig, TensorDescriptor

#: Triton's name of each element type (a kernel argument's ``*fp16``).
TRITON_TYPES = {DataType.FLOAT16: "fp16", DataType.BFLOAT16: "bf16", DataType.FLOAT32: "fp32"}
#: The kernel of each direction (``conv_igemm.py``: forward and backward data;
#: ``conv_wrw.py``: backward weights) and its source.
KERNELS = {
    Direction.FORWARD: "conv_fwd",
    Direction.BACKWARD_DATA: "conv_bwd",
    Direction.BACKWARD_WEIGHTS: "conv_wrw",
}
SOURCES = {
    Direction.FORWARD: "triton/conv_igemm.py",
    Direction.BACKWARD_DATA: "triton/conv_igemm.py",
    Direction.BACKWARD_WEIGHTS: "triton/conv_wrw.py",
}
#: Offsets are 32-bit in the kernels.
MAX_REACH = 1 << 31
#: Split-K partials beyond this are not worth the traffic (nor the caller's memory).
MAX_PARTIALS = 256 << 20
#: Elements each program of the split-K reduction sums.
REDUCE_BLOCK = 256


class Tile(NamedTuple):
    """One tile configuration: rows x columns x reduction slice, warps, pipeline stages."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int


#: Forward and backward-data tiles (fp16/bf16), the default first: 64x128x64 on 4 warps with
#: 3 stages won 44 of ResNet-50's 92 fp16/bf16 forward and backward-data cases on an H100 and
#: came within 2.4% (forward) and 4.6% (backward data) of each case's best on average
#: (2026-11-26, ``benchmarks/gpu_triton_bench.py``). ``bn`` and ``bk`` shrink to the problem.
GEMM_TILES = (
    Tile(64, 128, 64, 4, 3),
    Tile(128, 128, 64, 8, 3),
    Tile(128, 64, 64, 4, 3),
    Tile(64, 64, 64, 4, 4),
    Tile(256, 128, 64, 8, 3),
    Tile(128, 128, 32, 4, 4),
    Tile(64, 64, 32, 4, 4),
)
#: Forward with a channels-first output or input read in place (row tiles inside one image):
#: larger tiles pay there, 128x128x32 on 4 warps came within 14% of each of ResNet-50's NCHW
#: layers' best on average (64x128x64: 22%).
IMAGE_FWD_TILES = (
    Tile(128, 128, 32, 4, 4),
    *(t for t in GEMM_TILES if t != Tile(128, 128, 32, 4, 4)),
)
#: TF32 halves the reduction slice (4-byte elements, same shared memory). Forward's default
#: 64x128x32 (within 1.1% of the best on average), backward data's 128x64x32 (2.5%).
TF32_FWD_TILES = (
    Tile(64, 128, 32, 4, 3),
    Tile(128, 64, 32, 4, 3),
    Tile(128, 128, 32, 8, 3),
    Tile(64, 64, 32, 4, 4),
    Tile(128, 64, 16, 4, 4),
)
TF32_BWD_TILES = (
    Tile(128, 64, 32, 4, 3),
    Tile(128, 64, 16, 4, 4),
    Tile(128, 128, 32, 8, 3),
    Tile(64, 128, 32, 4, 3),
    Tile(64, 64, 32, 4, 4),
)
#: Backward weights: rows k, columns c of one tap, reduction over (n, p, q); the default
#: first (64x64x64 won 24 of 46 fp16/bf16 cases, within 3.7% of the best on average).
WRW_TILES = (
    Tile(64, 64, 64, 4, 4),
    Tile(128, 128, 64, 8, 3),
    Tile(128, 64, 64, 4, 3),
    Tile(64, 128, 64, 4, 3),
    Tile(64, 64, 32, 4, 4),
)
WRW_TF32_TILES = (
    Tile(128, 128, 32, 8, 3),
    Tile(128, 64, 32, 4, 3),
    Tile(64, 64, 32, 4, 4),
)
#: Forward and backward data (fp16/bf16, channels-last) take a larger tile than the first
#: where it still launches this many programs per SM (see ``default_perf_config``).
BIG_TILE_WAVES = 4
#: Forward and backward data with row tiles inside one image (channels-first outputs): a
#: larger tile where it launches this many programs per SM and fills at least
#: BIG_TILE_ROW_FILL of the rows the first tile fills (an image's pixels are few on small
#: planes: 256-row tiles on 7x7 planes wasted 80% and ran 1.9-2.2x the best). Fitted on the
#: 3-D U-Net in NCDHW (H200, fp16, every config: defaults 1.35x the best's time -> 1.05x
#: with the splits below) and checked on ResNet-50 in NCHW (H100: 1.11x -> 1.10x).
IMAGE_BIG_TILE_WAVES = 1.5
BIG_TILE_ROW_FILL = 0.8
#: TF32 tiles are never narrower than this: Triton 3.6's TF32 wgmma with 16 columns on 4 warps
#: gave wrong results on an H100 (0.29-0.58 relative error; the interpreter and 8 warps right).
TF32_MIN_COLUMNS = 32
#: A split backward-weights run: the most programs per SM it aims at, and the fewest
#: reduction slices each share keeps.
WRW_PROGRAMS_PER_SM = 3
WRW_MIN_SLICES = 8
#: A split forward or backward-data run (layers with few output tiles: the 3-D U-Net's 8^3
#: layers launch 16-32 programs on 132 SMs): its tiles alone fill at most this share of the
#: SMs, its programs at most GEMM_PROGRAMS_PER_SM per SM, each share at least
#: GEMM_MIN_ITERATIONS of the loop.
GEMM_SPLIT_FILL = 0.5
GEMM_PROGRAMS_PER_SM = 2
GEMM_MIN_ITERATIONS = 4
#: The default splits where the default tile's programs fill at most GEMM_SPLIT_FILL of
#: the SMs, into the most shares that keep at most this many programs per SM (the U-Net's
#: 8^3 and 16^3 layers: 1.10x the best split's time, 0.64x the unsplit default's).
GEMM_SPLIT_DEFAULT_PROGRAMS_PER_SM = 1
SPLITS = (1, 2, 4, 8, 16, 32, 64)
CONFIG_KEYS = ("bm", "bn", "bk", "warps", "stages", "split")


def pow2_at_least(v: int) -> int:
    """The smallest power of two >= ``v`` (1 for ``v`` <= 1)."""
    return 1 << max(0, (v - 1).bit_length())


def _volume(lengths: Any) -> int:
    out = 1
    for n in lengths:
        out *= n
    return out


def spatial(desc: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """A tensor's (depth, height, width) lengths and strides; depth 1 (stride 0) in 2-D."""
    if len(desc.lengths) == 5:
        return tuple(desc.lengths[2:]), tuple(desc.strides[2:])  # type: ignore[return-value]
    h, w = desc.lengths[2:]
    sh, sw = desc.strides[2:]
    return (1, h, w), (0, sh, sw)


def constants(p: ConvProblem) -> dict[str, int]:
    """The problem's compile-time constants, named as the kernels' arguments (a 2-D problem
    is a 3-D one of depth 1: D = O = T = 1, its depth strides 0)."""
    c = p.x.lengths[1]
    k = p.w.lengths[0]
    (d, h, w), (xd, xh, xw) = spatial(p.x)
    (t, r, s), (wt, wr, ws) = spatial(p.w)
    (o, pp, qq), (yd, yh, yw) = spatial(p.y)
    xs, ws_, ys = p.x.strides, p.w.strides, p.y.strides
    conv = p.conv
    sd, sh, sw = (1, *conv.strides) if len(conv.strides) == 2 else conv.strides
    pd, ph, pw = (0, *conv.pads) if len(conv.pads) == 2 else conv.pads
    dd, dh, dw = (1, *conv.dilations) if len(conv.dilations) == 2 else conv.dilations
    return {
        **{"C": c, "K": k, "H": h, "W": w, "P": pp, "Q": qq, "R": r, "S": s},
        **{"SH": sh, "SW": sw, "PH": ph, "PW": pw, "DH": dh, "DW": dw},
        **{"D": d, "O": o, "T": t, "SD": sd, "PD": pd, "DD": dd, "XD": xd, "YD": yd, "WT": wt},
        **{"XN": xs[0], "XC": xs[1], "XH": xh, "XW": xw},
        **{"WK": ws_[0], "WC": ws_[1], "WR": wr, "WS": ws},
        **{"YN": ys[0], "YC": ys[1], "YH": yh, "YW": yw},
    }


def spreads(p: ConvProblem) -> bool:
    """Backward data of a strided 2-D 1x1 layer without padding into a channels-first dx
    (ResNet's stride-2 shortcuts in NCHW): ``conv_bwd_spread``, one GEMM over dy's pixels
    (read in place) whose epilogue writes each result with its zeros. The width stride is 1,
    2 or 4 (the epilogue interleaves in powers of two); fp16 and bf16 with whole channel
    blocks (TF32 needs the reduction innermost, which NCHW's dy is not)."""
    if p.direction is not Direction.BACKWARD_DATA or p.dtype is DataType.FLOAT32:
        return False
    if p.spatial_dims != 2 or max(p.w.lengths[2:]) != 1 or max(p.conv.pads) != 0:
        return False
    sh, sw = p.conv.strides
    if max(sh, sw) == 1 or sw not in (1, 2, 4):
        return False
    return _channels_first(p.x) and full_channel_blocks(p)


def is_phased(p: ConvProblem) -> bool:
    """Backward data with a stride above 1 and no dilation runs one GEMM per stride phase
    (except where it :func:`spreads`)."""
    return (
        p.direction is Direction.BACKWARD_DATA
        and max(p.conv.strides) > 1
        and max(p.conv.dilations) == 1
        and not spreads(p)
    )


def kernel_name(p: ConvProblem) -> str:
    """The ``@triton.jit`` function of a problem's GEMM (in ``SOURCES[p.direction]``)."""
    return "conv_bwd_spread" if spreads(p) else KERNELS[p.direction]


def phases(p: ConvProblem) -> int:
    """Stride phases of a phased backward-data run (grid axis 1), else 1."""
    return _volume(p.conv.strides) if is_phased(p) else 1


def gemm_rows(p: ConvProblem) -> int:
    """M, the GEMM rows (the kernels' one run-time size): output pixels forward and for the
    weights' reduction, input pixels backward data (one stride phase's, rounded up, when
    phased; dy's when it :func:`spreads`)."""
    n = p.x.lengths[0]
    if spreads(p):
        return n * _volume(p.y.lengths[2:])
    if p.direction is Direction.BACKWARD_DATA:
        if is_phased(p):
            pixels = zip(p.x.lengths[2:], p.conv.strides, strict=True)
            return n * _volume(-(-a // b) for a, b in pixels)
        return n * _volume(p.x.lengths[2:])
    return n * _volume(p.y.lengths[2:])


def gemm_columns(p: ConvProblem) -> int:
    """The output columns of a forward (K) or backward-data (C) tile."""
    return p.w.lengths[1] if p.direction is Direction.BACKWARD_DATA else p.w.lengths[0]


def reduction_channels(p: ConvProblem) -> int:
    """Channels of one tap's reduction: C forward, K backward data."""
    return p.w.lengths[0] if p.direction is Direction.BACKWARD_DATA else p.w.lengths[1]


def reach(p: ConvProblem) -> int:
    """The largest element offset into any of the three tensors."""
    return (
        max(
            sum((n - 1) * abs(s) for n, s in zip(d.lengths, d.strides, strict=True))
            for d in (p.x, p.w, p.y)
        )
        + 1
    )


def partial_bytes(p: ConvProblem, split: int) -> int:
    """fp32 partial sums of a split run (none for one split): the filter's for backward
    weights, the output's (y, dx) for forward and backward data."""
    if split <= 1:
        return 0
    if p.direction is Direction.BACKWARD_WEIGHTS:
        return split * _volume(p.w.lengths) * 4
    return split * _volume(gemm_output(p).lengths) * 4


def gemm_output(p: ConvProblem) -> Any:
    """The tensor a forward (y) or backward-data (dx) GEMM writes."""
    return p.x if p.direction is Direction.BACKWARD_DATA else p.y


def split_iterations(p: ConvProblem, bk: int) -> int:
    """Iterations of a forward or unphased backward-data GEMM's reduction loop: taps x
    slices of ``bk`` reduction channels (c forward, k backward data)."""
    return _volume(p.w.lengths[2:]) * -(-reduction_channels(p) // bk)


def splits_gemm(p: ConvProblem) -> bool:
    """Whether forward or backward data may split its reduction: not phased, not spread
    (their grids and loops are per stride phase)."""
    if p.direction is Direction.FORWARD:
        return True
    return p.direction is Direction.BACKWARD_DATA and not is_phased(p) and not spreads(p)


def split_partial_strides(p: ConvProblem) -> tuple[int, int, int, int, int]:
    """(N, C, D, H, W) strides of a split run's fp32 partials: the output packed in its own
    order (channels first or last), one copy per share."""
    out = gemm_output(p)
    c = out.lengths[1]
    (d, h, w), _ = spatial(out)
    if _channels_first(out):
        return c * d * h * w, d * h * w, h * w, w, 1
    return d * h * w * c, 1, h * w * c, w * c, c


def transposes_filter(p: ConvProblem) -> bool:
    """TF32 backward data reads w transposed to (C, R, S, K) from the workspace: TF32
    tensor-core instructions take only operands whose reduction dimension is contiguous."""
    return p.direction is Direction.BACKWARD_DATA and p.dtype is DataType.FLOAT32


def transposed_filter_bytes(p: ConvProblem) -> int:
    """Workspace of the transposed filter (none where the filter is read as it is)."""
    if not transposes_filter(p):
        return 0
    return _volume(p.w.lengths) * p.dtype.itemsize


def transposed_filter_strides(p: ConvProblem) -> dict[str, int]:
    """The kernels' w strides (WK, WC, WT, WR, WS) of the transposed filter, (C, T, R, S, K)."""
    k = p.w.lengths[0]
    (t, r, s), _ = spatial(p.w)
    return {"WK": 1, "WC": t * r * s * k, "WT": r * s * k, "WR": s * k, "WS": k}


def shared_estimate(p: ConvProblem, t: Tile) -> int:
    """Bytes of shared memory the pipeline stages hold (Triton's own layout adds little)."""
    return t.stages * (t.bm * t.bk + t.bk * t.bn) * p.dtype.itemsize


def _channels_first(desc: Any) -> bool:
    return desc.strides[1] != 1 and desc.lengths[1] != 1


def _pixel_rows_packed(desc: Any) -> bool:
    """Whether a tensor's pixels are one run in memory: (d, h, w) at (d * H + h) * W + w
    strides."""
    lengths, strides = desc.lengths[2:], desc.strides[2:]
    return all(strides[i] == lengths[i + 1] * strides[i + 1] for i in range(len(lengths) - 1))


def full_channel_blocks(p: ConvProblem) -> bool:
    """Whether every fitted tile's reduction slice (16, 32 or 64 channels, never wider than
    the next power of two of the channels) divides the reduction's channels, so that no
    channel load is masked. The image-row tiles need it: with masked channels and an output
    row a multiple of 32 pixels wide, the forward kernel wrote wrong values on an H100 (fp16,
    every configuration; 1 and 3 channels at widths 96-480, each right with row tiles across
    images; ``plugins/triton/tests/test_triton_gpu.py``). TF32 is left as it was: its image
    tiles passed the same checks, and its row tiles across images failed a 3-D channels-first
    case (1x6x6, dilation 2) that its image tiles pass."""
    if p.dtype is DataType.FLOAT32:
        return True
    depth = reduction_channels(p)
    return depth % 64 == 0 or (depth >= 16 and depth & (depth - 1) == 0)


def direct_pixels(p: ConvProblem) -> bool:
    """1x1, stride 1, no padding, with the GEMM's input channels-first and its pixels packed
    (NCHW): the kernel reads it in place, pixels consecutive along its row tile, as NCHW's own
    GEMM would. Not TF32: TF32 instructions need the reduction (channels) innermost (read in
    place anyway, ResNet-50's 1x1 layers ran 0.7x as fast as with the copy, H200)."""
    if p.direction is Direction.BACKWARD_WEIGHTS or p.dtype is DataType.FLOAT32:
        return False
    if max(p.w.lengths[2:]) != 1 or max(p.conv.strides) != 1 or max(p.conv.pads) != 0:
        return False
    if not full_channel_blocks(p):
        return False
    src = p.y if p.direction is Direction.BACKWARD_DATA else p.x
    return _channels_first(src) and _pixel_rows_packed(src)


def wrw_image_slices(p: ConvProblem) -> bool:
    """Backward weights with dy channels-first and its pixels packed (NCHW, NCDHW): the
    reduction's slices stay inside one image, so dy is read in place, its pixels consecutive
    along each slice, instead of being staged channels-last (a whole copy of dy: two thirds
    of the time of ResNet-50's NCHW 1x1 layers)."""
    if p.direction is not Direction.BACKWARD_WEIGHTS:
        return False
    return _channels_first(p.y) and _pixel_rows_packed(p.y)


def wrw_x_in_place(p: ConvProblem) -> bool:
    """TF32 :func:`wrw_image_slices` with a channels-first x read in place through its own
    strides, whatever the filter: TF32 instructions read both operands with the reduction
    innermost, and backward weights reduces over the pixels, which NCHW holds innermost and
    a channels-last copy outermost (fp16/bf16 instructions read either order, and keep the
    copy's vector loads along the channels)."""
    if p.dtype is not DataType.FLOAT32 or not wrw_image_slices(p):
        return False
    return _channels_first(p.x)


def wrw_channels_first(p: ConvProblem) -> tuple[str, ...]:
    """TF32 backward weights' inputs copied to packed channels-first order first: x where it
    is not channels-first, dy where :func:`wrw_image_slices` cannot read it in place. Both
    operands then run along the pixels, the reduction, as TF32 instructions read them
    (:func:`wrw_x_in_place`); read channels-last, Triton turns each tile on chip, and the
    same layers ran 2-5x slower (H200, 2026-11-28). A one-channel tensor is both orders."""
    if p.direction is not Direction.BACKWARD_WEIGHTS or p.dtype is not DataType.FLOAT32:
        return ()
    if p.x.lengths[1] == 1 or p.y.lengths[1] == 1:
        return ()
    names = [] if _channels_first(p.x) else ["x"]
    if not (_channels_first(p.y) and _pixel_rows_packed(p.y)):
        names.append("y")
    return tuple(names)


def channels_first_view(p: ConvProblem, names: tuple[str, ...]) -> ConvProblem:
    """``p`` as the kernels see it once the inputs ``names`` are copied to packed
    channels-first order (the same lengths); ``p`` itself when there are none."""
    if not names:
        return p
    layout = "NCDHW" if p.spatial_dims == 3 else "NCHW"
    packed = {n: TensorDescriptor(p.dtype, getattr(p, n).lengths, layout=layout) for n in names}
    return ConvProblem(
        p.direction, x=packed.get("x", p.x), w=p.w, y=packed.get("y", p.y), conv=p.conv
    )


def wrw_x_direct(p: ConvProblem) -> bool:
    """:func:`wrw_image_slices` with x read in place too: 1x1, stride 1, no padding, x
    channels-first with packed pixels (its pixels are then dy's, one for one)."""
    if not wrw_image_slices(p):
        return False
    if max(p.w.lengths[2:]) != 1 or max(p.conv.strides) != 1 or max(p.conv.pads) != 0:
        return False
    return _channels_first(p.x) and _pixel_rows_packed(p.x)


def image_tiles(p: ConvProblem) -> bool:
    """Row tiles that stay inside one image: for a channels-first output (its stores run
    along the pixels) and for :func:`direct_pixels`. Not for phased backward data."""
    if p.direction is Direction.BACKWARD_WEIGHTS or is_phased(p) or not full_channel_blocks(p):
        return False
    out = gemm_output(p)
    return _channels_first(out) or direct_pixels(p)


def row_fill(p: ConvProblem, bm: int) -> float:
    """Share of a forward or backward-data launch's tile rows that hold pixels: row tiles
    of ``bm`` over an image's pixels (:func:`image_tiles`, :func:`spreads`) or all rows."""
    if spreads(p):
        rows = _volume(p.y.lengths[2:])
    elif image_tiles(p):
        rows = _volume(gemm_output(p).lengths[2:])
    else:
        rows = gemm_rows(p)
    return rows / (-(-rows // bm) * bm)


def gemm_tiles(p: ConvProblem, bm: int, bn: int) -> int:
    """Programs of a forward or backward-data launch (per stride phase)."""
    if spreads(p):  # row tiles inside each image of dy
        return p.y.lengths[0] * -(-_volume(p.y.lengths[2:]) // bm) * -(-gemm_columns(p) // bn)
    if image_tiles(p):
        out = gemm_output(p)
        pixels = _volume(out.lengths[2:])
        return out.lengths[0] * -(-pixels // bm) * -(-gemm_columns(p) // bn)
    return -(-gemm_rows(p) // bm) * -(-gemm_columns(p) // bn)


#: Backward weights on fewer channels than this takes (tap, c) as its columns: a channel
#: tile is 16 wide at least, so a stem's 3 channels would fill 3/16 of each product.
TAP_COLUMN_CHANNELS = 16
#: The narrowest side of a GEMM tile and of a reduction slice (``tl.dot``'s 16): fewer channels
#: there fill that fraction of every product.
MIN_TILE_CHANNELS = 16


def wrw_tap_columns(p: ConvProblem) -> bool:
    """Backward weights whose columns are the (tap, channel) pairs together (an im2col
    gathered in the kernel): fewer than :data:`TAP_COLUMN_CHANNELS` channels, several taps."""
    if p.direction is not Direction.BACKWARD_WEIGHTS:
        return False
    return p.w.lengths[1] < TAP_COLUMN_CHANNELS and _volume(p.w.lengths[2:]) > 1


def wrw_columns(p: ConvProblem) -> int:
    """Columns of one backward-weights GEMM: c, or taps x c (:func:`wrw_tap_columns`)."""
    c = p.w.lengths[1]
    return _volume(p.w.lengths[2:]) * c if wrw_tap_columns(p) else c


def wrw_tiles(p: ConvProblem, bm: int, bn: int) -> int:
    """Programs per split of a backward-weights launch: k tiles x taps x c tiles (k tiles x
    (tap, c) tiles with :func:`wrw_tap_columns`)."""
    k, c = p.w.lengths[:2]
    if wrw_tap_columns(p):
        return -(-k // bm) * -(-wrw_columns(p) // bn)
    return -(-k // bm) * _volume(p.w.lengths[2:]) * -(-c // bn)


def config(t: Tile, split: int = 1) -> PerfConfig:
    """The PerfConfig of a tile and split."""
    return PerfConfig(bm=t.bm, bn=t.bn, bk=t.bk, warps=t.warps, stages=t.stages, split=split)


def tile_of(cfg: PerfConfig) -> Tile:
    """The tile of a PerfConfig."""
    return Tile(cfg["bm"], cfg["bn"], cfg["bk"], cfg["warps"], cfg["stages"])
