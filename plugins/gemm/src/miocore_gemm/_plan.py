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
from dataclasses import dataclass
from itertools import pairwise

from miocore import ConvProblem, DataType, Direction, InvalidArgumentError, PerfConfig

#: Bytes of one float32 element: every GEMM operand and staging buffer is float32.
F32 = 4

#: Default bound on the bytes one tile's per-pixel buffers (column matrix, float32 staging of
#: y, float32 accumulator of dx) may take. 32 MiB keeps a ResNet-50 layer at batch 8 in one or
#: two tiles while the whole working set still fits in a large last-level cache share.
DEFAULT_TILE_BYTES = 32 * 2**20

#: Perf-config key: output lines (rows of the innermost output dimension) per tile.
TILE_LINES = "tile_lines"

_CHANNELS_LAST = frozenset({"NHWC", "NDHWC"})


def merged_stride(dims: Sequence[tuple[int, int]]) -> int | None:
    """Stride of ``(size, stride)`` dims (outer to inner) merged into one, or None.

    Dims of size 1 never prevent a merge. With no dim larger than 1 the merged dim has size 1
    and any stride works: 1 is returned.
    """
    sized = [(n, s) for n, s in dims if n != 1]
    if not sized:
        return 1
    for (_, s_out), (n_in, s_in) in pairwise(sized):
        if s_out != n_in * s_in:
            return None
    return sized[-1][1]


@dataclass(frozen=True)
class Tiling:
    """How the output is cut into tiles.

    ``images`` images per tile when ``split`` is None (whole images); otherwise one image per
    tile, spatial dims before ``split`` taken one index at a time, ``extent`` indices of output
    dim ``split`` per tile and the dims after it whole.
    """

    images: int
    split: int | None
    extent: int
    lines: int


@dataclass(frozen=True)
class GemmPlan:
    """The complete recipe for one problem and tile size (see the module docstring)."""

    direction: Direction
    dtype: DataType
    channels_last: bool  # GEMM rows are pixels (B*P x channels) instead of per-image channels
    filter_major: bool  # reduction index ordered (taps, Cg) as NHWC weights store it
    direct_col: bool  # 1x1/stride 1/pad 0: x (dx in backward data) is the column matrix itself
    w_direct: bool  # w is used (or written) in place as the (G, Kg, R) float32 matrix
    y_direct: bool  # y is used (or written) in place as the GEMM operand
    accumulate_dx: bool  # backward data with several taps: dx is summed tap by tap
    dx_staged: bool  # ... into a float32 buffer (fp16/bf16 dx)
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


def is_pointwise(problem: ConvProblem) -> bool:
    """1x1 filter and no padding: no im2col beyond (at most) a strided subsample."""
    return all(f == 1 for f in problem.filter_spatial) and not any(problem.conv.pads)


