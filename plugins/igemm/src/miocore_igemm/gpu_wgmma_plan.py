"""What an ``igemm.gpu_wgmma`` launch covers and what the cost model expects it to cost.

A problem seen as the forward convolution the kernel computes (:class:`GemmView`: backward
data at stride 1 is the forward convolution of dy with the flipped filter), the pixel boxes
that cover its output in the fewest tiles, the tiles and pipeline depths the kernel is
compiled for, and the cost model that ranks every tile and split-K (:func:`ranked`: waves of
work units over the SMs, a fixed cost per unit for the epilogue, split-K's partial sums). The
solver (``gpu_wgmma.py``) turns a ranked configuration into kernels and launches.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from miocore import ConvProblem, DataType, Direction, ExecutionContext, PerfConfig
from miocore.backends.gpu_kernels import DTYPE_OPTIONS

ROWS = 128  # output pixels of the smaller tile
ROW_BYTES = 128  # a pipeline slice's row: the swizzle width (64 fp16/bf16 or 32 fp32 channels)
BK = 64  # channels per slice of fp16/bf16 (GemmView.bk per type)
#: Pipeline depths per tile (pixels bm x channels bn x ping-pong): each fills 160-200 KiB of
#: the 227 KiB an sm_90 block may use (a stage is bm x 128 bytes of pixels and bn x 128 bytes
#: of filter). Cooperative tiles (pingpong 0) are split between the two consumer warpgroups,
#: bm/2 x bn fp32 accumulators each in 128 threads (at most 128 a thread); ping-pong tiles
#: belong to one consumer whole (bm x bn), the two consumers taking turns, so that one
#: multiplies while the other stores.
STAGES = {(128, 256, 0): (4, 3), (128, 128, 0): (6, 4), (128, 64, 0): (8, 4),
          (256, 128, 0): (4, 3), (256, 64, 0): (5, 4),
          (128, 128, 1): (6, 4), (64, 256, 1): (5, 4), (128, 64, 1): (8, 5)}  # fmt: skip
#: Relative speed of a tile per unit of work (bigger tiles reuse their operands more), and
#: the fixed cost of a work unit in slices' time: cooperative tiles every unit, ping-pong
#: tiles once a block. Fitted with the default's choice among each tile's best box and split
#: (ResNet-50 and VGG-16, forward and backward data, fp16, H100, 2026-11-28: the picked
#: configuration 1.05x the fastest measured, geometric mean; with the alternatives below
#: measured too, 1.005x).
_TILE_EFFICIENCY = {(128, 256, 0): 1.0, (256, 128, 0): 1.0, (128, 128, 0): 0.92,
                    (256, 64, 0): 0.85, (128, 64, 0): 0.7,
                    (128, 128, 1): 0.95, (64, 256, 1): 0.9, (128, 64, 1): 0.7}  # fmt: skip
_COOPERATIVE_FIXED = 4.0
_PINGPONG_FIXED = 1.0
#: TF32's (k8 wgmma on 32-channel slices): small ping-pong tiles and their per-block cost
#: weigh differently. Fitted on the first TF32 sweep (ResNet-50 and VGG-16, forward and
#: backward data, H100, 2026-11-28): the default 1.064x the fastest measured -> 1.018x;
#: fitted on one suite and scored on the other, 1.096 -> 1.038 (VGG-16) and 1.051 -> 1.026
#: (ResNet-50). The same constants would cost fp16 (1.042 -> 1.063): a table of its own.
_TF32_TILE_EFFICIENCY = {**_TILE_EFFICIENCY, (256, 64, 0): 0.9, (128, 128, 1): 0.85,
                         (128, 64, 1): 0.5}  # fmt: skip
_TF32_PINGPONG_FIXED = 0.5

#: The default's cost model (seconds): an H100/H200 SM's dense fp16 rate, and the rate of
#: split-K's partial sums, written and read back mostly within the 50 MiB L2 (fitted on
#: ResNet-50's 7x7 and 14x14 layers, H200: 4 parts of 128 x 256 beat one part of 128 x 64).
_SM_FLOPS = 7.0e12
_PARTIAL_BYTES_PER_S = 9.0e12
#: Box extents the TMA allows: 256 elements per dimension, element strides up to 8.
_MAX_BOX = 256
_MAX_ELEMENT_STRIDE = 8

#: Split-K parts: where a layer's tiles leave SMs idle, each part sums a share of the slices.
SPLITS = (1, 2, 4, 8)
#: Slices of 64 channels a part should keep at least (fewer: the pipeline never fills).
_MIN_PART_STEPS = 8


#: The kernel's element type: fp32 tensors go through the tensor cores as TF32.
_DTYPE_OPTIONS = {
    DataType.FLOAT16: DTYPE_OPTIONS[DataType.FLOAT16],
    DataType.BFLOAT16: DTYPE_OPTIONS[DataType.BFLOAT16],
    DataType.FLOAT32: "-DMIO_DTYPE_TF32",
}


def _rate_factor(dtype: DataType) -> float:
    """The tensor cores' rate for ``dtype`` against fp16's: TF32 runs at half."""
    return 0.5 if dtype is DataType.FLOAT32 else 1.0


def _is_sm90(ctx: ExecutionContext) -> bool:
    return ctx.backend == "cuda" and ctx.device.arch.replace("_", "") == "sm90"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class GemmView(NamedTuple):
    """A problem as the forward convolution the kernel computes: the activation it reads
    (``src``, [``id`` x] ``ih`` x ``iw``, ``c`` channels), the one it writes (``dst``,
    [``od`` x] ``oh`` x ``ow``, ``k`` channels), the geometry; strides in (n, c, [d,] h, w)
    order, elements. 2-D problems have a depth of 1 (filter ``t``, stride ``sd``, padding
    ``pd``, dilation ``dd``: 1, 1, 0, 1)."""

    n: int
    ih: int
    iw: int
    oh: int
    ow: int
    c: int
    k: int
    r: int
    s: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    src: tuple[int, ...]
    dst: tuple[int, ...]
    flip: bool  # backward data: the filter is flipped and transposed first
    bk: int  # channels per slice: 128 bytes of the element type (BK for fp16/bf16)
    id: int = 1
    od: int = 1
    t: int = 1
    sd: int = 1
    pd: int = 0
    dd: int = 1

    @property
    def three(self) -> bool:
        """Whether the problem is 3-D (the kernel built with ``MIO_3D``)."""
        return len(self.src) == 5

    @property
    def taps(self) -> int:
        return self.t * self.r * self.s

    @property
    def slices(self) -> int:
        """Pipeline steps of a tile's whole sum: every tap times the slices of ``bk``
        channels of c."""
        return self.taps * _cdiv(self.c, self.bk)

    @property
    def pixels(self) -> int:
        """Output pixels of one image."""
        return self.od * self.oh * self.ow


def depth3(values: tuple[int, ...], flat: int) -> tuple[int, int, int]:
    """A problem's (depth, height, width) values; a 2-D problem's depth is ``flat``."""
    return (values[0], values[1], values[2]) if len(values) == 3 else (flat, *values)


def gemm_view(p: ConvProblem) -> GemmView:
    """Forward as it is; backward data (stride 1) as the forward convolution of dy with the
    flipped, transposed filter. 2-D or 3-D (depth first, as the problem gives it)."""
    t, r, s = depth3(p.filter_spatial, 1)
    (id_, ih, iw), (od, oh, ow) = depth3(p.in_spatial, 1), depth3(p.out_spatial, 1)
    (sd, sh, sw), (pd, ph, pw) = depth3(p.conv.strides, 1), depth3(p.conv.pads, 0)
    dd, dh, dw = depth3(p.conv.dilations, 1)
    bk = ROW_BYTES // p.dtype.itemsize
    if p.direction is Direction.BACKWARD_DATA:
        return GemmView(
            p.n, oh, ow, ih, iw, p.k, p.c, r, s, 1, 1, dh * (r - 1) - ph, dw * (s - 1) - pw,
            dh, dw, p.y.strides, p.x.strides, True, bk,
            od, id_, t, 1, dd * (t - 1) - pd, dd,
        )  # fmt: skip
    return GemmView(
        p.n, ih, iw, oh, ow, p.c, p.k, r, s, sh, sw, ph, pw, dh, dw, p.x.strides, p.y.strides,
        False, bk, id_, od, t, sd, pd, dd,
    )  # fmt: skip


def pixel_boxes(v: GemmView, count: int = 4, rows: int = ROWS) -> list[tuple[int, int, int, int]]:
    """The ``count`` boxes ``(tw, th, td, tn)`` of at most ``rows`` output pixels that cover
    the output in the fewest tiles (wider, then taller boxes first among equals: longer runs
    of stores); ``td`` is 1 on 2-D problems."""
    scored = []
    for tw in range(1, min(v.ow, rows) + 1):
        if tw * v.sw > _MAX_BOX:
            break
        for th in range(1, min(v.oh, rows // tw) + 1):
            if th * v.sh > _MAX_BOX:
                break
            for td in range(1, min(v.od, rows // (tw * th)) + 1):
                if td * v.sd > _MAX_BOX:
                    break
                tn = min(v.n, rows // (tw * th * td), _MAX_BOX)
                box = (tw, th, td, tn)
                scored.append((_tiles(v, box), -tw, -th, -td, box))
    scored.sort()
    return [box for *_, box in scored[:count]]


def _tiles(v: GemmView, box: tuple[int, ...]) -> int:
    tw, th, td, tn = box
    return _cdiv(v.n, tn) * _cdiv(v.od, td) * _cdiv(v.oh, th) * _cdiv(v.ow, tw)


def ranked(ctx: ExecutionContext, p: ConvProblem) -> list[PerfConfig]:
    """Every tile and split-K at the tile's best pixel box, deepest pipeline and persistent
    single blocks, fastest first by the cost model: waves of work units over the SMs, a
    unit's slices at the tile's relative speed, and a fixed cost per unit for its epilogue
    and pipeline fill (cooperative tiles pay it every unit: both consumers store together;
    ping-pong tiles about once a block: a consumer stores while the other multiplies), plus
    split-K's partial sums written and read back."""
    return list(_ranked(p, _sms(ctx)))


