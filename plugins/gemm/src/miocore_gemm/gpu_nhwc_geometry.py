"""Problem geometry of ``gemm.gpu_nhwc`` (:mod:`miocore_gemm.gpu_nhwc`): which path a
channels-last problem takes and how big its pieces are.

The path predicates (1x1 rows that are x itself, strided 1x1 blocks in place, stride-1
backward data as the flipped forward twin), the row block width (padded to 16 bytes in half
types) and the padded-row kernel's tile and shared memory, the row buffer, the chunks of
images, the copy unit of the row kernels, the workspace regions (rows, the GEMM's copy of the
filter, the float32 dW accumulator), thread blocks, and the ``MioClParams`` struct the row
kernels read (``kernels/im2col_cl.cu``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from miocore import ConvProblem, DataType, Direction

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    pass

#: Largest row buffer a chunk of images may use (bytes); one image may exceed it.
WORKSPACE_BUDGET = 256 << 20
#: Shared memory the padded-row kernel aims to stay within (bytes), and its hard limit.
PATCH_BUDGET = 32 << 10
PATCH_LIMIT = 48 << 10
#: Largest filter, as a share of the rows, for which stride-1 backward data runs as the
#: flipped forward convolution (see :func:`is_flipped_backward`).
FLIP_MAX_FILTER_SHARE = 1 / 16
#: Narrowest output row for which 1x1 strided forward and backward data run as
#: strided-batched GEMM blocks in place (see :func:`is_strided_pointwise`).
STRIDED_MIN_WIDTH = 28
#: Threads per block of the row kernels.
BLOCK = 256


def dims(p: ConvProblem) -> tuple[int, int, int, int, int]:
    """(groups, Cg, Kg, filter taps F, output positions O)."""
    g = p.groups
    return g, p.c // g, p.k // g, math.prod(p.filter_spatial), math.prod(p.out_spatial)


def is_pointwise(p: ConvProblem) -> bool:
    """1x1 filter, stride 1, no padding: the rows are x itself."""
    return (
        all(s == 1 for s in p.filter_spatial)
        and all(s == 1 for s in p.conv.strides)
        and not any(p.conv.pads)
    )


def is_strided_pointwise(p: ConvProblem) -> bool:
    """A 2-D 1x1 filter with stride > 1, no padding, one group, and the input exactly stride
    times the output (ResNet's downsampling layers). Forward and backward data then need no
    rows: output rows ``(n, oh)`` sit at a constant distance in x, so one strided-batched BLAS
    call over ``N * Ho`` blocks of ``Wo`` rows reads x (writes dx) in place, with a leading
    dimension of ``stride * C``.

    The blocks are small GEMMs of ``Wo`` rows, so they only pay from
    :data:`STRIDED_MIN_WIDTH` on; narrower layers take one dense GEMM and the row kernel. On
    an H200 (ResNet-50, batch 32), blocks against rows: forward fp16 0.025 / 0.035 / 0.073
    ms against 0.040 / 0.027 / 0.022 at Wo 28 / 14 / 7; backward data fp16 0.039 / 0.042 /
    0.081 against 0.067 / 0.042 / 0.029, fp32 0.24 / 0.41 / 0.92 against 0.25 / 0.21 /
    0.19 (the run-of-channels col2im)."""
    return (
        p.spatial_dims == 2
        and p.groups == 1
        and p.direction is not Direction.BACKWARD_WEIGHTS
        and p.out_spatial[-1] >= STRIDED_MIN_WIDTH
        and all(s == 1 for s in p.filter_spatial)
        and not any(p.conv.pads)
        and any(s > 1 for s in p.conv.strides)
        and all(
            i == s * o for i, s, o in zip(p.in_spatial, p.conv.strides, p.out_spatial, strict=True)
        )
    )


def is_flipped_backward(p: ConvProblem) -> bool:
    """Backward data with stride 1 that is not a plain 1x1 (whose rows are dY itself), whose
    forward twin has no negative padding, and whose filter is small beside the rows: dx is
    then the forward convolution of dY with the flipped filter, see :func:`forward_twin`.

    Flipping transposes the filter per group (scattered reads), so it only pays where the
    filter is at most :data:`FLIP_MAX_FILTER_SHARE` of the rows it saves a round trip of: on
    an H200 (ResNet-50, batch 32, fp16) l2.3x3 0.046 ms flipped against 0.061 through
    col2im (filter 1/200 of the rows), l3.3x3 0.036 against 0.034 (1/24), l4.3x3 0.042
    against 0.024 (1/3)."""
    rows = p.n * math.prod(p.in_spatial) * math.prod(p.filter_spatial) * p.k
    return (
        p.direction is Direction.BACKWARD_DATA
        and all(s == 1 for s in p.conv.strides)
        and not is_pointwise(p)
        and p.w.element_count <= rows * FLIP_MAX_FILTER_SHARE
        and all(
            pad <= d * (f - 1)
            for pad, d, f in zip(p.conv.pads, p.conv.dilations, p.filter_spatial, strict=True)
        )
    )


def forward_twin(p: ConvProblem) -> ConvProblem:
    """The problem whose forward run computes this one: for a stride-1 backward data, dY
    (K channels) convolved into dx (C channels) with w flipped in every spatial axis and
    transposed per group, padding ``dilation * (F - 1) - pad``; other problems are their
    own twin."""
    if not is_flipped_backward(p):
        return p
    pads = tuple(
        d * (f - 1) - pad
        for pad, d, f in zip(p.conv.pads, p.conv.dilations, p.filter_spatial, strict=True)
    )
    return ConvProblem.from_sizes(
        "forward", n=p.n, c=p.k, k=p.c, in_spatial=p.out_spatial,
        filter_spatial=p.filter_spatial, pads=pads, dilations=p.conv.dilations,
        groups=p.groups, dtype=p.dtype, layout=p.x.layout,
    )  # fmt: skip


def patch_bytes(p: ConvProblem, tile: int) -> int:
    """Shared memory of im2col_cl_tiles for ``tile`` output pixels: the offset table (one
    int per element of a group's block, 16-byte aligned), then every tap row of the input
    patch they read, all channels."""
    *outer, fx = _three(p.filter_spatial, 1)
    stride, dil = p.conv.strides[-1], p.conv.dilations[-1]
    width = (tile - 1) * stride + dil * (fx - 1) + 1
    _, cg, _, f, _ = dims(p)
    per_chunk = 16 // p.dtype.itemsize
    table = -(-f * cg // per_chunk) * per_chunk * 4
    return -(-table // 16) * 16 + math.prod(outer) * width * p.c * p.dtype.itemsize


def tile_width(p: ConvProblem) -> int:
    """Output pixels per block of the padded-row kernel: up to 64 while the patch stays
    within :data:`PATCH_BUDGET`; 0 where not even one pixel's patch fits."""
    tile = 64
    while tile > 1 and patch_bytes(p, tile) > PATCH_BUDGET:
        tile //= 2
    return tile if patch_bytes(p, tile) <= PATCH_LIMIT else 0


def group_width(p: ConvProblem) -> int:
    """Elements of one group's block in a row: ``taps * Cg``, rounded up to 16 bytes in half
    types where it is not a whole number of them (where rows are built at all, and the
    padded-row kernel's patch fits in shared memory)."""
    _, cg, _, f, _ = dims(p)
    width = f * cg
    per_chunk = 16 // p.dtype.itemsize
    if (
        p.dtype is DataType.FLOAT32
        or width % per_chunk == 0
        or is_pointwise(p)
        or is_strided_pointwise(p)
        or not tile_width(p)
    ):
        return width
    return -(-width // per_chunk) * per_chunk


def is_padded(p: ConvProblem) -> bool:
    """Whether the rows, w and dW go through zero-padded blocks (see :func:`group_width`)."""
    _, cg, _, f, _ = dims(p)
    return group_width(p) != f * cg


def row_bytes(p: ConvProblem) -> int:
    """Bytes of one image's rows (0 when no row buffer is needed)."""
    if is_pointwise(p) or is_strided_pointwise(p):
        return 0
    g, _, _, _, o = dims(p)
    return o * g * group_width(p) * p.dtype.itemsize


def images_per_chunk(p: ConvProblem) -> int:
    """As many images as keep the row buffer within the budget, at least one."""
    per_image = row_bytes(p)
    if per_image == 0:
        return p.n
    return max(1, min(p.n, WORKSPACE_BUDGET // per_image))


def copy_unit(p: ConvProblem) -> int:
    """Bytes im2col_cl moves at once: the largest of 16/8/4/2 that divides the group's channel
    run and every x stride (in bytes), and at least the element size."""
    size = p.dtype.itemsize
    _, cg, *_ = dims(p)
    strides = [p.x.strides[0], *p.x.strides[2:]]
    for unit in (16, 8, 4, 2):
        if (
            unit >= size
            and (cg * size) % unit == 0
            and all((s * size) % unit == 0 for s in strides)
        ):
            return unit
    return size


def _aligned(nbytes: int) -> int:
    # Workspace regions start on 256 bytes, as the BLAS likes its operands.
    return -(-nbytes // 256) * 256


def rows_buffer_bytes(p: ConvProblem) -> int:
    return _aligned(images_per_chunk(p) * row_bytes(p))


def weights_bytes(p: ConvProblem) -> int:
    """The GEMM's own copy of the filter: the padded w (forward, backward data), the padded
    dW (backward weights, when it is not accumulated in float32), or the flipped w of a
    stride-1 backward data (for ``p`` its :func:`forward_twin`): K rows of the group width."""
    if not (is_padded(p) or is_flipped_backward(p)) or needs_accumulator(p):
        return 0
    twin = forward_twin(p)
    return _aligned(twin.k * group_width(twin) * p.dtype.itemsize)


def needs_accumulator(p: ConvProblem) -> bool:
    """Half-type backward weights over several chunks sums them in a float32 dW; with one
    chunk the BLAS rounds its fp32 result straight into dw."""
    return (
        p.direction is Direction.BACKWARD_WEIGHTS
        and p.dtype is not DataType.FLOAT32
        and images_per_chunk(p) < p.n
    )


def accumulator_bytes(p: ConvProblem) -> int:
    return p.k * group_width(p) * 4 if needs_accumulator(p) else 0


def block_count(items: int) -> int:
    return max(1, -(-items // BLOCK))


def _three(values: tuple[int, ...], fill: int) -> list[int]:
    return [fill] * (3 - len(values)) + list(values)


def pack_params(p: ConvProblem, n0: int, nb: int) -> bytes:
    """``MioClParams`` (kernels/im2col_cl.cu) by value, every field an int64."""
    import numpy as np

    xs = list(p.x.strides)
    # Logical order (N, C, [D,] H, W): N, then the spatial strides; 2-D gets D stride 0.
    spatial = xs[2:] if p.spatial_dims == 3 else [0, *xs[2:]]
    g, cg, *_ = dims(p)
    fields = [
        *_three(p.in_spatial, 1),
        *_three(p.out_spatial, 1),
        *_three(p.filter_spatial, 1),
        *_three(p.conv.pads, 0),
        *_three(p.conv.strides, 1),
        *_three(p.conv.dilations, 1),
        xs[0],
        *spatial,
        p.c,
        g,
        cg,
        n0,
        nb,
        group_width(p),
        tile_width(p),
    ]
    return np.array(fields, dtype=np.int64).tobytes()