def normalize_tiling(problem: ConvProblem, lines: int) -> Tiling:
    """The legal tiling closest below ``lines`` output lines per tile (at least one line)."""
    out = problem.out_spatial
    per_image = math.prod(out[:-1])
    lines = max(1, int(lines))
    if lines >= per_image:
        images = min(problem.n, lines // per_image)
        return Tiling(images=images, split=None, extent=out[0], lines=images * per_image)
    for j in range(len(out) - 1):
        unit = math.prod(out[j + 1 : -1])
        if lines >= unit:
            extent = min(out[j], lines // unit)
            return Tiling(images=1, split=j, extent=extent, lines=extent * unit)
    raise AssertionError("unreachable: the innermost split dim has unit 1")


def _tile_count(problem: ConvProblem, t: Tiling) -> int:
    out = problem.out_spatial
    if t.split is None:
        return -(-problem.n // t.images)
    return problem.n * math.prod(out[: t.split]) * -(-out[t.split] // t.extent)


def make_plan(
    problem: ConvProblem,
    *,
    allow_direct: bool,
    perf_config: PerfConfig | None = None,
    tile_bytes: int = DEFAULT_TILE_BYTES,
) -> GemmPlan:
    """Plan ``problem`` (canonical). ``allow_direct`` enables the no-im2col 1x1 path."""
    p = problem
    d = p.direction
    fp32 = p.dtype is DataType.FLOAT32
    g, c, k = p.groups, p.c, p.k
    cg, kg = c // g, k // g
    taps = math.prod(p.filter_spatial)
    x_sp, y_sp = p.x.strides[2:], p.y.strides[2:]
    cl = p.x.layout in _CHANNELS_LAST
    filter_major = p.w.layout in _CHANNELS_LAST

    # w as a (G, Kg, R) float32 matrix with unit stride along R (in the chosen order).
    w_r = [(cg, p.w.strides[1])] + list(zip(p.filter_spatial, p.w.strides[2:], strict=True))
    if filter_major:
        w_r = w_r[1:] + w_r[:1]
    w_direct = fp32 and merged_stride(w_r) == 1

    # A tensor is usable in place when float32 and its dims fold into the GEMM operand.
    def act_direct(lengths: tuple[int, ...], strides: tuple[int, ...], spatial: list) -> bool:
        if not fp32:
            return False
        if cl:  # (B*P, G, Cg): channel stride 1, batch and pixels fold into one row index
            return (
                strides[1] == 1 and merged_stride([(lengths[0], strides[0]), *spatial]) is not None
            )
        # (B, G, Cg, P): pixels fold with unit stride; backward weights also folds the batch
        if d is Direction.BACKWARD_WEIGHTS and lengths[0] > 1:
            return False
        return merged_stride(spatial) == 1

    y_direct = act_direct(p.y.lengths, p.y.strides, list(zip(p.out_spatial, y_sp, strict=True)))
    direct_col = (
        allow_direct
        and is_pointwise(p)
        and all(s == 1 for s in p.conv.strides)
        and act_direct(p.x.lengths, p.x.strides, list(zip(p.in_spatial, x_sp, strict=True)))
    )
    accumulate_dx = d is Direction.BACKWARD_DATA and not direct_col and taps > 1
    dx_staged = accumulate_dx and not fp32

    wo = p.out_spatial[-1]
    line_bytes = F32 * wo * ((0 if direct_col else c * taps) + (0 if y_direct else k))
    acc_image = F32 * c * math.prod(p.in_spatial) if dx_staged else 0
    per_image = math.prod(p.out_spatial[:-1])
    if perf_config is not None and TILE_LINES in perf_config:
        lines = perf_config[TILE_LINES]
        if isinstance(lines, bool) or not isinstance(lines, int) or lines < 1:
            raise InvalidArgumentError(
                "must be an integer >= 1", field=f"perf_config.{TILE_LINES}", value=lines
            )
    elif line_bytes + acc_image == 0:
        lines = p.n * per_image
    else:
        image_bytes = line_bytes * per_image + acc_image
        if image_bytes <= tile_bytes:
            lines = (tile_bytes // image_bytes) * per_image
        else:
            lines = max(1, (tile_bytes - acc_image) // max(line_bytes, 1))
    tiling = normalize_tiling(p, lines)
    num_tiles = _tile_count(p, tiling)
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
        buffers.append(("dx", F32 * tiling.images * c * math.prod(p.in_spatial)))
    if d is Direction.BACKWARD_WEIGHTS and num_tiles > 1:
        buffers.append(("partial", w_bytes))
    return GemmPlan(
        direction=d,
        dtype=p.dtype,
        channels_last=cl,
        filter_major=filter_major,
        direct_col=direct_col,
        w_direct=w_direct,
        y_direct=y_direct,
        accumulate_dx=accumulate_dx,
        dx_staged=dx_staged,
        n=p.n,
        c=c,
        k=k,
        groups=g,
        filter_spatial=tuple(p.filter_spatial),
        in_spatial=tuple(p.in_spatial),
        out_spatial=tuple(p.out_spatial),
        pads=tuple(p.conv.pads),
        strides=tuple(p.conv.strides),
        dilations=tuple(p.conv.dilations),
        tiling=tiling,
        num_tiles=num_tiles,
        buffers=tuple(buffers),
    )
