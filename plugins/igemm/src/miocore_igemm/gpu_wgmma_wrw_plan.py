"""What an ``igemm.gpu_wgmma_wrw`` launch covers and what the cost model expects it to cost.

The 64-pixel boxes of the output that the sum runs over (:func:`pixel_boxes`; a depth on 3-D
problems), the tiles and pipeline depths the kernel is compiled for, the split-K parts and
their fp32 slabs (added by a reduce kernel, or with the ``fix`` key by the parts themselves:
:func:`counter_bytes`), the stream-K shares (the ``sk`` key: :func:`streamk_blocks`,
:func:`streamk_slabs`), the ``MioWrwGeom`` the kernels take (:func:`pack_geometry`),
and the cost model that ranks every tile and split (:func:`ranked`). The solver
(``gpu_wgmma_wrw.py``) turns a ranked configuration into kernels and launches.
"""

from __future__ import annotations

import functools
import itertools
import math
import struct

from miocore import ConvProblem, Direction, ExecutionContext, PerfConfig
from miocore_igemm.gpu_wgmma_plan import _MAX_BOX, _SM_FLOPS, _cdiv, _sms, depth3

PIXELS = 64  # output pixels per slice of the sum: one pixel box
CHUNK = 64  # channels per TMA box row (128 bytes of fp16/bf16)
#: Tiles (k x c) and their pipeline depth: a stage is (bm + bn) x 128 bytes (64 pixels of each
#: operand), the ring 192-200 KiB of the 227 KiB a block may use. With bm 64 both consumers
#: share the k rows and take half the columns each; the :data:`HALVES` tiles are multiplied
#: whole by each consumer on alternate stages (an even depth), each summing into its own slab.
STAGES = {(128, 256): 4, (128, 128): 6, (128, 64): 8, (64, 256): 5, (64, 128): 8, (64, 64): 12,
          (128, 192): 5, (64, 192): 6}  # fmt: skip
#: Tiles whose consumers take the whole tile on alternate stages, each summing into its own
#: slab: 64 x 64, and 64 x 192 over three taps (halves of 96 columns would split a tap).
HALVES = ((64, 64), (64, 192))
#: Tile widths over one tap (192 only spans three taps).
PER_TAP_BN = (64, 128, 256)
#: Taps a tile's columns may span on layers of at most 64 input channels (the ``span`` key):
#: a 128-, 192- or 256-wide tile is 2, 3 or 4 taps of every channel. In the tuning space after
#: the per-tap tiles; those of :data:`RANKED_SPANS` are ranked by the cost model
#: (``_SPAN_EFFICIENCY``).
SPANS = (2, 3, 4)
#: Spans the cost model ranks (defaults and a normal find's alternatives); 3 (no repeated tap
#: on 3x3 and 3x3x3 filters, where 2 and 4 repeat one) joined once timed (H200, 2026-11-30):
#: in stream-K shares it was the fastest tile of VGG-16's conv1_2 and conv2_1.
RANKED_SPANS = (2, 3, 4)
#: Relative speed of a tile per unit of work (bigger tiles reuse their operands more) and a
#: unit's fixed cost (pipeline fill, epilogue) in slices' time: first estimates, by analogy
#: with the forward kernel's table; replayed on a sweep of every tile and split (ResNet-50 and
#: VGG-16, fp16, H200, 2026-11-28: ``benchmarks/wgmma_cost_fit.py``), the default is 1.017x
#: the fastest measured and 1.005x with the alternatives a normal find measures too.
_TILE_EFFICIENCY = {(128, 256): 1.0, (128, 128): 0.92, (64, 256): 0.85, (128, 64): 0.75,
                    (64, 128): 0.75, (64, 64): 0.6,
                    (128, 192): 0.96, (64, 192): 0.8}  # fmt: skip  # 192: interpolated
