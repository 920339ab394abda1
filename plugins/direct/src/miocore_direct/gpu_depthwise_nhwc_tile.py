"""``dw_nhwc_tile``: 2-D channels-innermost depthwise forward and backward data from input
tiles staged in shared memory (``kernels/depthwise_nhwc_tile.cu``).

A config names a block's tile: ``toh`` x ``tow`` outputs for ``ch`` channels, each thread
``vec`` channels x ``pix`` consecutive outputs at a time; optionally ``mb`` (a register cap for
that many blocks per SM), ``nt`` (tiles a block computes in turn, the next one's input
copied asynchronously into a second buffer while this one computes) and ``py`` (output rows
of a thread's strip besides its ``pix`` columns: the strip's rows share the staged rows they
read, so each staged element is loaded and converted once for all of them), and ``tma`` (1: the
tensor memory accelerator stages each tile from a tensor map, CUDA sm_90 and later:
:func:`nhwc_tile_tma_configs`). The kernel answers the
profile of ``dw_nhwc`` on 16-bit 3x3 layers (Nsight Compute, H200, thirty-third session:
latency-bound, 112 registers, 25% occupancy, each input element read about three times
through L1).

Its configs follow ``dw_nhwc``'s in the tuning space (single tiles, then the capped ones in
runs); the default takes a tile only where the timing on the GPU showed it faster
(:func:`default_nhwc_tile`).
"""

from __future__ import annotations

import re

from miocore import ConvProblem, Direction, ExecutionContext, PerfConfig
from miocore_direct.gpu_depthwise_geometry import (
    GRID_YZ_LIMIT,
    INT32_MAX,
    SHARED_LIMIT,
    esize,
    kernel_kind,
    problem_sizes,
    role,
    tap_count,
    tma_aligned,
    tma_box,
    vec_ok,
)

