"""``direct.gpu_depthwise``: direct GPU kernels for depthwise convolutions.

Applies when every group has one input channel (``groups == C``, filter ``(M*C, 1, ...)``):
plain depthwise (``M == 1``) and channel multipliers ``M > 1``; 2-D and 3-D; any filter size,
stride, dilation and padding; fp32/fp16/bf16 with fp32 accumulation; every direction.
``kernels/depthwise.cu`` holds the kernels (its header comment gives the index algebra):

- channels innermost (NHWC / NDHWC): ``dw_nhwc``, threads over channel vectors (``vec``
  channels in one 4/8/16-byte access), each thread ``py`` x ``pix`` consecutive output rows x
  columns whose input rows and columns are loaded once, the filter in registers (or, when
  the thread's taps do not fit, staged once per block in shared memory); ``ct`` channel
  vectors per block.
- channels outer (NCHW / NCDHW): ``dw_nchw``, one block per (image, channel, depth) plane tile
  of ``tw`` x ``by * py`` outputs with the input tile and its halo staged in shared memory.
- backward data at stride 1 is a forward convolution of dy with the flipped filter; at a
  larger stride the kernels gather: every dx element sums the taps whose dy position is whole
  and in range (no atomics).
- backward weights (``dw_wrw``): per channel a reduction over ``N * Do * Ho * Wo`` for every
  tap, in registers, then over the block's pixel lanes in shared memory in a fixed order;
  ``split`` blocks along the reduction write float partials to the workspace that
  ``dw_wrw_reduce`` sums in split order. Results are deterministic.
- backward weights of 2-D channels-innermost plain depthwise layers (``dw_wrw_tile``, configs
  with ``cb``, ``tp``, ``tq``): per item a ``tp`` x ``tq`` tile of dy and the x it reaches are
  staged in shared memory for ``cb`` channels; each thread keeps one filter row of one channel
  and walks the tile (each dy value feeds a filter row's taps). The default for every such
  layer but 3x3 ones on large planes (``_default_tile``); same partials and reduction.

Filter, strides and dilations are compile-time (one compile per filter geometry, element type
and config); sizes and padding are kernel arguments.
"""

from __future__ import annotations

import math
from typing import Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    Direction,
    ExecutionContext,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore.backends.gpu_kernels import (
    DTYPE_OPTIONS,
    GPU_BACKENDS,
    KernelArgs,
    channels_last,
    tensor5_bytes,
)
from miocore_direct.gpu_depthwise_geometry import (
    GRID_YZ_LIMIT,
    INT32_MAX,
    MAX_TILE_GROUP_TAPS,
    PARAM_FIELDS,
    SHARED_LIMIT,
    ct_for,
    dims3,
    esize,
    filter_storage,
    is_tile,
    kernel_info,
    kernel_kind,
    kernel_pads,
    nchw_shared_bytes,
    pack_params,
    pow2_at_least,
    problem_sizes,
    reduce_kernel,
    role,
    tap_count,
    vec_ok,
    vecs,
    wrw_items,
    wrw_taps_per_block,
    wrw_tile_applies,
    wrw_tile_items,
    wrw_tile_shared_bytes,
    wrw_tile_x_pixels,
)


