"""Planning a GEMM convolution from sizes and strides alone: orientation, tiles, workspace.

Everything here is plain integer arithmetic on the problem's descriptors, so ``is_applicable``
and ``workspace_size`` stay cheap; the invoker follows the same plan and carves exactly the
planned buffers out of the caller's workspace.

Index names used throughout: ``G`` groups, ``Cg``/``Kg`` input/output channels per group,
``F`` filter taps, ``R = Cg * F`` the GEMM reduction of forward, ``B`` images per tile, ``P``
output pixels per image in a tile.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from miocore import (
    ConvProblem,
    DataType,
    Direction,
    InvalidArgumentError,
    PerfConfig,
    TensorDescriptor,
)

#: Bytes of one float32 element: every GEMM operand and staging buffer is float32.
F32 = 4

#: Default bound on the bytes one tile's per-pixel buffers (column matrix, float32 staging of
#: y, float32 accumulator of dx) may take. 32 MiB keeps a ResNet-50 layer at batch 8 in one or
#: two tiles while the whole working set still fits in a large last-level cache share.
DEFAULT_TILE_BYTES = 32 * 2**20

#: Channels-last problems with fewer channels per group than this store the column matrix
#: pixel-major: im2col then copies runs of output pixels instead of runs of Cg channels
#: (the NHWC ResNet stem, C=3: im2col 16 ms -> 4 ms for one image).
PIXEL_MAJOR_BELOW = 16

#: Perf-config key: output lines (rows of the innermost output dimension) per tile.
TILE_LINES = "tile_lines"

_CHANNELS_LAST = frozenset({"NHWC", "NDHWC"})


def merged_stride(dims: Sequence[tuple[int, int]]) -> int | None:
    """Stride of ``(size, stride)`` dims (outer to inner) merged into one, or None.

    Dims of size 1 never prevent a merge. With no dim larger than 1 the merged dim has size 1
    and any stride works: 1 is returned.
    """
    merged = None  # (size, stride) of the innermost dim seen so far, walking inwards
    for size, stride in dims:
        if size == 1:
            continue
        if merged is not None and merged[1] != size * stride:
            return None
        merged = (size, stride)
    return 1 if merged is None else merged[1]


class Tiling(NamedTuple):
    """How the output is cut into tiles.

    ``images`` images per tile when ``split`` is None (whole images); otherwise one image per
    tile, spatial dims before ``split`` taken one index at a time, ``extent`` indices of output
    dim ``split`` per tile and the dims after it whole.
    """

    images: int
    split: int | None
    extent: int
    lines: int


class GemmPlan(NamedTuple):
    """The complete recipe for one problem and tile size (see the module docstring).

    A named tuple: planning runs for every corpus problem in the coverage test, and tuples
    are several times cheaper to build than frozen dataclasses.
    """

    direction: Direction
    dtype: DataType
    channels_last: bool  # GEMM rows are pixels (B*P x channels) instead of per-image channels
    filter_major: bool  # reduction index ordered (taps, Cg) as NHWC weights store it
    direct_col: bool  # 1x1/stride 1/pad 0: x (dx in backward data) is the column matrix itself
    w_direct: bool  # w is used (or written) in place as the (G, Kg, R) float32 matrix
    y_direct: bool  # y is used (or written) in place as the GEMM operand
    accumulate_dx: bool  # backward data with several taps: dx is summed tap by tap
    dx_staged: bool  # ... into a float32 buffer (fp16/bf16 dx)
    wrw_transposed: bool  # backward weights computes dW^T = col @ dy^T (see _engine)
    col_pixel_major: bool  # channels-last column matrix stored (G, R, B*P): few channels
    n: int
    c: int
    k: int
    groups: int
    filter_spatial: tuple[int, ...]
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    tiling: Tiling
    num_tiles: int
    buffers: tuple[tuple[str, int], ...]  # (name, bytes), carved from the workspace in order

    @property
    def workspace(self) -> int:
        """Total bytes of workspace the invoker carves (the sum of the buffers)."""
        return sum(size for _, size in self.buffers)

    @property
    def taps(self) -> int:
        """Filter taps ``F``."""
        return math.prod(self.filter_spatial)

    @property
    def tile_pixels(self) -> int:
        """Output pixels per image in a full tile (``P``)."""
        return (self.tiling.lines // self.tiling.images) * self.out_spatial[-1]

    def image_groups(self) -> Iterator[tuple[int, int, list[tuple[tuple[int, int], ...]]]]:
        """``(b0, b1, boxes)``: image ranges, each with the output boxes of its tiles.

        A box is one ``(start, stop)`` per output spatial dim.
        """
        t, out = self.tiling, self.out_spatial
        full = tuple((0, o) for o in out)
        if t.split is None:
            for b0 in range(0, self.n, t.images):
                yield b0, min(self.n, b0 + t.images), [full]
            return
        j = t.split
        boxes = []
        for outer in _index_product(out[:j]):
            for s0 in range(0, out[j], t.extent):
                head = tuple((i, i + 1) for i in outer)
                boxes.append((*head, (s0, min(out[j], s0 + t.extent)), *full[j + 1 :]))
        for b in range(self.n):
            yield b, b + 1, boxes


def _index_product(sizes: Sequence[int]) -> Iterator[tuple[int, ...]]:
    if not sizes:
        yield ()
        return
    for i in range(sizes[0]):
        for rest in _index_product(sizes[1:]):
            yield (i, *rest)


def _tiling(n: int, out: tuple[int, ...], per_image: int, lines: int) -> Tiling:
    """The legal tiling closest below ``lines`` output lines per tile (at least one line)."""
    if lines >= per_image:
        images = min(n, lines // per_image)
        return Tiling(images=images, split=None, extent=out[0], lines=images * per_image)
    for j in range(len(out) - 1):
        unit = math.prod(out[j + 1 : -1])
        if lines >= unit:
            extent = min(out[j], lines // unit)
            return Tiling(images=1, split=j, extent=extent, lines=extent * unit)
    raise AssertionError("unreachable: the innermost split dim has unit 1")


def make_plan(
    problem: ConvProblem,
    *,
    allow_direct: bool,
    perf_config: PerfConfig | None = None,
    tile_bytes: int = DEFAULT_TILE_BYTES,
) -> GemmPlan:
    """Plan ``problem`` (canonical). ``allow_direct`` enables the no-im2col 1x1 path.

    Written with plain locals: the coverage test plans every corpus problem in every
    direction, so this must stay in the ten-microsecond range.
    """
    x, w, y, conv = problem.x, problem.w, problem.y, problem.conv
    d = problem.direction
    dtype = x.dtype
    fp32 = dtype is DataType.FLOAT32
    g = conv.groups
    n, c = x.lengths[0], x.lengths[1]
    k = y.lengths[1]
    cg = c // g
    in_sp, out_sp, filt = x.lengths[2:], y.lengths[2:], w.lengths[2:]
    taps = math.prod(filt)
    cl = x.layout in _CHANNELS_LAST
    filter_major = w.layout in _CHANNELS_LAST
    wrw = d is Direction.BACKWARD_WEIGHTS

    w_direct = False
    if fp32:  # w as a (G, Kg, R) matrix with unit stride along R, in the chosen order
        w_r = [(cg, w.strides[1]), *zip(filt, w.strides[2:], strict=True)]
        if filter_major:
            w_r.append(w_r.pop(0))
        w_direct = merged_stride(w_r) == 1
    y_direct = fp32 and _act_direct(y, cl, wrw)
    pointwise = taps == 1 and not any(conv.pads)
    direct_col = (
        allow_direct
        and pointwise
        and fp32
        and all(s == 1 for s in conv.strides)
        and _act_direct(x, cl, wrw)
    )
    accumulate_dx = d is Direction.BACKWARD_DATA and not direct_col and taps > 1
    dx_staged = accumulate_dx and not fp32

    wo = out_sp[-1]
    per_image = math.prod(out_sp[:-1])
    in_pixels = math.prod(in_sp)
    line_bytes = F32 * wo * ((0 if direct_col else c * taps) + (0 if y_direct else k))
    acc_image = F32 * c * in_pixels if dx_staged else 0
    if perf_config is not None and TILE_LINES in perf_config:
        lines = perf_config[TILE_LINES]
        if isinstance(lines, bool) or not isinstance(lines, int) or lines < 1:
            raise InvalidArgumentError(
                "must be an integer >= 1", field=f"perf_config.{TILE_LINES}", value=lines
            )
    elif line_bytes + acc_image == 0:
        lines = n * per_image
    else:
        image_bytes = line_bytes * per_image + acc_image
        if image_bytes <= tile_bytes:
            lines = (tile_bytes // image_bytes) * per_image
        else:
            lines = max(1, (tile_bytes - acc_image) // line_bytes)
    tiling = _tiling(n, out_sp, per_image, lines)
    if tiling.split is None:
        num_tiles = -(-n // tiling.images)
    else:
        j = tiling.split
        num_tiles = n * math.prod(out_sp[:j]) * -(-out_sp[j] // tiling.extent)
    pixels = tiling.lines * wo  # B * P of a full tile

    w_bytes = F32 * k * cg * taps
    buffers: list[tuple[str, int]] = []
    if not w_direct:
        buffers.append(("w", w_bytes))
    if not direct_col:
        buffers.append(("col", F32 * pixels * c * taps))
    if not y_direct:
        buffers.append(("y", F32 * pixels * k))
    if dx_staged:
        buffers.append(("dx", F32 * tiling.images * c * in_pixels))
    # OpenBLAS runs a long reduction far faster as dW^T = col @ dy^T (M = R) than as
    # dy @ col^T (M = Kg); with a short one the transposed add into dw costs more than it saves.
    wrw_transposed = wrw and pixels >= cg * taps
    if wrw_transposed or (wrw and num_tiles > 1):  # dW^T, or a tile's partial dW
        buffers.append(("dwt", w_bytes))
    return GemmPlan(
        direction=d,
        dtype=dtype,
        channels_last=cl,
        filter_major=filter_major,
        direct_col=direct_col,
        w_direct=w_direct,
        y_direct=y_direct,
        accumulate_dx=accumulate_dx,
        dx_staged=dx_staged,
        wrw_transposed=wrw_transposed,
        col_pixel_major=cl and cg < PIXEL_MAJOR_BELOW,
        n=n,
        c=c,
        k=k,
        groups=g,
        filter_spatial=filt,
        in_spatial=in_sp,
        out_spatial=out_sp,
        pads=conv.pads,
        strides=conv.strides,
        dilations=conv.dilations,
        tiling=tiling,
        num_tiles=num_tiles,
        buffers=tuple(buffers),
    )


def _act_direct(desc: TensorDescriptor, channels_last: bool, wrw: bool) -> bool:
    """Whether a float32 activation tensor can be a GEMM operand in place."""
    lengths, strides = desc.lengths, desc.strides
    spatial = list(zip(lengths[2:], strides[2:], strict=True))
    if channels_last:  # (B*P, G, Cg): channel stride 1, batch and pixels fold into one index
        return strides[1] == 1 and merged_stride([(lengths[0], strides[0]), *spatial]) is not None
    # (B, G, Cg, P): pixels fold with unit stride; backward weights also folds the batch
    if wrw and lengths[0] > 1:
        return False
    return merged_stride(spatial) == 1