_UNIT_FIXED = 6.0
#: A tile over several taps runs at this fraction of the per-tap tile of its shape (one TMA
#: box per tap a stage; the last group's repeated tap is counted as work). Fitted on every
#: tile of VGG-16's and the 3-D U-Net's backward weights (fp16, H200, 2026-11-29): the span
#: tiles were 0.82-0.88x the per-tap tiles' time on the U-Net's 27-tap layers of 32-64
#: channels and 1.11-1.14x on VGG-16's 9-tap ones; at 0.8 a normal find measures the span
#: tile wherever it won (find 1.028 -> 1.002x the fastest in geomean, default 1.036 -> 1.028)
#: and the default takes none that lost; 0.85 and up make VGG-16's defaults span tiles.
_SPAN_EFFICIENCY = 0.8
#: The rate of the parts' fp32 sums, written and read back mostly within the L2.
_PARTIAL_BYTES_PER_S = 9.0e12
#: Stream-K shares (``_streamk_cost``): a share's slices against a split-K part's, the fixed
#: cost of each tile a share touches in slices' time, and the rate the tiles read their
#: operand boxes at (memory, part of it hitting in the L2). Fitted on every tile's best
#: split-K and its shares on VGG-16's and the 3-D U-Net's backward weights (fp16, H200,
#: 2026-11-30, ``benchmarks/wgmma_cost_fit.py``): the default went from 1.071x to 1.016x the
#: fastest measured, with the alternatives a normal find measures from 1.043x to 1.002x.
_STREAMK_SLOWDOWN = 1.0
_STREAMK_FIXED = 6.0
_STREAMK_BYTES_PER_S = 6.0e12
#: Split-K parts the configuration space offers.
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: Slices a part should keep at least (fewer: the pipeline never fills).
_MIN_PART_STEPS = 8
#: The keys every configuration has; optional: "td" (3-D), "span", "sk", "fix".
_KEYS = ("bm", "bn", "stages", "tw", "th", "tn", "split")
_GEOMETRY = struct.Struct("<22i5q")
_GEOMETRY_3D = struct.Struct("<8iq")  # MioWrwGeom's depth fields, after the 2-D ones


def pixel_boxes(p: ConvProblem, count: int = 3) -> list[tuple[int, int, int, int]]:
    """The ``count`` boxes ``(tw, th, td, tn)`` of exactly 64 output pixels (powers of two;
    ``td`` 1 on 2-D problems) that cover the output in the fewest boxes, wider, then taller
    first among equals; within the TMA's box extents (the input box spans ``tw`` x stride
    columns)."""
    sd, sh, sw = depth3(p.conv.strides, 1)
    depths = range(7) if p.spatial_dims == 3 else (0,)
    scored = []
    for a, b, e in itertools.product(range(7), range(7), depths):
        tw, th, td = 1 << a, 1 << b, 1 << e
        if tw * th * td > PIXELS:
            continue
        tn = PIXELS // (tw * th * td)
        if tw * sw > _MAX_BOX or th * sh > _MAX_BOX or td * sd > _MAX_BOX:
            continue
        box = (tw, th, td, tn)
        scored.append((_boxes(p, box), -tw, -th, -td, box))
    scored.sort()
    return [box for *_, box in scored[:count]]


def _boxes(p: ConvProblem, box: tuple[int, ...]) -> int:
    od, oh, ow = depth3(p.out_spatial, 1)
    tw, th, td, tn = box
    return _cdiv(ow, tw) * _cdiv(oh, th) * _cdiv(od, td) * _cdiv(p.n, tn)


def _computes(p: ConvProblem) -> bool:
    """Backward weights, 2-D or 3-D: what the kernel computes (applicable or not)."""
    return p.spatial_dims in (2, 3) and p.direction is Direction.BACKWARD_WEIGHTS


def _taps(p: ConvProblem) -> int:
    return math.prod(p.filter_spatial)


def _direct(p: ConvProblem, tile: tuple[int, int], split: int, streamk: int = 0) -> bool:
    """Whether the sums go straight into the filter: one part summed by one consumer, c
    contiguous, even strides (the epilogue's paired stores); never with stream-K shares
    (``streamk``: their block count), whose tiles may have several contributors."""
    ws = p.w.strides  # (k, c, [t,] r, s)
    if split != 1 or tile in HALVES or streamk:
        return False
    return ws[1] == 1 and not any(x % 2 for x in (ws[0], *ws[2:]))


def _slabs(tile: tuple[int, int], split: int) -> int:
    """fp32 slabs of sums in the workspace: one per part, one per consumer for the HALVES tiles."""
    return 2 * split if tile in HALVES else split


def _slab(p: ConvProblem) -> int:
    return p.k * _taps(p) * p.c


def _partial_bytes(p: ConvProblem, tile: tuple[int, int], split: int) -> int:
    """The parts' fp32 sums in the workspace (none when stored straight into the filter)."""
    return 0 if _direct(p, tile, split) else _slabs(tile, split) * _slab(p) * 4


def partial_bytes(p: ConvProblem, config: PerfConfig, streamk: int = 0) -> int:
    """The fp32 sums of ``config``'s launch in the workspace: its split-K parts', or with
    stream-K shares over ``streamk`` blocks one slab per contributor a tile can have; with
    the fix-up (``fix``) each tile's count of arrived parts after them (:func:`counter_bytes`)."""
    if streamk:
        return streamk_slabs(p, config, streamk) * _slab(p) * 4
    tile = (int(config["bm"]), int(config["bn"]))
    sums = _partial_bytes(p, tile, int(config["split"]))
    return sums + counter_bytes(p, config)