#: The kernel's own program (it shares depthwise_common.h).
NHWC_TILE_SOURCE = "direct/depthwise_nhwc_tile.cu"
#: Threads of a block: ``ch / vec`` channel lanes x the rest pixel lanes.
NHWC_TILE_THREADS = 256
#: Bytes of one staged load (and the alignment both activation tensors need).
NHWC_TILE_CHUNK_BYTES = 16
#: The keys of a tile config, and the optional ones: ``mb`` blocks per SM its registers are
#: capped for (uncapped, the 16-bit 3x3 tiles compile to 80-94 registers: 2 blocks of 256;
#: 4 blocks spill 132 bytes), ``nt`` tiles a block runs in turn (double-buffered).
NHWC_TILE_KEYS = ("vec", "ch", "toh", "tow", "pix")
NHWC_TILE_OPTIONAL_KEYS = ("mb", "nt", "py", "tma")
NHWC_TILE_MIN_BLOCKS = (3, 4)
#: Tiles a block may run in turn (``nt``): they answer the single tile's profile (a block waits
#: for its whole tile before any arithmetic): 1.45x faster than ``dw_nhwc``'s default on
#: 112x112 planes, 1.67x on strided layers (H200, 2026-11-29; :func:`default_nhwc_tile`).
NHWC_TILE_RUNS = (2, 4, 8)
#: A run's channel-tiles (``nt`` x ``ch``) at most: 4 tiles of 64 channels or 8 of 32 were the
#: fastest runs of the layers with the most tiles (8 of 64 was 1.06x slower than 4).
NHWC_TILE_RUN_WORK = 256
#: Blocks a default run keeps at least (about 2.3 per SM of an H200): below that the layers of
#: 14x14 planes ran faster in shorter runs (768 tiles: 2 a block 0.91x ``dw_nhwc``'s time, 4 a
#: block 1.07x).
NHWC_TILE_MIN_RUN_BLOCKS = 300
#: The same for 5x5 tiles, which run uncapped at 2 blocks an SM (264 a wave of an H200): at
#: batch 32 the longest run that kept 240-256 blocks was the fastest on every 5x5 stride-1
#: layer of MobileNetV3-Large and EfficientNet-B0 (0.84-0.87x the time of the shorter runs
#: the 300 floor took; H200, fp16, forty-fifth session).
NHWC_TILE_MIN_RUN_BLOCKS_5X5 = 240
#: Blocks the gather's shortest run keeps at least where no run keeps
#: :data:`NHWC_TILE_MIN_RUN_BLOCKS` (2 an SM of an H200): its 14x14 planes at batch 64 ran 288
#: blocks in 0.65-0.70x ``dw_nhwc``'s time; fewer were not timed.
NHWC_TILE_MIN_SHORT_RUN_BLOCKS = 264
#: Blocks the TMA runs of 4 on written planes of 7 keep at least: they ran 0.75-0.82x
#: ``dw_nhwc``'s time with 240-336 blocks at batch 64 (H200, fortieth session); below one
#: block an SM (smaller batches, not timed) ``dw_nhwc`` stays.
NHWC_TILE_MIN_ANY_RUN_BLOCKS = 132
#: Blocks the runs of 4 of 3x3 stride-1 tiles on written planes of 7 keep at least, else the
#: tile alone: at batch 32 (144 blocks) the runs took 1.23x the single tile's time (576
#: blocks, also 0.81x cuDNN's; dw1152k3s1@7, H200, fp16, forty-fifth session).
NHWC_TILE_MIN_SEVEN_RUN_BLOCKS = 240
#: Blocks the 5x5 runs of 4 on written planes of 7 keep at least (``wave``): dw960k5s1@7 at
#: batch 32 ran 120 blocks in 0.85x ``dw_nhwc``'s time (H200, fp16, forty-fifth session);
#: fewer were not timed.
NHWC_TILE_MIN_WAVE_BLOCKS = 120
#: Blocks the TMA runs of 4 of 5x5 tiles on written planes of 7 keep at most: one wave of 2
#: blocks an SM of an H200 (5x5 tiles run uncapped, about 118 registers). dw960k5s1@7 ran 240
#: blocks in 0.72x ``dw_nhwc``'s time, dw1152k5s1@7 288 (a second wave of 24) in 1.23x, in
#: runs of 2 (576 blocks) 1.06x (batch 64, fp16, forty-second session).
NHWC_TILE_ONE_WAVE_BLOCKS = 264
#: A channel block tried besides 32 and 64 on layers it divides and 64 does not (96, 144, 240,
#: 480, 672: MobileNet's and EfficientNet's 6x expansions): 64-wide blocks leave 144 channels'
#: third block a quarter full. Its 12 channel lanes (4 a thread) give blocks of 12 x 21 = 252
#: threads.
NHWC_TILE_EXACT_CH = 48
#: Output tiles tried, (rows, columns), best guesses first.
NHWC_TILE_SHAPES = ((8, 16), (4, 32), (8, 8), (16, 16), (4, 16), (2, 32))
#: Output rows of a thread's strip tried besides one (``py``, as ``dw_nhwc``'s; not in the
#: gather, whose strips are one phase of the stride): on a 3x3 layer a 2 x 4 strip loads and
#: converts 3 staged elements a channel an output where a 1 x 4 strip loads 4.5 and a 1 x 2
#: strip 6, for the same 9 multiply-adds (the fp16 forward tiles were issue-bound: Nsight
#: Compute, H200, thirty-sixth session).
NHWC_TILE_STRIP_ROWS = (2,)


def is_nhwc_tile(cfg: PerfConfig) -> bool:
    return "toh" in cfg


def tma_available(ctx: ExecutionContext) -> bool:
    """Whether the device has the tensor memory accelerator: CUDA, sm_90 or later."""
    arch = re.fullmatch(r"sm_?(\d+)a?", ctx.device.arch)
    return ctx.backend == "cuda" and arch is not None and int(arch.group(1)) >= 90


def nhwc_tile_tma_configs(p: ConvProblem) -> list[PerfConfig]:
    """Every tile config of :func:`nhwc_tile_configs` again with ``tma`` (its staging by the
    tensor memory accelerator), where it still fits."""
    twins = (PerfConfig(**c, tma=1) for c in nhwc_tile_configs(p))
    return [c for c in twins if nhwc_tile_fits(p, c)]


def nhwc_tile_tma_box(p: ConvProblem, cfg: PerfConfig) -> tuple[tuple[int, ...], ...]:
    """The 4-D tensor map of the read tensor a TMA tile config copies from, innermost first:
    (dims (C, W, H, N), byte strides of W, H and N, box (channels, staged columns and rows, one
    image))."""
    rows, cols = nhwc_tile_staged(p, cfg)
    return tma_box(role(p)[0], esize(p), cfg["ch"], rows, cols)


