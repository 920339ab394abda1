"""Index algebra and resource limits of ``direct.gpu_depthwise``'s kernels.

What the solver's configs and solutions share: the canonical problem's sizes as (d, h, w)
tuples, which tensor each direction reads and writes, channel-vector widths, the tiles each
kernel stages and whether they fit in shared memory, and the kernel parameters' byte layout.
See ``kernels/depthwise.cu`` for the kernels themselves.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from miocore import ConvProblem, Direction, KernelInfo, PerfConfig
from miocore.backends.gpu_kernels import channels_last

KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "direct/depthwise.cu"
#: ``dw_nchw_rows``: NCHW rows from registers (its own program; shares depthwise_common.h).
ROWS_SOURCE = "direct/depthwise_rows.cu"
#: Scalar fields of ``MioDwParams`` after its three tensors, in struct order.
PARAM_FIELDS = ("pad_d", "pad_h", "pad_w", "groups_w", "items", "tiles_w", "tiles", "split")
#: Static shared memory a block may use without an opt-in (both vendors).
SHARED_LIMIT = 48 * 1024
#: Filter values one ``dw_nhwc`` thread keeps in registers at most (else it reads them from L1).
MAX_WREG = 128
#: Accumulators (taps x vec) of one backward-weights thread at most.
MAX_WRW_ACC = 72
#: Taps of a filter whose ``dw_wrw_tile`` may keep every tap in one thread (row groups).
MAX_TILE_GROUP_TAPS = 25
#: ``dw_nchw``'s planes per block beyond one, for tiles that cover a whole written plane: a
#: 14x14 plane alone gives a block of 256 threads one 2-byte load each, too little in flight
#: to keep the memory busy (MobileNetV2's 14x14 fp16 layers ran at 0.3 of cuDNN that way).
NCHW_PLANES = (2, 4, 8, 16)
#: ``dw_nhwc``'s optional ``mb`` key: blocks of 256 threads per SM its registers are capped for
#: (3: 85 registers a thread, 4: 64), against the 25% occupancy of an uncapped 16-bit 3x3 tile.
NHWC_MIN_BLOCKS = (3, 4)
#: Bytes per load when ``dw_nchw`` stages its tiles' rows (8: four 16-bit or two fp32 elements
#: a load; 0: element by element): a 2-byte load per staged element spent more issue slots on
#: index arithmetic than the memory needed (fp16 3x3 on 112x112 planes: 0.47 of cuDNN).
NCHW_CHUNK_BYTES = 8
#: ``dw_nchw_rows``: outputs per thread along a row, and rows per thread.
ROWS_OX = (8, 4)
ROWS_OY = (1, 2, 4)
#: ``dw_nchw_rows``: threads per block (a grid-stride loop over the runs).
ROWS_THREADS = 128
#: ``dw_nchw_rows`` holds a row's input window and the filter in registers: at most this many
#: window columns and taps (7x7 at stride 2 in runs of 8 is 21 and 49).
ROWS_MAX_WINDOW = 48
ROWS_MAX_TAPS = 49
#: ``dw_nchw_rows``' default keeps at least this many runs in all (256 blocks).
ROWS_MIN_RUNS = 256 * 128
#: Accumulators of one ``dw_nchw`` thread at most (rows per thread x planes per block).
MAX_NCHW_OUTPUTS = 16
GRID_YZ_LIMIT = 65535
INT32_MAX = 2**31 - 1


def pack_params(values: dict[str, int]) -> bytes:
    """The scalar tail of ``MioDwParams``: every field an int64, in :data:`PARAM_FIELDS` order."""
    import numpy as np

    if set(values) != set(PARAM_FIELDS):
        raise ValueError(f"parameter fields differ: {sorted(set(values) ^ set(PARAM_FIELDS))}")
    return np.array([values[f] for f in PARAM_FIELDS], dtype=np.int64).tobytes()


def dims3(values: tuple[int, ...]) -> tuple[int, int, int]:
    """(d, h, w) of a 2-D or 3-D spatial tuple (d = 1 / 0 for 2-D)."""
    return tuple(values) if len(values) == 3 else (1, *values)  # type: ignore[return-value]


def problem_sizes(p: ConvProblem) -> dict[str, Any]:
    """Sizes of the canonical problem, spatial tuples as (d, h, w)."""
    pads = p.conv.pads if p.spatial_dims == 3 else (0, *p.conv.pads)
    return {
        "c": p.x.lengths[1],
        "k": p.y.lengths[1],
        "mult": p.y.lengths[1] // max(1, p.x.lengths[1]),
        "f": dims3(tuple(p.w.lengths[2:])),
        "s": dims3(p.conv.strides),
        "d": dims3(p.conv.dilations),
        "pad": tuple(pads),
        "in": dims3(tuple(p.x.lengths[2:])),
        "out": dims3(tuple(p.y.lengths[2:])),
    }


def role(p: ConvProblem) -> tuple[Any, Any, int, int, bool, bool]:
    """(read tensor a, tensor b, R, M, flip, gather) of the direction (see the kernel header)."""
    s = problem_sizes(p)
    if p.direction is Direction.FORWARD:
        return p.x, p.y, 1, s["mult"], False, False
    if p.direction is Direction.BACKWARD_DATA:
        gather = any(v > 1 for v in s["s"])
        return p.y, p.x, s["mult"], 1, not gather, gather
    return p.x, p.y, 1, s["mult"], False, False


def kernel_pads(p: ConvProblem) -> tuple[int, int, int]:
    """Padding the kernel applies: backward data at stride 1 pads by (F-1)*d - p."""
    s = problem_sizes(p)
    _, _, _, _, flip, _ = role(p)
    if flip:
        return tuple((f - 1) * d - q for f, d, q in zip(s["f"], s["d"], s["pad"], strict=True))
    return s["pad"]


def kernel_kind(p: ConvProblem) -> str:
    """``"wrw"``, ``"nhwc"`` (channels innermost) or ``"nchw"``: which kernel runs."""
    if p.direction is Direction.BACKWARD_WEIGHTS:
        return "wrw"
    return "nhwc" if channels_last(p.x) else "nchw"


def esize(p: ConvProblem) -> int:
    return p.dtype.itemsize


def vec_ok(p: ConvProblem, vec: int) -> bool:
    """Whether ``vec`` channels can move in one access: channels innermost in both activation
    tensors, whole vectors (channel counts and pixel strides multiples of vec), no multiplier."""
    if vec == 1:
        return True
    if vec * esize(p) > 16 or problem_sizes(p)["mult"] != 1:
        return False
    for t in (p.x, p.y):
        if t.strides[1] != 1 or t.lengths[1] % vec:
            return False
        if any(st % vec for i, st in enumerate(t.strides) if i != 1):
            return False
    return True


def vecs(p: ConvProblem) -> list[int]:
    """Channel vector widths that apply, widest (16 bytes) first."""
    return [v for v in (16 // esize(p), 8 // esize(p), 4 // esize(p), 1) if v and vec_ok(p, v)]


def tap_count(p: ConvProblem) -> int:
    return math.prod(problem_sizes(p)["f"])


def wrw_taps_per_block(p: ConvProblem, vec: int) -> int:
    """Taps per backward-weights block: all of them if the accumulators fit, else even chunks."""
    taps = tap_count(p)
    chunks = -(-taps * vec // MAX_WRW_ACC)
    return -(-taps // chunks)


def wrw_items(p: ConvProblem, cfg: PerfConfig) -> tuple[int, int]:
    """(items, strips along W) of backward weights: dy strips of py rows x pix columns."""
    bd, bh, bw = dims3(tuple(p.y.lengths[2:]))
    groups_w = -(-bw // cfg["pix"])
    return p.y.lengths[0] * bd * -(-bh // cfg["py"]) * groups_w, groups_w


def wrw_tile_applies(p: ConvProblem) -> bool:
    """Whether ``dw_wrw_tile`` can take this backward-weights problem: 2-D, plain depthwise
    (no multiplier), channels innermost in x and dy."""
    s = problem_sizes(p)
    return (
        p.direction is Direction.BACKWARD_WEIGHTS
        and p.spatial_dims == 2
        and s["mult"] == 1
        and channels_last(p.x)
        and channels_last(p.y)
    )


def wrw_tile_x_extent(p: ConvProblem, cfg: PerfConfig) -> tuple[int, int]:
    """(rows, columns) of the x tile ``dw_wrw_tile`` stages: what a tp x tq tile of dy
    reaches."""
    s = problem_sizes(p)
    xtp = (cfg["tp"] - 1) * s["s"][1] + (s["f"][1] - 1) * s["d"][1] + 1
    xtq = (cfg["tq"] - 1) * s["s"][2] + (s["f"][2] - 1) * s["d"][2] + 1
    return xtp, xtq


def wrw_tile_x_pixels(p: ConvProblem, cfg: PerfConfig) -> int:
    """Pixels of the x tile ``dw_wrw_tile`` stages."""
    xtp, xtq = wrw_tile_x_extent(p, cfg)
    return xtp * xtq


#: Alignment of a TMA copy's shared-memory destination (bytes).
TMA_ALIGN = 128


def tma_aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to a TMA destination's alignment."""
    return -(-nbytes // TMA_ALIGN) * TMA_ALIGN


def tma_box(t: Any, size: int, channels: int, rows: int, cols: int) -> tuple[tuple[int, ...], ...]:
    """The 4-D tensor map of channels-innermost 2-D tensor ``t`` (elements of ``size`` bytes)
    a TMA copy reads, innermost first: (dims (C, W, H, N), byte strides of W, H and N, box
    (``channels``, ``cols``, ``rows``, one image))."""
    n, c, h, w = t.lengths
    strides = (t.strides[3] * size, t.strides[2] * size, t.strides[0] * size)
    return (c, w, h, n), strides, (channels, cols, rows, 1)


#: Narrow L2 promotion on TMA boxes of some of a pixel's channels (:func:`tma_l2_promotion`).
#: With 256-byte promotion, dw96s2@112's forward tiles (64 of each pixel's 192 bytes a box
#: row) read x from DRAM about twice (348 MB moved against 191 for the cp.async staging, 88
#: against 67 µs; Nsight Compute, H200, forty-first session). Timed on (fp16, batch 64, 34
#: layers of MobileNetV2, EfficientNet-B0 and MobileNetV3-Large, forty-second session): the
#: best TMA tile 0.94x its time with wide promotion, forward; with channel blocks first
#: (``NHWC_TILE_CHANNELS_FIRST``) 1.00x on the first two networks, 0.98x on the third;
#: backward weights 1.00x.
TMA_L2_NARROW = True


def tma_l2_promotion(dims: tuple[int, ...], box: tuple[int, ...], size: int) -> int:
    """Bytes L2 fetches around each piece a TMA box of this map reads: 256, or with
    :data:`TMA_L2_NARROW`, where a box row holds only some of a pixel's channels, the widest
    promotion no longer than that row (64 at least), so the channels other blocks read much
    later are not fetched now."""
    row = box[0] * size
    if not TMA_L2_NARROW or box[0] >= dims[0] or row >= 256:
        return 256
    return 128 if row >= 128 else 64


def wrw_tile_shared_bytes(p: ConvProblem, cfg: PerfConfig) -> int:
    """Static shared memory of ``dw_wrw_tile``: the x and dy tiles as floats; staged by TMA
    (``tma``), two items' tiles as they lie in memory, each on a 128-byte boundary, and two
    8-byte mbarriers."""
    if cfg.get("tma"):
        size, cb = esize(p), cfg["cb"]
        x_bytes = tma_aligned(wrw_tile_x_pixels(p, cfg) * cb * size)
        dy_bytes = tma_aligned(cfg["tp"] * cfg["tq"] * cb * size)
        return 2 * (x_bytes + dy_bytes) + 16
    return 4 * cfg["cb"] * (wrw_tile_x_pixels(p, cfg) + cfg["tp"] * cfg["tq"])


def wrw_tile_tma_boxes(p: ConvProblem, cfg: PerfConfig) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The tensor maps (:func:`tma_box`) of x and dy a TMA ``dw_wrw_tile`` copies from: x's
    box is what a ``tp`` x ``tq`` dy tile reaches."""
    size, cb = esize(p), cfg["cb"]
    xtp, xtq = wrw_tile_x_extent(p, cfg)
    return tma_box(p.x, size, cb, xtp, xtq), tma_box(p.y, size, cb, cfg["tp"], cfg["tq"])


def wrw_tile_items(p: ConvProblem, cfg: PerfConfig) -> int:
    """Items of ``dw_wrw_tile``: dy tiles of tp x tq pixels of every image."""
    _, bh, bw = dims3(tuple(p.y.lengths[2:]))
    return p.y.lengths[0] * -(-bh // cfg["tp"]) * -(-bw // cfg["tq"])


def is_tile(cfg: PerfConfig) -> bool:
    return "cb" in cfg


def extent(p: ConvProblem, tile: int, axis: int) -> int:
    """Rows (axis 1) or columns (axis 2) of the tile ``dw_nchw`` stages for ``tile`` outputs."""
    s = problem_sizes(p)
    f, st, dl = s["f"][axis], s["s"][axis], s["d"][axis]
    if role(p)[5]:  # gather: the dy window a dx tile's taps reach
        return (tile - 2 + (f - 1) * dl + st) // st + 1
    return (tile - 1) * st + (f - 1) * dl + 1


def nchw_shared_bytes(p: ConvProblem, cfg: PerfConfig) -> int:
    """Static shared memory of ``dw_nchw`` for ``cfg``: staged tile plus the filter, for each
    of the block's ``pp`` planes."""
    r = role(p)[2]
    th = cfg["by"] * cfg["py"]
    per_plane = extent(p, th, 1) * extent(p, cfg["tw"], 2) + r * tap_count(p)
    return 4 * cfg.get("pp", 1) * per_plane


def filter_storage(taps: int, vec: int, ct: int) -> tuple[int, int]:
    """(in registers, staged in shared memory) for ``dw_nhwc``'s filter: registers while a
    thread's taps fit :data:`MAX_WREG`, else the block's taps as floats in shared memory
    while they fit :data:`SHARED_LIMIT` (a tap read per use from global memory costs as many
    loads as multiply-adds: 7x7 filters ran 6x slower that way), else global memory."""
    if taps * vec <= MAX_WREG:
        return 1, 0
    return 0, int(4 * taps * vec * ct <= SHARED_LIMIT)


def kernel_info(
    name: str, options: tuple[str, ...], grid: tuple, block: tuple, source: str = SOURCE
) -> KernelInfo:
    return KernelInfo(
        source=source, kernel_name=name, options=tuple(options), grid=grid, block=block
    )


def reduce_kernel(options: list[str] | tuple[str, ...], wcount: int, split: int) -> KernelInfo:
    """``dw_wrw_reduce`` over ``split`` partials of ``wcount`` filter elements: blocks of 32
    elements x up to 32 split lanes (each lane sums about four partials)."""
    lanes = max(1, min(32, -(-split // 4)))
    grid = (max(1, min(-(-wcount // 32), 4096)),)
    return kernel_info("dw_wrw_reduce", tuple(options), grid, (32, lanes))


def pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def ct_for(channels: int, vec: int) -> int:
    """Channel vectors per block: all of a small channel count, else 32."""
    nv = -(-channels // vec)
    return nv if nv <= 64 else 32


def rows_apply(p: ConvProblem) -> bool:
    """Whether ``dw_nchw_rows`` can run ``p``: channels outer, 2-D, forward-like (forward, or
    backward data at stride 1); strided backward data gathers in ``dw_nchw``."""
    return kernel_kind(p) == "nchw" and p.spatial_dims == 2 and not role(p)[5]


def rows_window(p: ConvProblem, ox: int) -> int:
    """Input columns one ``dw_nchw_rows`` thread's ``ox`` outputs read."""
    s = problem_sizes(p)
    return (ox - 1) * s["s"][2] + (s["f"][2] - 1) * s["d"][2] + 1


def rows_chunk(p: ConvProblem) -> int:
    """Elements per chunk ``dw_nchw_rows`` loads: ``NCHW_CHUNK_BYTES`` worth, or half that
    where the read tensor's rows are not a whole number of those but are of half (16-bit
    rows of 14 elements: 4-byte loads instead of one element at a time); 1: none."""
    chunk = NCHW_CHUNK_BYTES // esize(p)
    width = role(p)[0].lengths[-1]
    if chunk > 2 and width % chunk and width % (chunk // 2) == 0:
        chunk //= 2
    return max(1, chunk)


def is_rows(cfg: PerfConfig) -> bool:
    return "ox" in cfg