def counter_bytes(p: ConvProblem, config: PerfConfig) -> int:
    """With the fix-up (``fix``): one 4-byte count of arrived parts per tile, zeroed before
    each launch, rounded up to 16 bytes; else 0."""
    if not config.get("fix"):
        return 0
    tiles = tile_count(p, (int(config["bm"]), int(config["bn"])), int(config.get("span", 1)))
    return _cdiv(tiles * 4, 16) * 16


def tile_count(p: ConvProblem, tile: tuple[int, int], span: int = 1) -> int:
    """Tiles of a launch: k tiles x c tiles x tap groups (the kernel's ``tile_count``)."""
    return _cdiv(p.k, tile[0]) * c_tiles(p, tile[1], span) * tap_groups(p, span)


def _box_of(config: PerfConfig) -> tuple[int, int, int, int]:
    return (int(config["tw"]), int(config["th"]), int(config.get("td", 1)), int(config["tn"]))


def streamk_blocks(p: ConvProblem, config: PerfConfig, sms: int) -> int:
    """Blocks of a stream-K launch (``sk`` in ``config``): one per SM, no more than there are
    (tile, box) iterations; 0 for a split-K configuration."""
    if not config.get("sk"):
        return 0
    tile = (int(config["bm"]), int(config["bn"]))
    iterations = tile_count(p, tile, int(config.get("span", 1))) * _boxes(p, _box_of(config))
    return max(1, min(sms, iterations))


def streamk_slabs(p: ConvProblem, config: PerfConfig, blocks: int) -> int:
    """fp32 slabs a stream-K launch of ``config`` over ``blocks`` needs: the most blocks whose
    shares meet in one tile (twice that for the HALVES tiles, a slab per consumer)."""
    tile = (int(config["bm"]), int(config["bn"]))
    tiles = tile_count(p, tile, int(config.get("span", 1)))
    return _slabs(tile, _most_contributors(tiles, _boxes(p, _box_of(config)), blocks))


def _sk_owner(x: int, total: int, blocks: int) -> int:
    """The block whose share holds iteration ``x`` (the kernels' ``mio_sk_owner``)."""
    return ((x + 1) * blocks - 1) // total


@functools.lru_cache(maxsize=256)
def _most_contributors(tiles: int, boxes: int, blocks: int) -> int:
    """The most blocks whose shares hold some of one tile (``mio_sk_contributors``)."""
    total = tiles * boxes
    return max(
        _sk_owner(t * boxes + boxes - 1, total, blocks) - _sk_owner(t * boxes, total, blocks) + 1
        for t in range(tiles)
    )


def pack_geometry(p: ConvProblem, config: PerfConfig, streamk: int = 0) -> bytes:
    """The kernels' ``MioWrwGeom`` for ``p`` and a valid ``config``: sizes, geometry, the
    pixel box and its counts, the split (with stream-K shares: ``streamk``, the grid's
    blocks), whether the sums go straight into the filter, the slabs the reduce adds, the
    filter's strides and one slab's length."""
    bm, bn, _, tw, th, tn, split = (int(config[k]) for k in _KEYS)
    td = int(config.get("td", 1))
    t, r, s = depth3(p.filter_spatial, 1)
    od, oh, ow = depth3(p.out_spatial, 1)
    sd, sh, sw = depth3(p.conv.strides, 1)
    pd, ph, pw = depth3(p.conv.pads, 0)
    dd, dh, dw = depth3(p.conv.dilations, 1)
    ws = p.w.strides  # (k, c, [t,] r, s)
    slabs = streamk_slabs(p, config, streamk) if streamk else _slabs((bm, bn), split)
    packed = _GEOMETRY.pack(
        p.n, oh, ow, p.k, p.c, r, s, sh, sw, ph, pw, dh, dw, tw, th, tn,
        _cdiv(ow, tw), _cdiv(oh, th), _boxes(p, (tw, th, td, tn)), streamk or split,
        int(_direct(p, (bm, bn), split, streamk)), slabs,
        ws[0], ws[-2], ws[-1], ws[1], _slab(p),
    )  # fmt: skip
    if p.spatial_dims == 3:  # MioWrwGeom's depth fields (MIO_3D)
        packed += _GEOMETRY_3D.pack(od, t, sd, pd, dd, td, _cdiv(od, td), 0, ws[2])
    return packed


def ranked(ctx: ExecutionContext, p: ConvProblem) -> list[PerfConfig]:
    """Every tile and split-K (and the tile in stream-K shares, where there are iterations
    for every SM) at the best pixel box, fastest first by the cost model: waves of work units
    over the SMs, a unit's slices at the tile's relative speed plus a fixed cost per unit,
    and the parts' fp32 sums written and read back (shares: ``_streamk_cost``)."""
    return list(_ranked(p, _sms(ctx)))