def _sms(ctx: ExecutionContext) -> int:
    return max(1, ctx.device.compute_units)


@functools.lru_cache(maxsize=256)
def _ranked(p: ConvProblem, sms: int) -> tuple[PerfConfig, ...]:
    """:func:`ranked`, kept per problem and SM count: a find asks for it several times (the
    default, its workspace and estimate, the listed alternatives, compile-ahead), and the
    pixel boxes of every tile take milliseconds in Python."""
    v = gemm_view(p)
    widest = max(64, 1 << max(0, (v.k - 1).bit_length()))
    rate = _SM_FLOPS * _rate_factor(p.dtype)
    tf32 = p.dtype is DataType.FLOAT32
    efficiency = _TF32_TILE_EFFICIENCY if tf32 else _TILE_EFFICIENCY
    pingpong_fixed = _TF32_PINGPONG_FIXED if tf32 else _PINGPONG_FIXED
    scored = []
    for tile, depths in STAGES.items():
        bm, bn, pingpong = tile
        if bn > widest:
            continue
        box = pixel_boxes(v, 1, bm)[0]
        for split in _splits(sms, v, bn, box):
            waves = _cdiv(_tiles(v, box) * _cdiv(v.k, bn) * split, sms)
            per_slice = 2.0 * bm * bn * v.bk / (rate * efficiency[tile])
            slices = _cdiv(v.slices, split)
            if pingpong:
                cost = (waves * slices + pingpong_fixed) * per_slice
            else:
                cost = waves * (slices + _COOPERATIVE_FIXED) * per_slice
            cost += 2 * _partial_bytes(v, split) / _PARTIAL_BYTES_PER_S  # written, read
            config = box_config(
                v, box, bm=bm, bn=bn, stages=depths[0], persist=1, cluster=1, split=split,
                pingpong=pingpong,
            )  # fmt: skip
            scored.append((cost, len(scored), config))
    scored.sort(key=lambda t: t[:2])
    return tuple(config for *_, config in scored)


def box_config(v: GemmView, box: tuple[int, int, int, int], **keys: int) -> PerfConfig:
    """A configuration with pixel box ``box``: ``tw``, ``th``, ``tn``, and ``td`` on 3-D
    problems only (2-D configurations keep the keys they were recorded with)."""
    tw, th, td, tn = box
    if v.three:
        return PerfConfig(tw=tw, th=th, td=td, tn=tn, **keys)
    return PerfConfig(tw=tw, th=th, tn=tn, **keys)


def _splits(sms: int, v: GemmView, bn: int, box: tuple[int, ...]) -> tuple:
    """Split-K parts worth trying: 1, and more while the tiles leave ``sms`` SMs idle and each
    part keeps enough slices to fill its pipeline."""
    tiles = _tiles(v, box) * _cdiv(v.k, bn)
    steps = v.slices
    return tuple(s for s in SPLITS if s == 1 or (tiles * s <= sms and steps >= _MIN_PART_STEPS * s))


def _partial_bytes(v: GemmView, split: int) -> int:
    """Split-K's fp32 partial sums: one output-sized slab per part."""
    return 0 if split == 1 else split * v.n * v.pixels * v.k * 4