class GpuDepthwiseSolver(TunableSolver):
    """Depthwise (and channel-multiplier) convolutions on CUDA and HIP devices."""

    name = "direct.gpu_depthwise"
    numerical_notes = frozenset()
    #: 1: backward weights through staged tiles and the 16-bit forward/backward-data defaults
    #: refitted (2026-11-26); 2: the fp32 ones refitted (2026-11-26); 3: backward weights'
    #: partials summed by split lanes, the tiles' loads overlapped with the previous tile's
    #: arithmetic (2026-11-27): entries recorded before run today's defaults instead.
    revision = 3
    algorithm = Algorithm.DIRECT
    backends = GPU_BACKENDS

    # -- applicability and configs -----------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """One input channel per group (``groups == C``, ``K`` a multiple of ``C``), sizes
        that fit 32-bit indices, and a config whose tiles fit in shared memory."""
        p = problem
        c, k = p.x.lengths[1], p.y.lengths[1]
        if p.groups != c or p.w.lengths[1] != 1:
            return not_applicable(
                f"not depthwise: groups={p.groups}, C={c}, filter channels per group="
                f"{p.w.lengths[1]} (needs groups == C, one channel per group)"
            )
        if k % c:
            return not_applicable(f"K={k} is not a multiple of C={c}")
        for name in ("x", "y"):
            t = getattr(p, name)
            pixels = math.prod(t.lengths) // max(1, t.lengths[1])
            if pixels > INT32_MAX or max(t.lengths) > INT32_MAX:
                return not_applicable(
                    f"{name} has {pixels} pixels (N x spatial): beyond 32-bit indices"
                )
        if not self.perf_config_space(ctx, p):
            return not_applicable("no tile of this filter/dilation fits in 48 KiB shared memory")
        return APPLICABLE

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Per kernel: nhwc ``vec`` x ``pix`` x ``ct``; nchw ``tw`` x ``by`` x ``py`` tiles;
        backward weights ``vec`` x ``ct``. Best guesses first."""
        p = problem
        kind = kernel_kind(p)
        s = problem_sizes(p)
        out: list[PerfConfig] = []
        if kind == "nhwc":
            written = p.x.lengths[1] if p.direction is Direction.BACKWARD_DATA else s["k"]
            gather = role(p)[5]
            for vec in vecs(p):
                for pix in (1,) if gather else (2, 1, 4):
                    for py in (1,) if gather else (4, 2, 1):
                        for ct in dict.fromkeys((ct_for(written, vec), 8, 16, 32)):
                            cfg = PerfConfig(vec=vec, pix=pix, py=py, ct=ct)
                            if self._fits(p, cfg):
                                out.append(cfg)
        elif kind == "nchw":
            for tw in (32, 16, 8):
                for by in (8, 4, 16, 2):
                    for py in (1, 2, 4):
                        cfg = PerfConfig(tw=tw, by=by, py=py)
                        if self._fits(p, cfg):
                            out.append(cfg)
        else:
            if wrw_tile_applies(p):
                for vec in vecs(p)[:1]:  # the widest (a scalar twin is always built)
                    for cb in (32, 64, 16):
                        for tp in (2, 1, 4):
                            for tq in (32, 16, 8):
                                cfg = PerfConfig(vec=vec, cb=cb, tp=tp, tq=tq)
                                if self._fits(p, cfg):
                                    out.append(cfg)
                # row groups: every tap in a thread (filters up to 5x5: its registers)
                for vec in vecs(p)[:1] if tap_count(p) <= MAX_TILE_GROUP_TAPS else ():
                    for cb in (32, 64):
                        for tp in (4, 2):
                            for tq in (16, 8, 32):
                                for pg in (4, 2):
                                    cfg = PerfConfig(vec=vec, cb=cb, tp=tp, tq=tq, pg=pg)
                                    if self._fits(p, cfg):
                                        out.append(cfg)
            cl = channels_last(p.x)
            for vec in vecs(p) if cl else [1]:
                strips = wrw_taps_per_block(p, vec) == tap_count(
                    p
                )  # strips need every tap in one block
                cts = dict.fromkeys((ct_for(s["k"], vec), 8, 16, 32) if cl else (1,))
                for pix in (2, 1) if strips else (1,):
                    for py in (4, 2, 1) if strips else (1,):
                        for ct in cts:
                            cfg = PerfConfig(vec=vec, ct=ct, py=py, pix=pix)
                            if self._fits(p, cfg):
                                out.append(cfg)
        return out

    def _fits(self, p: ConvProblem, cfg: PerfConfig) -> bool:
        kind = kernel_kind(p)
        s = problem_sizes(p)
        if kind == "nchw":
            if cfg["tw"] * cfg["by"] > 256 or nchw_shared_bytes(p, cfg) > SHARED_LIMIT:
                return False
            return self._nchw_tiles(p, cfg)[2] <= GRID_YZ_LIMIT
        if is_tile(cfg):
            vec, cb, pg = cfg["vec"], cfg["cb"], cfg.get("pg", 0)
            if pg and not (
                pg <= cfg["tp"]
                and cb >= 32  # a warp holds one row group: its rows' branch is uniform
                and tap_count(p) <= MAX_TILE_GROUP_TAPS
                and pg * tap_count(p) <= wrw_tile_x_pixels(p, cfg)  # the groups' sums fit
            ):
                return False
            return (
                wrw_tile_applies(p)
                and vec_ok(p, vec)
                and cb % vec == 0
                and cb * (pg or s["f"][1]) <= 1024
                and wrw_tile_shared_bytes(p, cfg) <= SHARED_LIMIT
                and wrw_tile_items(p, cfg) <= INT32_MAX
                and -(-s["k"] // cb) <= GRID_YZ_LIMIT
            )
        vec, ct = cfg["vec"], cfg["ct"]
        if not vec_ok(p, vec) or not 1 <= ct <= 256:
            return False
        written = p.x.lengths[1] if p.direction is Direction.BACKWARD_DATA else s["k"]
        if -(-written // (vec * ct)) > GRID_YZ_LIMIT:
            return False
        if kind == "nhwc":
            return (cfg["pix"] == 1 and cfg["py"] == 1) or not role(p)[5]
        if (cfg["py"] > 1 or cfg["pix"] > 1) and wrw_taps_per_block(p, vec) != tap_count(p):
            return False
        return -(-tap_count(p) // wrw_taps_per_block(p, vec)) <= GRID_YZ_LIMIT

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """nhwc: vectors of at most 4 channels (16-byte fp32, 8-byte fp16: the filter and
        accumulators stay in registers), 4 rows x 2 columns per thread at stride 1, all channels
        of a small layer in one block row (8 channel vectors where the taps go to shared
        memory); nchw: tile width by the output width (32/16/8), 256 threads, 4 rows per
        thread on tall planes; backward weights (channels innermost): vectors of at most 2
        channels that keep every tap in one block, 1 x 2 strips, 8 or 16 channel vectors."""
        p = problem
        space = self.perf_config_space(ctx, p)
        if not space:
            return PerfConfig(vec=1, pix=1, ct=32)
        kind = kernel_kind(p)
        s = problem_sizes(p)
        if kind == "nchw":
            wo, ho = (s["in"] if p.direction is Direction.BACKWARD_DATA else s["out"])[1:]
            tw = 32 if wo >= 24 else 16 if wo >= 12 else 8
            by = min(256 // tw, pow2_at_least(ho))
            py = 4 if ho >= 32 else 2 if ho >= 16 else 1
            want = PerfConfig(tw=tw, by=by, py=py)
        elif kind == "nhwc":
            fitted = self._default_nhwc_fitted(p)
            if fitted is not None and fitted in space:
                return fitted
            written = p.x.lengths[1] if p.direction is Direction.BACKWARD_DATA else s["k"]
            vec = next(v for v in vecs(p) if v <= 4)  # 8-byte fp16 vectors: fewer registers
            gather = role(p)[5]
            pix = 2 if s["s"][2] == 1 and not gather else 1
            ho = s["out"][1]
            py = 1 if gather else 4 if ho >= 12 else 2 if ho >= 4 else 1
            ct = ct_for(written, vec)
            if not filter_storage(role(p)[2] * tap_count(p), vec, ct)[0]:
                # Taps staged in shared memory: 8 channel vectors by 32 pixel lanes was the
                # fastest block on every ConvNeXt-T 7x7 layer (H200, fp16, 1.2-1.6x over all
                # channels in one block row; docs/performance.md).
                ct = min(ct, 8)
            want = PerfConfig(vec=vec, pix=pix, py=py, ct=ct)
        else:
            tile = self._default_tile(p)
            if tile is not None and tile in space:
                return tile
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

    @staticmethod
    def _default_nhwc_fitted(p: ConvProblem) -> PerfConfig | None:
        """Forward and backward data of 2-D plain depthwise layers with 3x3 or 5x5 filters,
        channels innermost, in 8 channel vectors per block, by rules fitted on every config of
        EfficientNet-B0's and MobileNetV2's depthwise layers (H100, batch 32, both directions;
        docs/performance-gpu-depthwise.md).

        16-bit (44 cases, re-timed on another machine, where the 3x3 exceptions were found
        slower than the general rule): 3x3 on 8-byte vectors in strips of 4 columns x 2 rows
        (1 column at stride 2), but for the gather and stride-1 planes of 56 and more (None:
        the general rule); 5x5 on 16-byte vectors in strips of 4 columns x 1 row (2 columns at
        stride 2), the gather one pixel a thread.

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
        if fx == 3:
            if gather or (not strided and s["out"][1] >= 56):
                return None  # the general rule was faster (re-timed on another machine)
            vec = next((v for v in vecs(p) if v <= 4), widest)
            return PerfConfig(vec=vec, pix=1 if strided else 4, py=2, ct=8)
        if gather:
            return PerfConfig(vec=widest, pix=1, py=1, ct=8)
        return PerfConfig(vec=widest, pix=2 if strided else 4, py=1, ct=8)

    @staticmethod
    def _default_tile(p: ConvProblem) -> PerfConfig | None:
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

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """A config with this kernel's keys, sane values, that fits the problem."""
        keys = {
            "nhwc": ("vec", "pix", "py", "ct"),
            "nchw": ("tw", "by", "py"),
            "wrw": ("vec", "ct", "py", "pix"),
        }
        kind = kernel_kind(problem)
        if kind == "wrw" and "cb" in config:
            keys["wrw"] = (
                ("vec", "cb", "tp", "tq", "pg") if "pg" in config else ("vec", "cb", "tp", "tq")
            )
        try:
            values = {k: int(config[k]) for k in keys[kind]}
        except (KeyError, TypeError, ValueError):
            return False
        if any(v < 1 or v > 256 for v in values.values()):
            return False
        if any(values.get(k, 1) > 8 for k in ("pix", "vec", "py", "tp", "pg")):
            return False
        return self._fits(problem, PerfConfig(**values))

    # -- cost ----------------------------------------------------------------------------------

    def _split(self, ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig) -> int:
        """Backward-weights blocks along the reduction: about 4 blocks per compute unit, at
        least 16 pixels per thread."""
        if is_tile(cfg):
            # about 4 blocks per compute unit, each at least 2 tiles
            blocks = -(-p.y.lengths[1] // cfg["cb"])
            wanted = -(-4 * max(1, ctx.device.compute_units) // blocks)
            return int(max(1, min(wanted, wrw_tile_items(p, cfg) // 2, 4096)))
        vec, ct = cfg["vec"], cfg["ct"]
        pt = 256 // ct
        items = wrw_items(p, cfg)[0]
        base = -(-p.y.lengths[1] // (vec * ct)) * -(-tap_count(p) // wrw_taps_per_block(p, vec))
        wanted = -(-4 * max(1, ctx.device.compute_units) // base)
        return int(max(1, min(wanted, items // (16 * pt), 4096)))

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Backward weights with more than one split: float partials, one dw per split."""
        p = problem
        if p.direction is not Direction.BACKWARD_WEIGHTS:
            return 0
        split = self._split(ctx, p, self._config(ctx, p, perf_config))
        return 0 if split == 1 else split * p.w.element_count * 4

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Memory-bound: the problem's bytes at a fraction of the copy rate (about 0.6 for
        forward and backward data, halo and filter rereads included; 0.35 for backward
        weights, whose input is reread per tap from cache)."""
        p = problem
        eff = 0.35 if p.direction is Direction.BACKWARD_WEIGHTS else 0.6
        if role(p)[5]:
            eff *= 0.7
        predicted = ctx.roofline_ms(p.flops, p.bytes_moved / eff, p.dtype, 0.25)
        return ctx.wti(p, predicted)

    # -- solution ------------------------------------------------------------------------------

    def _config(
        self, ctx: ExecutionContext, p: ConvProblem, perf_config: PerfConfig | None
    ) -> PerfConfig:
        if perf_config is not None and self.is_valid_perf_config(ctx, p, perf_config):
            return perf_config
        return self.default_perf_config(ctx, p)

    def _nchw_tiles(self, p: ConvProblem, cfg: PerfConfig) -> tuple[int, int, int]:
        """(tiles along W, tiles along H, tiles per plane) of the written tensor."""
        b = role(p)[1]
        h, w = b.lengths[-2], b.lengths[-1]
        tw_n = -(-w // cfg["tw"])
        th_n = -(-h // (cfg["by"] * cfg["py"]))
        return tw_n, th_n, tw_n * th_n

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The layout's kernel compiled for the filter geometry, element type and config."""
        p = problem
        cfg = self._config(ctx, p, perf_config)
        kind = kernel_kind(p)
        s = problem_sizes(p)
        a, b, r, m, flip, gather = role(p)
        base_opts = [DTYPE_OPTIONS[p.dtype]]
        for name, value in zip(("FZ", "FY", "FX"), s["f"], strict=True):
            base_opts.append(f"-DMIO_{name}={value}")
        for name, value in zip(("SD", "SH", "SW"), s["s"], strict=True):
            base_opts.append(f"-DMIO_{name}={value}")
        for name, value in zip(("DD", "DH", "DW"), s["d"], strict=True):
            base_opts.append(f"-DMIO_{name}={value}")
        base_opts += [f"-DMIO_R={r}", f"-DMIO_M={m}", f"-DMIO_FLIP={int(flip)}"]
        base_opts.append(f"-DMIO_GATHER={int(gather)}")
        pads = kernel_pads(p)
        fields = dict.fromkeys(PARAM_FIELDS, 0)
        fields.update(pad_d=pads[0], pad_h=pads[1], pad_w=pads[2], split=1)
        taps = tap_count(p)
        wcount = p.w.element_count
        split = 1
        kernels: list[KernelInfo] = []
        shared = 0
        if kind == "nchw":
            tw, by, py = cfg["tw"], cfg["by"], cfg["py"]
            tw_n, _, tiles = self._nchw_tiles(p, cfg)
            fields.update(tiles_w=tw_n, tiles=tiles)
            planes = b.lengths[0] * b.lengths[1] * dims3(tuple(b.lengths[2:]))[0]
            opts = (*base_opts, f"-DMIO_TW={tw}", f"-DMIO_BY={by}", f"-DMIO_PY={py}")
            kernels.append(kernel_info("dw_nchw", opts, (planes, tiles), (tw, by)))
        elif kind == "nhwc":
            vec, pix, py, ct = cfg["vec"], cfg["pix"], cfg["py"], cfg["ct"]
            pt = max(1, 256 // ct)
            bd, bh, bw = dims3(tuple(b.lengths[2:]))
            groups_w = -(-bw // pix)
            items = b.lengths[0] * bd * -(-bh // py) * groups_w
            fields.update(groups_w=groups_w, items=items)
            gy = -(-b.lengths[1] // (vec * ct))
            target = 8 * max(1, ctx.device.compute_units)
            gx = max(1, min(-(-items // pt), -(-target // gy), INT32_MAX))
            for v in dict.fromkeys((vec, 1)):  # vec > 1: a scalar twin for unaligned buffers
                ctv = ct if v == vec else min(256, ct * vec)
                wreg, wsh = filter_storage(r * taps, v, ctv)
                opts = (*base_opts, f"-DMIO_VEC={v}", f"-DMIO_PIX={pix}", f"-DMIO_PY={py}")
                opts = (*opts, f"-DMIO_WREG={wreg}", f"-DMIO_WSH={wsh}", f"-DMIO_CT={ctv}")
                gyv = -(-b.lengths[1] // (v * ctv))
                kernels.append(kernel_info("dw_nhwc", opts, (gx, gyv), (ctv, max(1, 256 // ctv))))
        elif is_tile(cfg):
            vec, cb = cfg["vec"], cfg["cb"]
            split = self._split(ctx, p, cfg)
            fields.update(items=wrw_tile_items(p, cfg), split=split)
            tile = (f"-DMIO_CB={cb}", f"-DMIO_TP={cfg['tp']}", f"-DMIO_TQ={cfg['tq']}")
            pg = cfg.get("pg", 0)
            if pg:
                tile = (*tile, f"-DMIO_PG={pg}")
            for v in dict.fromkeys((vec, 1)):
                opts = (*base_opts, "-DMIO_WRW_TILE=1", f"-DMIO_VEC={v}", *tile)
                grid = (split, -(-b.lengths[1] // cb))
                kernels.append(kernel_info("dw_wrw_tile", opts, grid, (cb, pg or s["f"][1])))
            if split > 1:
                kernels.append(reduce_kernel(base_opts, wcount, split))
        else:
            vec, ct = cfg["vec"], cfg["ct"]
            split = self._split(ctx, p, cfg)
            items, groups_w = wrw_items(p, cfg)
            fields.update(items=items, groups_w=groups_w, split=split)
            for v in dict.fromkeys((vec, 1)):
                tc = wrw_taps_per_block(p, v)
                ctv = ct if v == vec else min(256, ct * vec)
                gy = -(-b.lengths[1] // (v * ctv))
                opts = (*base_opts, f"-DMIO_VEC={v}", f"-DMIO_TC={tc}")
                opts = (*opts, f"-DMIO_PY={cfg['py']}", f"-DMIO_PIX={cfg['pix']}")
                grid = (split, gy, -(-taps // tc))
                kernels.append(kernel_info("dw_wrw", opts, grid, (ctv, max(1, 256 // ctv))))
            if split > 1:
                kernels.append(reduce_kernel(base_opts, wcount, split))
        params = tensor5_bytes(a) + tensor5_bytes(b) + tensor5_bytes(p.w) + pack_params(fields)
        workspace = 0 if split == 1 else split * wcount * 4
        vec = cfg.get("vec", 1)
        align = vec * esize(p)
        direction = p.direction

        def factory(compiled: Any) -> Any:
            if direction is Direction.BACKWARD_WEIGHTS:
                mains = compiled[:2] if vec > 1 else compiled[:1]
                reduce = compiled[len(mains)] if split > 1 else None
                args = KernelArgs([("ptr", 0)] * 4 + [("bytes", params)])
                rargs = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", params)])

                def invoker_w(handle: Any, ip: InvokeParams) -> None:
                    aligned = ip.x.ptr % align == 0 and ip.y.ptr % align == 0
                    main = mains[0] if aligned else mains[-1]
                    part = ip.workspace.ptr if split > 1 else 0
                    args.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr, part)
                    main.launch(args)
                    if reduce is not None:
                        rargs.set_pointers(ip.w.ptr, part)
                        reduce.launch(rargs)

                return invoker_w
            args3 = KernelArgs([("ptr", 0), ("ptr", 0), ("ptr", 0), ("bytes", params)])
            mains3 = compiled

            def invoker(handle: Any, ip: InvokeParams) -> None:
                ta, tb = (ip.y, ip.x) if direction is Direction.BACKWARD_DATA else (ip.x, ip.y)
                aligned = ta.ptr % align == 0 and tb.ptr % align == 0
                main = mains3[0] if aligned else mains3[-1]
                args3.set_pointers(ta.ptr, ip.w.ptr, tb.ptr)
                main.launch(args3, shared=shared)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            perf_config=cfg,
            kernels=tuple(kernels),
        )