@functools.lru_cache(maxsize=256)
def _ranked(p: ConvProblem, sms: int) -> tuple[PerfConfig, ...]:
    box = pixel_boxes(p, 1)[0]
    boxes = _boxes(p, box)
    scored = []
    for span, ((bm, bn), stages) in itertools.product((1, *RANKED_SPANS), STAGES.items()):
        if not _fits(p, bm, bn, span):
            continue
        tiles = tile_count(p, (bm, bn), span)
        efficiency = _TILE_EFFICIENCY[bm, bn] * (_SPAN_EFFICIENCY if span > 1 else 1.0)
        per_slice = 2.0 * bm * bn * PIXELS / (_SM_FLOPS * efficiency)
        for split in _splits(p, box):
            waves = _cdiv(tiles * split, sms)
            cost = waves * (_cdiv(boxes, split) + _UNIT_FIXED) * per_slice
            cost += 2 * _partial_bytes(p, (bm, bn), split) / _PARTIAL_BYTES_PER_S
            scored.append((cost, len(scored), _config(p, bm, bn, stages, box, split, span)))
        if tiles * boxes >= sms:  # stream-K shares: every SM busy, ends meet in shared tiles
            cost = _streamk_cost(tiles, boxes, sms, per_slice, (bm, bn), span)
            config = _config(p, bm, bn, stages, box, 1, span, streamk=True)
            scored.append((cost, len(scored), config))
    scored.sort(key=lambda t: t[:2])
    return tuple(config for *_, config in scored)


def _streamk_cost(
    tiles: int, boxes: int, sms: int, per_slice: float, tile: tuple[int, int], span: int
) -> float:
    """A stream-K launch's expected time: one block per SM takes an equal share of the
    iterations, paying ``_STREAMK_FIXED`` slices for every tile its share touches; or, where
    longer, every tile reading its operands' boxes from memory (the blocks work at different
    pixels, so unlike split-K's parts the tiles share little in the L2); and each piece's fp32
    sums go out and back through the reduce."""
    share = _cdiv(tiles * boxes, sms)
    pieces = _cdiv(share, boxes) + 1  # tiles one share touches, at most
    compute = (share * _STREAMK_SLOWDOWN + _STREAMK_FIXED * pieces) * per_slice
    memory = tiles * boxes * PIXELS * (tile[0] + tile[1] // span) * 2 / _STREAMK_BYTES_PER_S
    return max(compute, memory) + 2 * (tiles + sms) * tile[0] * tile[1] * 4 / _PARTIAL_BYTES_PER_S


def _fits(p: ConvProblem, bm: int, bn: int, span: int = 1) -> bool:
    """Tiles no wider than k and c need (64 x 64 always fits); over ``span`` taps: at most 64
    input channels (one box a tap), as many taps, ``bn`` 64 a tap."""
    widest_k = max(64, 1 << max(0, (p.k - 1).bit_length()))
    if span > 1:
        return bm <= widest_k and p.c <= CHUNK and span <= _taps(p) and bn == CHUNK * span
    widest_c = max(64, 1 << max(0, (p.c - 1).bit_length()))
    return bm <= widest_k and bn <= widest_c and bn in PER_TAP_BN


def c_tiles(p: ConvProblem, bn: int, span: int = 1) -> int:
    """Column tiles of one tap group: the channels in tiles of ``bn``, or one over taps."""
    return 1 if span > 1 else _cdiv(p.c, bn)


def tap_groups(p: ConvProblem, span: int = 1) -> int:
    """The filter's taps in groups of ``span`` (the last one short)."""
    return _cdiv(_taps(p), span)


def _splits(p: ConvProblem, box: tuple[int, ...]) -> tuple[int, ...]:
    """Split-K parts worth trying: 1, and more while each part keeps enough slices."""
    boxes = _boxes(p, box)
    return tuple(s for s in SPLITS if s == 1 or boxes >= _MIN_PART_STEPS * s)


def _config(
    p: ConvProblem, bm: int, bn: int, stages: int, box: tuple[int, ...], split: int,
    span: int = 1, streamk: bool = False, fixup: bool = False,
) -> PerfConfig:  # fmt: skip
    """A configuration: ``td`` (the box's depth) on 3-D problems only, ``span`` over several
    taps only, ``sk`` (stream-K shares, ``split`` 1) and ``fix`` (the parts add their sums
    themselves, no reduce kernel) only where asked."""
    tw, th, td, tn = box
    keys = dict(bm=bm, bn=bn, stages=stages, tw=tw, th=th, tn=tn, split=split)
    if p.spatial_dims == 3:
        keys["td"] = td
    if span > 1:
        keys["span"] = span
    if streamk:
        keys["sk"] = 1
    if fixup:
        keys["fix"] = 1
    return PerfConfig(**keys)
