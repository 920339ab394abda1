"""``direct.gpu_depthwise``'s default configs: the rule each kernel's default follows,
fitted on measured layers (``docs/performance-gpu-depthwise.md`` has the sweeps), and the
choice among the kernels' rules for a problem (:func:`default_config`). None of it needs a
device: the rules read only the problem (and, for the staged tiles, whether the device has the
tensor memory accelerator).
"""

from __future__ import annotations

from miocore import ConvProblem, DataType, Direction, PerfConfig
from miocore.backends.gpu_kernels import channels_last
from miocore_direct.gpu_depthwise_configs import (
    config_space,
    fits,
    in_wrw_tile_tma_space,
    rows_items,
)
from miocore_direct.gpu_depthwise_geometry import (
    ROWS_MIN_RUNS,
    ROWS_OX,
    ct_for,
    esize,
    filter_storage,
    kernel_kind,
    pow2_at_least,
    problem_sizes,
    role,
    rows_apply,
    tap_count,
    vecs,
    wrw_taps_per_block,
    wrw_tile_applies,
)
from miocore_direct.gpu_depthwise_nhwc_tile import (
    default_nhwc_tile,
    nhwc_tile_tma_configs,
)


def default_config(problem: ConvProblem, tma: bool = False) -> PerfConfig:
    """nhwc: vectors of at most 4 channels (16-byte fp32, 8-byte fp16: the filter and
    accumulators stay in registers), 4 rows x 2 columns per thread at stride 1, all channels
    of a small layer in one block row (8 channel vectors where the taps go to shared
    memory), staged tiles where they were timed faster (``tma``: the device stages them by
    the tensor memory accelerator; ``gpu_depthwise_nhwc_tile.default_nhwc_tile``); nchw:
    tile width by the output width (32/16/8), 256 threads, 4 rows per thread on tall planes;
    backward weights: ``dw_wrw_tile`` where it applies (staged by the tensor memory
    accelerator with ``tma``: :func:`default_tile_tma`), else (channels innermost) vectors of
    at most 2 channels that keep every tap in one block, 1 x 2 strips, 8 or 16 channel
    vectors."""
    p = problem
    space = config_space(p)
    if not space:
        return PerfConfig(vec=1, pix=1, ct=32)
    kind = kernel_kind(p)
    s = problem_sizes(p)
    if kind == "nchw":
        rows = default_nchw_rows(p)
        if rows is not None and rows in space:
            return rows
        fitted = default_nchw_fitted(p)
        single = PerfConfig(tw=fitted["tw"], by=fitted["by"], py=fitted["py"])
        for want in (fitted, single):  # several planes only where one tile covers the plane
            if want in space:
                return want
        ho, wo = (s["in"] if p.direction is Direction.BACKWARD_DATA else s["out"])[1:]
        tw = 32 if wo >= 24 else 16 if wo >= 12 else 8
        by = min(256 // tw, pow2_at_least(ho))
        py = 4 if ho >= 32 else 2 if ho >= 16 else 1
        want = PerfConfig(tw=tw, by=by, py=py)
    elif kind == "nhwc":
        tile = default_nhwc_tile(p, tma)
        if tile is not None and (tile in space or (tma and tile in nhwc_tile_tma_configs(p))):
            return tile
        want = default_nhwc_plain(p, space)
    else:
        fitted, plain = default_tile_tma(p) if tma else None, default_tile(p)
        twin = PerfConfig(**plain, tma=1) if plain is not None else None
        ungrouped = None  # row groups need more channels than a narrow block has
        if fitted is not None and "pg" in fitted:
            ungrouped = PerfConfig(**{k: v for k, v in fitted.items() if k != "pg"})
        for tile in (fitted, ungrouped, twin):  # else the plain rule's tile staged by TMA
            if tile is not None and tma and in_wrw_tile_tma_space(p, tile, space):
                return tile
        if plain is not None and plain in space:
            return plain
        cl = channels_last(p.x)
        ho = s["out"][1]
        whole = (
            [v for v in vecs(p) if v <= 2 and wrw_taps_per_block(p, v) == tap_count(p)]
            if cl
            else []
        )
        if whole:
            # Vectors of at most 2 channels that keep every tap in one block, strips of
            # 1 row x 2 columns, 8 channel vectors per block on large planes, else 16: the
            # rule closest to each layer's best over 26 depthwise layers (MobileNetV2,
            # EfficientNet-B0, ConvNeXt-T; H200 fp16: 1.12x the best's time in geomean,
            # at most 1.72x, where the earlier rule was 1.95x and 3.3x).
            want = PerfConfig(vec=whole[0], ct=8 if ho >= 28 else 16, py=1, pix=2)
        else:
            vec = next(v for v in vecs(p) if v <= 4) if cl else 1
            py = 4 if ho >= 12 else 2 if ho >= 4 else 1
            pix = 2 if s["s"][2] == 1 else 1
            ct = ct_for(s["k"], vec) if cl else 1
            want = PerfConfig(vec=vec, ct=ct, py=py, pix=pix)
    return want if want in space else space[0]


def default_nhwc_plain(p: ConvProblem, space: list[PerfConfig] | None = None) -> PerfConfig:
    """``dw_nhwc``'s default (channels innermost, no staged tile): the fitted rule where it
    applies (:func:`default_nhwc_fitted`), else vectors of at most 4 channels, 4 rows x 2
    columns a thread at stride 1, all channels of the layer in one block row (8 channel
    vectors where the taps go to shared memory), registers capped where that was timed
    faster (:func:`nhwc_register_cap`). ``space``: ``p``'s config space where the caller
    has it."""
    space = config_space(p) if space is None else space
    fitted = default_nhwc_fitted(p)
    if fitted is not None and fitted in space:
        return fitted
    s = problem_sizes(p)
    written = p.x.lengths[1] if p.direction is Direction.BACKWARD_DATA else s["k"]
    vec = next(v for v in vecs(p) if v <= 4)  # 8-byte fp16 vectors: fewer registers
    gather = role(p)[5]
    pix = 2 if s["s"][2] == 1 and not gather else 1
    ho = s["out"][1]
    py = 1 if gather else 4 if ho >= 12 else 2 if ho >= 4 else 1
    ct = ct_for(written, vec)
    if not filter_storage(role(p)[2] * tap_count(p), vec, ct)[0]:
        # Taps staged in shared memory: 8 channel vectors by 32 pixel lanes was the fastest
        # block on every ConvNeXt-T 7x7 layer (H200, fp16, 1.2-1.6x over all channels in one
        # block row; docs/performance.md).
        ct = min(ct, 8)
    want = PerfConfig(vec=vec, pix=pix, py=py, ct=ct)
    mb = nhwc_register_cap(p, gather)
    if mb and PerfConfig(**want, mb=mb) in space:
        want = PerfConfig(**want, mb=mb)
    return want


def nhwc_register_cap(p: ConvProblem, gather: bool) -> int:
    """``dw_nhwc``'s ``mb`` under the general rule, 0 for none: 16-bit 2-D 3x3 plain
    depthwise layers only, where it was measured (MobileNetV2, H200, batch 64, fp16,
    benchmarks/gpu_depthwise_bench.py --minb; docs/performance-gpu-depthwise.md).

    - the gather (strided backward data, one pixel a thread): 4 blocks, 1.16-1.51x faster
      on all four layers, the larger planes most (407 -> 269 µs at 112x112);
    - stride 1 on planes of 56 and more (4 rows x 2 columns a thread, 112 registers,
      25% occupancy): 3 blocks, 1.06-1.09x; on 28x28 and smaller planes the cap was slower
      (1.1-1.3x, in a run that shared the GPU), strided forward within 2% either way: no
      cap."""
    s = problem_sizes(p)
    if esize(p) != 2 or p.spatial_dims != 2 or s["mult"] != 1 or s["f"][1:] != (3, 3):
        return 0
    if gather:
        return 4
    if max(s["s"][1:]) == 1 and s["out"][1] >= 56:
        return 3
    return 0


def default_nchw_rows(p: ConvProblem) -> PerfConfig | None:
    """``dw_nchw_rows``' run of ``ox`` outputs x ``oy`` rows a thread, by the written plane's
    width and the stride, where the kernel applies (else None: ``dw_nchw``).

    Fitted on every rows config of the depthwise layers of MobileNetV2, EfficientNet-B0 and
    ConvNeXt-T (H200, batch 64, fp16 and bf16, forward and backward data, 88 cases; the rows
    kernel was the fastest config of both kernels on every one of them): 1.004x the best rows
    config's time in geometric mean, at most 1.07x (7x7 filters on 7x7 planes).

    - planes up to 8 wide: one whole row a thread (8x1);
    - up to 16: runs of 4, 2 rows a thread for 3x3 filters, 4 rows for larger ones;
    - up to 32: 4x4; wider: 8x4 at stride 1, 4x4 at stride 2;
    - stride 2 halves the rows a thread (the window it reads is twice as tall);
    - fewer than ``ROWS_MIN_RUNS`` runs in all (small batches): fewer rows, then narrower
      runs, so that every SM has blocks (not measured: reasoned from the occupancy);
    - never more rows a thread than the plane has (1-D layers: one row)."""
    if not rows_apply(p):
        return None
    h, w = role(p)[1].lengths[-2:]  # the written plane
    stride = problem_sizes(p)["s"][2] if p.direction is Direction.FORWARD else 1
    if w <= 8:
        ox, oy = 8, 1
    elif w <= 16:
        ox, oy = 4, 2 if tap_count(p) <= 9 else 4
    else:
        ox, oy = (8 if w > 32 and stride == 1 else 4), 4
    if stride > 1:
        oy = max(1, oy // 2)
    oy = min(oy, pow2_at_least(h))  # no rows beyond the plane's
    cfg = PerfConfig(ox=ox, oy=oy)
    while rows_items(p, cfg)[2] < ROWS_MIN_RUNS and cfg["ox"] * cfg["oy"] > ROWS_OX[-1]:
        ox, oy = cfg["ox"], cfg["oy"]
        cfg = PerfConfig(ox=ox, oy=oy // 2) if oy > 1 else PerfConfig(ox=ox // 2, oy=1)
    return cfg if fits(p, cfg) else None


def default_nchw_fitted(p: ConvProblem) -> PerfConfig:
    """``dw_nchw``'s tile by the written plane's area, with several planes per block on
    planes of 32x32 and less, fitted on every config of the depthwise layers of MobileNetV2,
    EfficientNet-B0 and ConvNeXt-T (H200, batch 64, fp16 and bf16, forward and backward data,
    104 cases; docs/performance-gpu-nchw.md), then refitted once the staging loaded 8-byte
    chunks: on that kernel's sweep 1.03x the best config's time in geometric mean, at most
    1.12x (the first fit: 1.045x, at most 1.30x; fitted on two networks and judged on the
    third: 1.03-1.11x), where the rule before either was 1.3-1.8x on planes of 32 and less.

    - up to 8x8: tiles of 8x8, 3x3 filters 8 planes per block (one row a thread), larger
      filters 4 (two rows a thread: their taps' reads share the staged rows);
    - up to 16x16: tiles of 16x16, 3x3 filters 4 planes of 2 rows a thread, larger one
      plane of 4 rows a thread;
    - up to 32x32: 32x32 tiles of 4 rows a thread, 2 planes; up to 64x64: one plane; larger:
      32x16 (more blocks in flight);
    - never more rows than the plane has (planes of one row: 1-D layers); several planes only
      where the tile covers the plane (else the same tile, one plane).
    """
    s = problem_sizes(p)
    ho, wo = (s["in"] if p.direction is Direction.BACKWARD_DATA else s["out"])[1:]
    area = ho * wo
    small_filter = tap_count(p) <= 9
    tw = min(32, max(8, pow2_at_least(wo)))
    if area <= 64:
        by, py, pp = (8, 1, 8) if small_filter else (4, 2, 4)
    elif area <= 256:
        by, py, pp = (8, 2, 4) if small_filter else (4, 4, 1)
    elif area <= 1024:
        by, py, pp = 8, 4, 2
    else:
        by, py, pp = (8 if area <= 4096 else 4), 4, 1
    by = min(by, 256 // tw)
    while by * py > max(2, pow2_at_least(ho)):  # short planes: no rows beyond the plane's
        py, by = (py // 2, by) if py > 1 else (py, by // 2)
    if pp > 1:
        return PerfConfig(tw=tw, by=by, py=py, pp=pp)
    return PerfConfig(tw=tw, by=by, py=py)


def default_nhwc_fitted(p: ConvProblem) -> PerfConfig | None:
    """Forward and backward data of 2-D plain depthwise layers with 3x3 or 5x5 filters,
    channels innermost, in 8 channel vectors per block, by rules fitted on every config of
    EfficientNet-B0's and MobileNetV2's depthwise layers (H100, batch 32, both directions;
    docs/performance-gpu-depthwise.md).

    16-bit (44 cases, re-timed on another machine, where the 3x3 exceptions were found
    slower than the general rule): 3x3 on 8-byte vectors in strips of 4 columns x 2 rows
    (1 column at stride 2), but for the gather and stride-1 planes of 56 and more (None:
    the general rule; bf16's gather on planes of 56 and more: 16-byte vectors, H200); 5x5
    on 16-byte vectors in strips of 4 columns x 1 row (2 columns at stride 2), the gather
    one pixel a thread.

    fp32 (44 cases: 1.00-1.11x the best config's time, where the general rule was up to
    2.6x): 3x3 on 16-byte vectors in strips of 4 columns x 2 rows (1 row at stride 2);
    5x5 on 8-byte vectors in strips of 4 x 4 and 16 channel vectors per block; the
    gather one pixel a thread on 16-byte vectors."""
    s = problem_sizes(p)
    fy, fx = s["f"][1:]
    if p.spatial_dims != 2 or s["mult"] != 1 or fy != fx or fx not in (3, 5):
        return None
    widest = vecs(p)[0]
    strided = max(s["s"][1:]) > 1
    gather = role(p)[5]  # strided backward data
    if esize(p) == 4:
        vec = next((v for v in vecs(p) if v <= 4), widest)
        if gather:
            return PerfConfig(vec=vec, pix=1, py=1, ct=8)
        if fx == 5:
            narrow = next((v for v in vecs(p) if v <= 2), widest)
            return PerfConfig(vec=narrow, pix=4, py=4, ct=16)
        return PerfConfig(vec=vec, pix=4, py=1 if strided else 2, ct=8)
    if esize(p) != 2:
        return None
    written = role(p)[1].lengths
    large = min(written[2:]) >= 56
    if fx == 3 and gather and p.dtype is DataType.BFLOAT16 and large and widest == 8:
        # bf16's 3x3 gather on planes of 56 and more: 16-byte vectors, every channel in one
        # block row, 4 blocks an SM: 0.77-0.82x the time of the general rule's 8-byte vectors
        # on all three such layers, in two sessions (H200, batch 64; in fp16, and on smaller
        # planes in bf16, 16-byte vectors were 1.1-2.9x slower)
        return PerfConfig(vec=8, pix=1, py=1, ct=ct_for(written[1], 8), mb=4)
    if fx == 3:
        if gather or (not strided and s["out"][1] >= 56):
            return None  # the general rule was faster (re-timed on another machine)
        vec = next((v for v in vecs(p) if v <= 4), widest)
        return PerfConfig(vec=vec, pix=1 if strided else 4, py=2, ct=8)
    if gather:
        return PerfConfig(vec=widest, pix=1, py=1, ct=8)
    return PerfConfig(vec=widest, pix=2 if strided else 4, py=1, ct=8)


def default_tile(p: ConvProblem) -> PerfConfig | None:
    """Backward weights through ``dw_wrw_tile``: tiles of 4 dy rows by 16 columns (8 at
    stride 2 or on planes of 7 and less), 16 channels per block for 7x7 filters on planes
    of 28 and less, else 32; 3x3 filters in row groups of 4. Refitted after the tiles'
    loads were overlapped with the arithmetic (revision 3) on the 22 3x3 and 5x5 layers of
    EfficientNet-B0 and MobileNetV2 (H200, fp16, batch 32, every tile config timed): 1.02x
    the best tile config's time in geomean, at most 1.06x; the 3x3 layers on planes of
    112, which went to ``dw_wrw``'s register lanes before, run 1.6-2.0x faster here. 64
    channels per block (the earlier rule for 3x3) was 1.16x the best: it leaves threads idle
    on 32, 96 and 144 channels."""
    if not wrw_tile_applies(p):
        return None
    s = problem_sizes(p)
    fx, stride, ow = s["f"][2], max(s["s"][1:]), s["out"][2]
    tq = 8 if ow <= 7 or stride > 1 else 16
    cb = 16 if fx >= 7 and ow <= 28 else 32
    if s["f"][1] == fx == 3:  # row groups of 4: every tap of a channel in one thread
        return PerfConfig(vec=vecs(p)[0], cb=cb, tp=4, tq=tq, pg=4)
    return PerfConfig(vec=vecs(p)[0], cb=cb, tp=4, tq=tq)


def default_tile_tma(p: ConvProblem) -> PerfConfig | None:
    """Backward weights through ``dw_wrw_tile`` staged by the tensor memory accelerator
    (sm_90), in channel vectors ``v`` (8 fp16/bf16, 4 fp32 channels), a block never wider
    than the layer's channels. Fitted on every tile config of MobileNetV2's and
    EfficientNet-B0's 22 layers in fp16 and bf16, MobileNetV2's in fp32 and ConvNeXt-T's 7x7
    in fp16 (H200, batch 64, forty-first session: 58 cases, 1.02x the best config's time in
    geomean, at most 1.11x; the register-staged default it replaces took 1.3-1.7x cuDNN's
    time on planes of 56); MobileNetV3-Large's 12 layers, held out, 1.08x (at most 1.26x on
    16 channels, which the channel cap then took to the best).

    16-bit 3x3 and 5x5: stride 1 on planes of 56 and more in 4-vector blocks, 4 x 16 tiles,
    row groups of 4; from 8 to 55, 8-vector blocks, 2 x 16 tiles, groups of 2; planes of 7,
    8-vector blocks, 4 x 8 tiles, groups of 2 (5x5: 4-vector blocks, no groups). Strided: on
    56 and more, 8-vector blocks, 2 x 8 tiles and 2 channels a thread; smaller, 2 x 8 in
    groups of 2 (4-vector blocks, 4 x 8 in groups of 4, on planes of 7). fp32: 8-vector
    blocks, 2 x 8 tiles strided (2 channels a thread on 56 and more), 4 x 8 at stride 1 on
    planes of 56 and more or 7, else 2 x 16. 7x7: 4-vector blocks, 4 x 8 tiles, 4 channels a
    thread; 2-vector blocks and one channel on planes of 7."""
    if not wrw_tile_applies(p):
        return None
    s = problem_sizes(p)
    fx, strided, ow = s["f"][2], max(s["s"][1:]) > 1, s["out"][2]
    large, small = ow >= 56, ow <= 7
    # (block in channel vectors, tile rows, tile columns, optional keys)
    if fx >= 7:
        pick = (2, 4, 8, {}) if small else (4, 4, 8, {"wv": 4})
    elif esize(p) == 4:
        if strided:
            pick = (8, 2, 8, {"wv": 2} if large else {})
        else:
            pick = (8, 4, 8, {}) if large or small else (8, 2, 16, {})
    elif strided:
        if large:
            pick = (8, 2, 8, {"wv": 2})
        else:
            pick = (4, 4, 8, {"pg": 4}) if small else (8, 2, 8, {"pg": 2})
    elif large:
        pick = (4, 4, 16, {"pg": 4})
    elif small:
        pick = (4, 4, 8, {}) if fx == 5 else (8, 4, 8, {"pg": 2})
    else:
        pick = (8, 2, 16, {"pg": 2})
    vectors, tp, tq, extra = pick
    v = vecs(p)[0]
    vectors = min(vectors, pow2_at_least(-(-s["k"] // v)))  # no lanes past the channels
    return PerfConfig(vec=v, cb=vectors * v, tp=tp, tq=tq, tma=1, **extra)
