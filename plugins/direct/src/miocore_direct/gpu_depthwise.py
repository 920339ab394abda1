"""``direct.gpu_depthwise``: direct GPU kernels for depthwise convolutions.

Applies when every group has one input channel (``groups == C``, filter ``(M*C, 1, ...)``):
plain depthwise (``M == 1``) and channel multipliers ``M > 1``; 2-D and 3-D; any filter size,
stride, dilation and padding; fp32/fp16/bf16 with fp32 accumulation; every direction.
``kernels/depthwise.cu`` holds the kernels (its header comment gives the index algebra):

- channels innermost (NHWC / NDHWC): ``dw_nhwc``, threads over channel vectors (``vec``
  channels in one 4/8/16-byte access), each thread ``py`` x ``pix`` consecutive output rows x
  columns whose input rows and columns are loaded once, the filter in registers (or, when
  the thread's taps do not fit, staged once per block in shared memory); ``ct`` channel
  vectors per block; ``mb`` (optional) caps the registers for that many resident blocks per
  SM (the 16-bit 3x3 defaults take it: the kernel is latency-bound at 25% occupancy).
- 2-D channels-innermost layers of up to 25 taps (forward and backward data, the gather
  too) also have ``dw_nhwc_tile`` (``kernels/depthwise_nhwc_tile.cu``, configs ``vec``,
  ``ch``, ``toh``, ``tow``, ``pix`` [, ``mb``, ``nt``]): a block stages its tile's input in
  shared memory with 16-byte loads and computes from there, ``nt`` tiles in turn with the
  next one's input copied asynchronously while this one computes. In the space after
  ``dw_nhwc``'s configs; the default of 16-bit 3x3 layers on planes of 14 and more (stride 1,
  and strided forward), where the GPU timed it faster
  (``gpu_depthwise_nhwc_tile.default_nhwc_tile``).
- channels outer (NCHW / NCDHW): ``dw_nchw``, one block per (image, channel, depth) plane tile
  of ``tw`` x ``by * py`` outputs with the input tile and its halo staged in shared memory;
  where the narrowest such tile covers the whole written plane, configs with ``pp`` > 1 give a
  block ``pp`` consecutive channels' planes, all staged before any is computed (more loads in
  flight per block on small planes). In the space for tuning; not a default until measured.
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
  layer (``default_tile``); same partials and reduction. On sm_90 (``tma``) one thread has
  the tensor memory accelerator copy both tiles as they lie in memory, two items in flight,
  and a thread may take 2 or 4 channels (``wv``); the default there (``default_tile_tma``).

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
    tensor5_bytes,
)
from miocore_direct import gpu_depthwise_geometry as geometry
from miocore_direct.gpu_depthwise_configs import (
    config_space,
    nchw_tiles,
    rows_items,
    valid_config,
    wrw_tile_tma_configs,
)
from miocore_direct.gpu_depthwise_defaults import default_config
from miocore_direct.gpu_depthwise_geometry import (
    INT32_MAX,
    PARAM_FIELDS,
    ROWS_SOURCE,
    ROWS_THREADS,
    ct_for,
    dims3,
    esize,
    filter_storage,
    is_rows,
    is_tile,
    kernel_info,
    kernel_kind,
    kernel_pads,
    pack_params,
    problem_sizes,
    reduce_kernel,
    role,
    tap_count,
    tma_l2_promotion,
    wrw_items,
    wrw_taps_per_block,
    wrw_tile_items,
    wrw_tile_tma_boxes,
)
from miocore_direct.gpu_depthwise_nhwc_tile import (
    NHWC_TILE_CHUNK_BYTES,
    NHWC_TILE_SOURCE,
    NHWC_TILE_THREADS,
    is_nhwc_tile,
    nhwc_tile_grid,
    nhwc_tile_launch_grid,
    nhwc_tile_tma_box,
    nhwc_tile_tma_configs,
    tma_available,
)


class GpuDepthwiseSolver(TunableSolver):
    """Depthwise (and channel-multiplier) convolutions on CUDA and HIP devices."""

    name = "direct.gpu_depthwise"
    numerical_notes = frozenset()
    #: 1: backward weights through staged tiles and the 16-bit forward/backward-data defaults
    #: refitted (2026-11-26); 2: the fp32 ones refitted (2026-11-26); 3: backward weights'
    #: partials summed by split lanes, the tiles' loads overlapped with the previous tile's
    #: arithmetic (2026-11-27); 4: ``dw_nchw`` stages rows in 8-byte chunks, several planes
    #: per block on small planes by default (2026-11-28); 5: channels-outer forward and
    #: stride-1 backward data run ``dw_nchw_rows`` by default (2026-11-28, later): entries
    #: recorded before run today's defaults instead; 6: ``dw_nhwc_tile`` in the space, the
    #: default of 16-bit 3x3 stride-1 layers on 14-28 planes (2026-11-29); 7: its runs of tiles
    #: and blocks of 48 channels in the space, the default of 16-bit 3x3 layers on planes of 14
    #: and more, stride 1 and strided forward (2026-11-29, later); 8: 5x5 staged tiles in the
    #: space, the default refitted on every run timed: the gather, 5x5 layers, 112 planes and
    #: 48-channel blocks (2026-11-29, thirty-seventh session); 9: tiles in strips of 2 rows
    #: and tiles staged by the tensor memory accelerator in the space, the TMA twins the
    #: default on sm_90 (planes of 7 too), 48-channel strips of 2 rows (fortieth session);
    #: 10: backward-weights tiles staged by the tensor memory accelerator, and with 2 or 4
    #: channels a thread, in the space and the default on sm_90; their splits for 8 blocks a
    #: compute unit (``bs``) in the space (forty-first session); 11: staged tiles launched
    #: channel blocks first, TMA boxes of part of a pixel's channels with narrow L2
    #: promotion, and with them every 16-bit staged-tile default on sm_90 staged by the
    #: accelerator (forty-second session); 12: 7x7 stride-1 16-bit layers on sm_90 default to
    #: staged tiles by TMA (forty-third session); 13: batch-32 rules: the gather and 3x3 on
    #: planes of 7 take the staged tile alone where runs keep too few blocks, 5x5 runs kept
    #: from 240 blocks, 5x5 on planes of 7 from 120 (forty-fifth session).
    revision = 13
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
        """Per kernel, best guesses first (``gpu_depthwise_configs.config_space``); on devices
        with the tensor memory accelerator, the staged tiles again staged by it."""
        space = config_space(problem)
        if tma_available(ctx):
            space += nhwc_tile_tma_configs(problem) + wrw_tile_tma_configs(problem)
        return space

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The fitted rule of each kernel (``gpu_depthwise_defaults.default_config``)."""
        return default_config(problem, tma_available(ctx))

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """A config with this kernel's keys, sane values, that fits the problem (a TMA tile:
        on a device that has the accelerator)."""
        if "tma" in config and not tma_available(ctx):
            return False
        return valid_config(problem, config)

    # -- cost ----------------------------------------------------------------------------------

    def _split(self, ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig) -> int:
        """Backward-weights blocks along the reduction: about 4 blocks per compute unit, at
        least 16 pixels per thread."""
        if is_tile(cfg):
            # about 4 blocks per compute unit (bs: more, for the leaner TMA tiles), each at
            # least 2 tiles
            blocks = -(-p.y.lengths[1] // cfg["cb"])
            per_unit = cfg.get("bs", 4)
            wanted = -(-per_unit * max(1, ctx.device.compute_units) // blocks)
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

    def launch_plan(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> tuple[tuple[KernelInfo, ...], bytes, int]:
        """What :meth:`get_solution`'s invoker launches for ``perf_config`` (the default where
        it is None or invalid): the kernels in the invoker's order (the main kernel, its scalar
        twin where there is one, the reduce of split partials), the parameter block they all
        take, and the backward-weights split (1 elsewhere). Also for callers that run the
        kernels themselves (``tests/test_gpu_depthwise_host.py`` runs them on the CPU)."""
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
        if kind == "nchw" and is_rows(cfg):
            runs, groups, items = rows_items(p, cfg)
            fields.update(tiles_w=runs, tiles=groups, items=items)
            chunk = geometry.rows_chunk(p)
            opts = (*base_opts, f"-DMIO_OX={cfg['ox']}", f"-DMIO_OY={cfg['oy']}")
            if chunk > 1:  # the window's start inside its first chunk
                opts = (*opts, f"-DMIO_NV={chunk}", f"-DMIO_PWM={pads[2] % chunk}")
            grid = (max(1, min(-(-items // ROWS_THREADS), INT32_MAX)),)
            kernels.append(
                kernel_info("dw_nchw_rows", opts, grid, (ROWS_THREADS,), source=ROWS_SOURCE)
            )
        elif kind == "nchw":
            tw, by, py, pp = cfg["tw"], cfg["by"], cfg["py"], cfg.get("pp", 1)
            tw_n, _, tiles = nchw_tiles(p, cfg)
            fields.update(tiles_w=tw_n, tiles=tiles)
            # a block per (image, group of pp written channels, depth) plane tile
            planes = b.lengths[0] * -(-b.lengths[1] // pp) * dims3(tuple(b.lengths[2:]))[0]
            opts = (*base_opts, f"-DMIO_TW={tw}", f"-DMIO_BY={by}", f"-DMIO_PY={py}")
            if pp > 1:  # one plane per block compiles as it always did
                opts = (*opts, f"-DMIO_PP={pp}")
            chunk = geometry.NCHW_CHUNK_BYTES // esize(p)
            if chunk > 1:
                opts = (*opts, f"-DMIO_NV={chunk}")
            kernels.append(kernel_info("dw_nchw", opts, (planes, tiles), (tw, by)))
        elif kind == "nhwc" and is_nhwc_tile(cfg):
            tiles_w, tiles, _ = nhwc_tile_grid(p, cfg)
            opts = (*base_opts, f"-DMIO_VEC={cfg['vec']}", f"-DMIO_PIX={cfg['pix']}")
            opts = (*opts, f"-DMIO_CH={cfg['ch']}", f"-DMIO_TOH={cfg['toh']}")
            opts = (*opts, f"-DMIO_TOW={cfg['tow']}")
            if cfg.get("mb"):
                opts = (*opts, f"-DMIO_MINB={cfg['mb']}")
            if cfg.get("nt", 1) > 1:
                opts = (*opts, f"-DMIO_TILES={cfg['nt']}")
            if cfg.get("py", 1) > 1:
                opts = (*opts, f"-DMIO_PY={cfg['py']}")
            if cfg.get("tma"):
                opts = (*opts, "-DMIO_TMA=1")
            grid, channels_first = nhwc_tile_launch_grid(p, cfg)
            if channels_first:
                opts = (*opts, "-DMIO_CFAST=1")
            fields.update(tiles_w=tiles_w, tiles=tiles)
            lanes = cfg["ch"] // cfg["vec"]
            block = (lanes, NHWC_TILE_THREADS // lanes)
            kernels.append(kernel_info("dw_nhwc_tile", opts, grid, block, NHWC_TILE_SOURCE))
            # the scalar twin for buffers not 16-byte aligned: dw_nhwc, one pixel a thread
            scalar = PerfConfig(vec=1, pix=1, py=1, ct=ct_for(b.lengths[1], 1))
            kernels += nhwc_kernels(ctx, p, scalar, base_opts, fields)
        elif kind == "nhwc":
            kernels += nhwc_kernels(ctx, p, cfg, base_opts, fields)
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
                wv = 1
                if cfg.get("tma") and v == vec:  # the twin (misaligned buffers) stages by hand
                    opts = (*opts, "-DMIO_TMA=1")
                    wv = cfg.get("wv", 1)
                    if wv > 1:
                        opts = (*opts, f"-DMIO_WV={wv}")
                grid = (split, -(-b.lengths[1] // cb))
                block = (cb // wv, pg or s["f"][1])
                kernels.append(kernel_info("dw_wrw_tile", opts, grid, block))
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
        return tuple(kernels), params, split

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The layout's kernel compiled for the filter geometry, element type and config."""
        p = problem
        cfg = self._config(ctx, p, perf_config)
        kernels, params, split = self.launch_plan(ctx, p, cfg)
        workspace = 0 if split == 1 else split * p.w.element_count * 4
        vec = cfg.get("vec", 1)
        align = vec * esize(p)
        if is_nhwc_tile(cfg):  # its staged loads are 16 bytes wide
            align = NHWC_TILE_CHUNK_BYTES
        direction = p.direction

        def factory(compiled: Any) -> Any:
            if direction is Direction.BACKWARD_WEIGHTS:
                mains = compiled[:2] if vec > 1 else compiled[:1]
                reduce = compiled[len(mains)] if split > 1 else None
                plain = KernelArgs([("ptr", 0)] * 4 + [("bytes", params)])
                rargs = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", params)])
                tma_args = None
                if cfg.get("tma"):  # the maps of x and dy, then x, dw, dy and the partials
                    tma_args = tma_launch_args(p, wrw_tile_tma_boxes(p, cfg), 4, params)

                def invoker_w(handle: Any, ip: InvokeParams) -> None:
                    aligned = ip.x.ptr % align == 0 and ip.y.ptr % align == 0
                    main = mains[0] if aligned else mains[-1]
                    part = ip.workspace.ptr if split > 1 else 0
                    staged = aligned and tma_args is not None
                    args = tma_args(ip.x.ptr, ip.y.ptr) if staged else plain
                    args.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr, part)
                    main.launch(args)
                    if reduce is not None:
                        rargs.set_pointers(ip.w.ptr, part)
                        reduce.launch(rargs)

                return invoker_w
            args3 = KernelArgs([("ptr", 0), ("ptr", 0), ("ptr", 0), ("bytes", params)])
            mains3 = compiled
            tma_args = None
            if cfg.get("tma"):  # the read tensor's map, then the three tensors
                tma_args = tma_launch_args(p, (nhwc_tile_tma_box(p, cfg),), 3, params)

            def invoker(handle: Any, ip: InvokeParams) -> None:
                ta, tb = (ip.y, ip.x) if direction is Direction.BACKWARD_DATA else (ip.x, ip.y)
                aligned = ta.ptr % align == 0 and tb.ptr % align == 0
                if not aligned:  # the scalar twin
                    args3.set_pointers(ta.ptr, ip.w.ptr, tb.ptr)
                    mains3[-1].launch(args3)
                    return
                args = args3 if tma_args is None else tma_args(ta.ptr)
                args.set_pointers(ta.ptr, ip.w.ptr, tb.ptr)
                mains3[0].launch(args)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            perf_config=cfg,
            kernels=kernels,
        )


def nhwc_kernels(
    ctx: ExecutionContext,
    p: ConvProblem,
    cfg: PerfConfig,
    base_opts: list[str],
    fields: dict[str, int],
) -> list[KernelInfo]:
    """``dw_nhwc`` for ``cfg`` and, where ``vec`` > 1, its scalar twin for unaligned buffers;
    sets ``fields``' pixel groups."""
    _, b, r, _, _, _ = role(p)
    vec, pix, py, ct = cfg["vec"], cfg["pix"], cfg["py"], cfg["ct"]
    pt = max(1, 256 // ct)
    bd, bh, bw = dims3(tuple(b.lengths[2:]))
    groups_w = -(-bw // pix)
    items = b.lengths[0] * bd * -(-bh // py) * groups_w
    fields.update(groups_w=groups_w, items=items)
    gy = -(-b.lengths[1] // (vec * ct))
    target = 8 * max(1, ctx.device.compute_units)
    gx = max(1, min(-(-items // pt), -(-target // gy), INT32_MAX))
    kernels = []
    for v in dict.fromkeys((vec, 1)):
        ctv = ct if v == vec else min(256, ct * vec)
        wreg, wsh = filter_storage(r * tap_count(p), v, ctv)
        opts = (*base_opts, f"-DMIO_VEC={v}", f"-DMIO_PIX={pix}", f"-DMIO_PY={py}")
        opts = (*opts, f"-DMIO_WREG={wreg}", f"-DMIO_WSH={wsh}", f"-DMIO_CT={ctv}")
        if cfg.get("mb"):  # a register cap for this many blocks per SM
            opts = (*opts, f"-DMIO_MINB={cfg['mb']}")
        gyv = -(-b.lengths[1] // (v * ctv))
        kernels.append(kernel_info("dw_nhwc", opts, (gx, gyv), (ctv, max(1, 256 // ctv))))
    return kernels


#: Tensor maps a TMA tile's invoker keeps (one per read-tensor address: a network's calls
#: reuse the caching allocator's few addresses, so each is encoded once).
TMA_MAPS_KEPT = 64


def tma_launch_args(
    p: ConvProblem, boxes: tuple[tuple[tuple[int, ...], ...], ...], pointers: int, params: bytes
) -> Any:
    """For a TMA-staged kernel: the launch arguments for its read tensors at their addresses,
    made once per tuple of addresses: a tensor map of each (``boxes``: dims, byte strides and
    box of each, in argument order), then ``pointers`` pointers and the parameters."""
    from miocore.backends.cuda_tma import tiled_tensor_map

    kept: dict[tuple[int, ...], KernelArgs] = {}
    pointer_slots = [("ptr", 0)] * pointers

    def encode(
        at: int, dims: tuple[int, ...], strides: tuple[int, ...], box: tuple[int, ...]
    ) -> bytes:
        promotion = tma_l2_promotion(dims, box, esize(p))
        return tiled_tensor_map(p.dtype, at, dims, strides, box, (1, 1, 1, 1), False, promotion)

    def args_for(*addresses: int) -> KernelArgs:
        args = kept.get(addresses)
        if args is None:
            if len(kept) >= TMA_MAPS_KEPT:
                kept.clear()
            maps = [("bytes", encode(at, *box)) for at, box in zip(addresses, boxes, strict=True)]
            args = kept[addresses] = KernelArgs([*maps, *pointer_slots, ("bytes", params)])
        return args

    return args_for