#: Taps at most: a thread keeps every tap of its ``vec`` channels in registers (3x3: 36 floats
#: at 4 channels a thread; 5x5: 50 at 2; 7x7: 49 at 1).
NHWC_TILE_MAX_TAPS = 49
#: Taps up to which a thread takes 4 channels; above, 2 (so that a 5x5 filter's taps, 50
#: floats, leave registers for the strip's sums and loads).
NHWC_TILE_VEC4_TAPS = 9
#: Taps up to which a thread takes 2 channels; above, 1 (a 7x7 filter's 49 taps: as many
#: registers as a 5x5 filter's at 2 channels).
NHWC_TILE_VEC2_TAPS = 25


def nhwc_tile_vec(p: ConvProblem) -> int:
    """Channels a thread computes: 4, 2 for filters of more than 9 taps, 1 for more than 25."""
    taps = tap_count(p)
    return 4 if taps <= NHWC_TILE_VEC4_TAPS else 2 if taps <= NHWC_TILE_VEC2_TAPS else 1


def nhwc_tile_applies(p: ConvProblem) -> bool:
    """2-D, channels innermost in whole 16-byte chunks, plain depthwise, forward or backward
    data (strided: the gather), filters of at most :data:`NHWC_TILE_MAX_TAPS` taps."""
    if kernel_kind(p) != "nhwc" or p.spatial_dims != 2 or tap_count(p) > NHWC_TILE_MAX_TAPS:
        return False
    _, _, r, m, _, _ = role(p)
    return r == 1 and m == 1 and vec_ok(p, NHWC_TILE_CHUNK_BYTES // esize(p))


def nhwc_tile_staged(p: ConvProblem, cfg: PerfConfig) -> tuple[int, int]:
    """(rows, columns) of the input a tile of ``toh`` x ``tow`` outputs reads (the gather: of
    dy, every position its dx outputs reach)."""
    s = problem_sizes(p)
    (_, fy, fx), (_, sh, sw), (_, dh, dw) = s["f"], s["s"], s["d"]
    toh, tow = cfg["toh"], cfg["tow"]
    if role(p)[5]:
        return (toh - 2 + (fy - 1) * dh + sh) // sh + 1, (tow - 2 + (fx - 1) * dw + sw) // sw + 1
    return (toh - 1) * sh + (fy - 1) * dh + 1, (tow - 1) * sw + (fx - 1) * dw + 1


def nhwc_tile_shared_bytes(p: ConvProblem, cfg: PerfConfig) -> int:
    """Static shared memory of a block: the staged input, twice where it runs several tiles
    (TMA: each buffer rounded up to 128 bytes, and an 8-byte mbarrier a buffer)."""
    rows, cols = nhwc_tile_staged(p, cfg)
    buffers = 2 if cfg.get("nt", 1) > 1 else 1
    staged = rows * cols * cfg["ch"] * esize(p)
    if cfg.get("tma"):
        return buffers * (tma_aligned(staged) + 8)
    return buffers * staged


def nhwc_tile_grid(p: ConvProblem, cfg: PerfConfig) -> tuple[int, int, int]:
    """(tiles along W, tiles per image, channel blocks) of the written tensor."""
    b = role(p)[1]
    bh, bw = b.lengths[2:]
    tiles_w = -(-bw // cfg["tow"])
    return tiles_w, tiles_w * -(-bh // cfg["toh"]), -(-b.lengths[1] // cfg["ch"])


#: Channel blocks first in launch order (``MIO_CFAST``): one run of tiles' channel blocks are
#: neighbours, so the DRAM granules and promoted L2 lines their channels share are read once
#: while all of them run, where tiles first reads them again a whole sweep of the tensor later
#: (dw144s1@56's 48-channel blocks read 1.27x cuDNN's DRAM bytes; Nsight Compute, forty-first
#: session). Timed (``gpu_depthwise_bench.py --channel-blocks-first``; fp16, batch 64, H200,
#: forty-second session): the best TMA tile 0.885x its time on MobileNetV2's and
#: EfficientNet-B0's 22 depthwise layers, forward, 0.935x backward data; cp.async tiles 1.00x.
NHWC_TILE_CHANNELS_FIRST = True


def nhwc_tile_launch_grid(p: ConvProblem, cfg: PerfConfig) -> tuple[tuple[int, int], bool]:
    """``dw_nhwc_tile``'s grid and whether its channel blocks come first (one dimension:
    :data:`NHWC_TILE_CHANNELS_FIRST`, where the blocks stay within the grid's x limit), else
    runs of tiles along x and channel blocks along y."""
    runs, blocks = nhwc_tile_blocks_x(p, cfg), nhwc_tile_grid(p, cfg)[2]
    if NHWC_TILE_CHANNELS_FIRST and runs * blocks <= INT32_MAX:
        return (runs * blocks, 1), True
    return (runs, blocks), False


def nhwc_tile_blocks_x(p: ConvProblem, cfg: PerfConfig) -> int:
    """Blocks along the grid's x: every image's tiles in runs of ``nt``."""
    return -(-role(p)[1].lengths[0] * nhwc_tile_grid(p, cfg)[1] // cfg.get("nt", 1))


def nhwc_tile_fits(p: ConvProblem, cfg: PerfConfig) -> bool:
    """Whether ``cfg`` is a tile this problem can run: the kernel applies, the lanes divide the
    block, the staged tile fits in static shared memory, the grid in its limits."""
    if not nhwc_tile_applies(p):
        return False
    vec, ch, tow, pix = cfg["vec"], cfg["ch"], cfg["tow"], cfg["pix"]
    rows = cfg.get("py", 1)
    chunk = NHWC_TILE_CHUNK_BYTES // esize(p)
    lanes = ch // max(1, vec)
    strip = pix * (problem_sizes(p)["s"][2] if role(p)[5] else 1)  # the gather: a phase's
    if not vec_ok(p, vec) or ch % chunk or ch % vec or tow % strip:
        return False
    if cfg["toh"] % rows or (rows > 1 and role(p)[5]):  # the gather's strips: one row
        return False
    if lanes > NHWC_TILE_THREADS:  # lanes not dividing 256 leave a few threads out
        return False
    if nhwc_tile_shared_bytes(p, cfg) > SHARED_LIMIT:
        return False
    _, tiles, blocks = nhwc_tile_grid(p, cfg)
    return role(p)[1].lengths[0] * tiles <= INT32_MAX and blocks <= GRID_YZ_LIMIT


def nhwc_tile_configs(p: ConvProblem) -> list[PerfConfig]:
    """Every tile config that fits ``p``: 4 channels a thread, 2 for filters of more than 9
    taps, 1 for 7x7 (the filter's taps stay in registers: :func:`nhwc_tile_vec`); blocks of 32 or 64
    channels (16 where the
    layer has fewer; also 48 where that divides the channels and 64 does not); 2 or 4 outputs
    a thread (and, outside the gather, in strips of :data:`NHWC_TILE_STRIP_ROWS` rows); then
    each again with its registers capped; then the tiles capped for 3 blocks
    in runs of 2, 4 and 8 (at most :data:`NHWC_TILE_RUN_WORK` channel-tiles a run) whose two
    buffers fit. Filters of more than 9 taps: no caps (they spill)."""
    if not nhwc_tile_applies(p):
        return []
    vec = nhwc_tile_vec(p)
    channels = role(p)[1].lengths[1]
    out = []
    widths = (32, 64) if channels > 16 else (16,)
    if channels % NHWC_TILE_EXACT_CH == 0 and channels % 64:
        widths += (NHWC_TILE_EXACT_CH,)
    for toh, tow in NHWC_TILE_SHAPES:
        for ch in widths:
            for pix in (2, 4):
                cfg = PerfConfig(vec=vec, ch=ch, toh=toh, tow=tow, pix=pix)
                if nhwc_tile_fits(p, cfg):
                    out.append(cfg)
    # strips of several rows after the single-row ones (the order the defaults were timed in)
    out += [
        tall
        for rows in NHWC_TILE_STRIP_ROWS
        for c in out
        if nhwc_tile_fits(p, tall := PerfConfig(**c, py=rows))
    ]
    # Filters of more than 9 taps keep 50 floats of taps: capped for 3 or 4 blocks (80 or 64
    # registers) they spilled 32-300 bytes a thread (NVRTC, sm_90), so they run uncapped (about
    # 118 registers: 2 blocks an SM), in runs too.
    wide = tap_count(p) > NHWC_TILE_VEC4_TAPS
    caps = () if wide else NHWC_TILE_MIN_BLOCKS
    capped = [PerfConfig(**c, mb=mb) for mb in caps for c in out]
    run_cap = {} if wide else {"mb": NHWC_TILE_MIN_BLOCKS[0]}
    runs = [
        PerfConfig(**c, **run_cap, nt=nt)
        for nt in NHWC_TILE_RUNS
        for c in out
        if nt * c["ch"] <= NHWC_TILE_RUN_WORK
    ]
    return out + capped + [r for r in runs if nhwc_tile_fits(p, r)]


def _default_tile(p: ConvProblem, tma: bool) -> tuple[PerfConfig, int, str] | None:
    """The single tile of :func:`default_nhwc_tile`, the shortest run it takes and what runs
    where no run keeps :data:`NHWC_TILE_MIN_RUN_BLOCKS` blocks (``single``: the tile alone,
    ``shortest``: the shortest run where it keeps :data:`NHWC_TILE_MIN_SHORT_RUN_BLOCKS`,
    else the tile alone, ``any``: the shortest run where it keeps
    :data:`NHWC_TILE_MIN_ANY_RUN_BLOCKS`, ``seven``: runs where they keep
    :data:`NHWC_TILE_MIN_SEVEN_RUN_BLOCKS`, else the tile alone, ``alone``: the tile alone,
    never in runs, where it keeps :data:`NHWC_TILE_MIN_ANY_RUN_BLOCKS`, ``wave``: only the
    shortest run, where its blocks are between :data:`NHWC_TILE_MIN_WAVE_BLOCKS` and
    :data:`NHWC_TILE_ONE_WAVE_BLOCKS`, ``none``: ``dw_nhwc``); None where ``dw_nhwc``
    stays. ``tma``: the device stages tiles by the tensor memory accelerator."""
    s = problem_sizes(p)
    square = s["f"][1] == s["f"][2]
    sizes = (3, 5, 7) if tma else (3, 5)  # 7x7 timed by TMA only
    if not nhwc_tile_applies(p) or esize(p) != 2 or not square or s["f"][1] not in sizes:
        return None
    written = role(p)[1].lengths
    if max(s["d"][1:]) != 1 or min(written[2:]) < (7 if tma else 14):
        return None
    plane, stride, wide = max(written[2:]), max(s["s"][1:]), s["f"][1] == 5
    exact = written[1] % NHWC_TILE_EXACT_CH == 0 and written[1] % 64 != 0
    cap = {} if s["f"][1] >= 5 else {"mb": NHWC_TILE_MIN_BLOCKS[0]}  # capped 5x5 spills
    tile = {"vec": nhwc_tile_vec(p), **cap}
    staged = {"tma": 1} if tma else {}
    if s["f"][1] == 7:  # stride 1 by TMA: 64 channels in strips of 2 x 4, no runs
        if stride != 1:
            return None
        ch, tow = 32 if written[1] <= 32 else 64, 8 if plane < 14 else 16
        return PerfConfig(**tile, **staged, py=2, ch=ch, toh=8, tow=tow, pix=4), 1, "alone"
    if role(p)[5]:  # the gather: 16 x 16 tiles of dx
        if plane < 14:
            return None
        ch = 32 if plane >= 112 else NHWC_TILE_EXACT_CH if exact and plane >= 56 else 64
        return PerfConfig(**tile, **staged, ch=ch, toh=16, tow=16, pix=4), 2, "shortest"
    if plane < 14:  # TMA only: 8 x 8 tiles, one a plane, in runs of 4
        if wide and stride == 1:  # 64 channels in strips of 2 rows, within one wave
            return PerfConfig(**tile, **staged, py=2, ch=64, toh=8, tow=8, pix=4), 4, "wave"
        ch = 32 if stride == 2 else 64
        pix, rows = (2, {"py": 2}) if wide else (4 if stride == 1 else 2, {})
        sparse = "seven" if stride == 1 and not wide else "any"
        return PerfConfig(**tile, **staged, **rows, ch=ch, toh=8, tow=8, pix=pix), 4, sparse
    if stride == 2 and p.direction is Direction.FORWARD:
        return PerfConfig(**tile, **staged, ch=32, toh=8, tow=8, pix=4 if wide else 2), 2, "none"
    if stride != 1:
        return None
    if wide:
        rows = {"py": 2} if tma else {}
        return PerfConfig(**tile, **staged, **rows, ch=32, toh=8, tow=16, pix=4), 2, "none"
    if plane >= 112:
        if tma and written[1] <= 16:  # a block of 16 channels, strips of 2 x 2
            return PerfConfig(**tile, **staged, py=2, ch=16, toh=16, tow=16, pix=2), 2, "none"
        return PerfConfig(**tile, **staged, ch=32, toh=16, tow=16, pix=4), 2, "none"
    if plane >= 56 and exact:  # strips of 2 rows
        strips = PerfConfig(**tile, **staged, py=2, ch=NHWC_TILE_EXACT_CH, toh=8, tow=16, pix=2)
        return strips, 2, "none"
    ch = 32 if written[1] <= 32 else 64
    single = PerfConfig(**tile, **staged, ch=ch, toh=8, tow=16, pix=4)
    return (single, 1, "single") if plane <= 28 else (single, 2, "none")


def default_nhwc_tile(p: ConvProblem, tma: bool = False) -> PerfConfig | None:
    """The default where staged tiles were faster than ``dw_nhwc``'s default, else None.

    16-bit 3x3 and 5x5 layers whose written plane is at least 14 a side (7 with ``tma``, the
    tensor memory accelerator staging the tiles: CUDA sm_90 and later), 3x3 tiles capped for
    3 blocks an SM (5x5 uncapped: capped they spill), in runs as long as the run's
    channel-tiles allow (:data:`NHWC_TILE_RUN_WORK`) while the grid keeps
    :data:`NHWC_TILE_MIN_RUN_BLOCKS` blocks, shorter runs otherwise (:func:`_default_tile`
    names each tile):

    - stride 1, 3x3: on planes of 112 and more 16 x 16 outputs, 4 a thread, 32 channels; on
      planes of 56 and more whose channels 48 divides and 64 does not, 8 x 16 in strips of 2
      x 2, 48 channels (64-wide blocks leave a quarter of the lanes idle there); else 8 x 16,
      4 a thread, 64 channels (32 on layers of at most 32), a single tile where no run keeps
      the blocks on planes up to 28; 5x5: 8 x 16, 4 a thread (with ``tma`` in strips of 2
      rows), 32 channels;
    - stride 2 forward: 8 x 8 outputs, 2 a thread (5x5: 4), 32 channels;
    - stride 2 backward data (the gather): 16 x 16 of dx, 4 a thread, 32 channels on planes
      of 112, 48 on planes of 56 where 48 divides and 64 does not, else 64; the shortest run
      where no run keeps the blocks;
    - with ``tma``, each of these staged by the accelerator; layers of at most 16 channels on
      planes of 112 in 16-channel blocks, strips of 2 x 2; and written planes of 7 too: 8 x 8
      tiles in runs of 4 (3x3 stride 1: 64 channels, 4 a thread; strided: 32 channels, 2 a
      thread, 5x5 in strips of 2 rows; 5x5 stride 1: 64 channels, strips of 2 x 4, only where
      the runs fill one wave, :data:`NHWC_TILE_ONE_WAVE_BLOCKS`); 7x7 stride 1: 8 x 16 tiles
      (8 x 8 on planes of 7), strips of 2 x 4, 64 channels (32 on layers of at most 32), one
      tile a block, where that makes a block an SM (smaller launches were not timed);
    - where the runs keep too few blocks (small batches): the gather and 3x3 stride-1 tiles on
      planes of 7 alone, while that keeps a block an SM; 5x5 runs as long as they keep
      :data:`NHWC_TILE_MIN_RUN_BLOCKS_5X5`.

    Timed on an H200 (batch 64, MobileNetV2's and EfficientNet-B0's depthwise layers, every
    run of the space; docs/performance-gpu-depthwise.md): without TMA (2026-11-29,
    thirty-seventh session, fp16 and bf16) the gather took 0.41-0.70x the time of
    ``dw_nhwc``'s default, the 5x5 layers 0.83-0.91x, the large stride-1 planes 0.88-0.90x;
    the TMA twins (fortieth session, fp16) 0.82x the non-TMA defaults' time, 0.80x on planes
    of 7 against ``dw_nhwc``; launched channel blocks first with narrow L2 promotion
    (forty-second session, fp16) the TMA twin the faster on every layer, 0.78-0.84x on the
    strided forward planes of 56 and more and the 48-channel strips it had lost on; every
    tile of MobileNetV3-Large's dw16k3s1@112 and dw960k5s1@7, where ``dw_nhwc`` had stayed:
    the 16-channel strips 0.58x its time, the 5x5 runs 0.72x; ConvNeXt-T's 7x7 layers
    (forty-third session, fp16 and bf16, every 7x7 tile): 0.58-0.81x ``dw_nhwc``'s time,
    1.00-1.14x the best tile's; at batch 32 (forty-fifth session, MobileNetV3-Large and
    EfficientNet-B0, fp16, every run length and channel block of the batch-64 tiles) the
    gather alone 0.50x ``dw_nhwc``'s time, the 5x5 runs kept from 240 blocks 0.84-0.87x the
    shorter ones; batches 8 and 16 on every layer these rules took from ``dw_nhwc``:
    0.41-0.99x its time."""
    picked = _default_tile(p, tma)
    if picked is None:
        return None
    single, shortest, sparse = picked
    if sparse == "alone":  # timed at batch 64 only: below a block an SM dw_nhwc stays
        fit = nhwc_tile_fits(p, single) and _blocks(p, single) >= NHWC_TILE_MIN_ANY_RUN_BLOCKS
        return single if fit else None
    runs = [
        PerfConfig(**single, nt=nt)
        for nt in sorted(NHWC_TILE_RUNS, reverse=True)
        if nt * single["ch"] <= NHWC_TILE_RUN_WORK and nt >= shortest
    ]
    runs = [run for run in runs if nhwc_tile_fits(p, run)]
    if sparse == "wave":  # the shortest run, where its blocks fill one wave and no more
        blocks = _blocks(p, runs[-1]) if runs else 0
        fit = NHWC_TILE_MIN_WAVE_BLOCKS <= blocks <= NHWC_TILE_ONE_WAVE_BLOCKS
        return runs[-1] if fit else None
    if sparse == "seven":
        floor = NHWC_TILE_MIN_SEVEN_RUN_BLOCKS
    else:
        wide = problem_sizes(p)["f"][1] == 5
        floor = NHWC_TILE_MIN_RUN_BLOCKS_5X5 if wide else NHWC_TILE_MIN_RUN_BLOCKS
    for run in runs:
        if _blocks(p, run) >= floor:
            return run
    if sparse == "single" and nhwc_tile_fits(p, single):
        return single
    if sparse == "shortest" and runs and _blocks(p, runs[-1]) >= NHWC_TILE_MIN_SHORT_RUN_BLOCKS:
        return runs[-1]
    if sparse == "any" and runs and _blocks(p, runs[-1]) >= NHWC_TILE_MIN_ANY_RUN_BLOCKS:
        return runs[-1]
    alone = sparse in ("shortest", "seven") and nhwc_tile_fits(p, single)
    if alone and _blocks(p, single) >= NHWC_TILE_MIN_ANY_RUN_BLOCKS:
        return single  # fewer blocks than a run needs (small batches): the tile alone
    return None


def _blocks(p: ConvProblem, cfg: PerfConfig) -> int:
    """Blocks of a launch of ``cfg``: runs of tiles times channel blocks."""
    return nhwc_tile_blocks_x(p, cfg) * nhwc_tile_grid(p, cfg)[2]


def nhwc_tile_valid(p: ConvProblem, config: PerfConfig) -> bool:
    """A tile config with exactly its keys (``mb`` and ``nt`` optional), sane values, that
    fits ``p``."""
    keys = (*NHWC_TILE_KEYS, *(k for k in NHWC_TILE_OPTIONAL_KEYS if k in config))
    if set(config) != set(keys):
        return False
    try:
        values = {k: int(config[k]) for k in keys}
    except (TypeError, ValueError):
        return False
    if values.get("mb", NHWC_TILE_MIN_BLOCKS[0]) not in NHWC_TILE_MIN_BLOCKS:
        return False
    if values.get("nt", NHWC_TILE_RUNS[0]) not in NHWC_TILE_RUNS:
        return False
    if values.get("py", NHWC_TILE_STRIP_ROWS[0]) not in NHWC_TILE_STRIP_ROWS:
        return False
    if values.get("tma", 1) != 1:
        return False
    if any(v < 1 for v in values.values()) or values["toh"] > 64 or values["tow"] > 64:
        return False
    if values["vec"] > 8 or values["pix"] > 8 or values["ch"] > NHWC_TILE_THREADS:
        return False
    return nhwc_tile_fits(p, PerfConfig(**values))
