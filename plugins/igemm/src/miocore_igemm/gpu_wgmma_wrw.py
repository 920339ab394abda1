"""``igemm.gpu_wgmma_wrw``: backward weights on Hopper's warpgroup tensor cores (sm_90), fed
by the tensor memory accelerator; fp16/bf16, fp32 sums. x and dy are read channels-last:
in another layout (NCHW) they are copied to it in the workspace first (``gpu_wgmma_layout``).

``kernels/igemm_wgmma_wrw.cu`` computes a tile of ``bm`` output channels (k) by ``bn`` input
channels (c) of one filter tap per work unit, summing over boxes of exactly 64 output pixels
(``tn`` images x ``th`` rows x ``tw`` columns): per box, one TMA load of dy and one of x at the
box's origin moved by the tap (the tensor map's element strides take the convolution's
stride; zeros where a box leaves its tensor, so pixels outside the output add nothing). Both
slices land pixel-major and ``wgmma`` reads both operands MN-major. Layers have few tiles (k x
c x taps) and long sums, so the sum over pixels is split into ``split`` parts; the parts'
fp32 sums go to the workspace and a second kernel adds them in order (deterministic) and
writes the filter through its strides (any filter layout). One part on a filter with c
contiguous stores straight from the registers. On layers of at most 64 input channels a tile
may instead span 2, 3 or 4 taps of every channel (``span``: one x box per tap), so each dy
slice feeds a wider ``wgmma``; the cost model ranks those over 2 and 4 with the per-tap tiles.
Where a layer's tiles make an uneven number of waves (VGG-16's 512-channel layers: 72 tiles
on 132 SMs), stream-K shares (``sk``) give every block the same number of (tile, box)
iterations across tiles, each tile's pieces summed in its contributors' slabs; in the tuning
space after the split-K configurations, not ranked by the cost model until timed on a GPU.

Every size and the pixel box are run-time arguments; the tile and depth are compiled in, so
one binary per tile serves every problem (the solver is dynamic). The tensor maps hold the
tensors' addresses: the invoker encodes them once per address pair and keeps them.
"""

from __future__ import annotations

import math
from typing import Any

from miocore import (
    APPLICABLE,
    Applicability,
    ConvProblem,
    ConvSolution,
    DataType,
    Direction,
    ExecutionContext,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    not_applicable,
)
from miocore_igemm.gpu_common import MmaSolverBase, check_alignment
from miocore_igemm.gpu_wgmma import _MAPS_KEPT
from miocore_igemm.gpu_wgmma_layout import (
    Copies,
    copies_ms,
    copy_reason,
    end_of,
    reads_as_is,
    staged_copies,
    with_packed,
)
from miocore_igemm.gpu_wgmma_plan import (
    _DTYPE_OPTIONS,
    _MAX_BOX,
    _MAX_ELEMENT_STRIDE,
    _cdiv,
    _is_sm90,
    _sms,
    depth3,
)
from miocore_igemm.gpu_wgmma_wrw_plan import (
    _KEYS,
    _UNIT_FIXED,
    CHUNK,
    PER_TAP_BN,
    PIXELS,
    SPANS,
    SPLITS,
    STAGES,
    _boxes,
    _computes,
    _config,
    _direct,
    _fits,
    _partial_bytes,
    _slab,
    _splits,
    counter_bytes,
    pack_geometry,
    partial_bytes,
    pixel_boxes,
    ranked,
    streamk_blocks,
    tile_count,
)

SOURCE = "igemm/igemm_wgmma_wrw.cu"
KERNEL = "igemm_wgmma_wrw"
REDUCE_KERNEL = "igemm_wgmma_wrw_reduce"
THREADS = 384  # one producer and two consumer warpgroups
#: Other tiles a normal find measures besides the default (see find_configs).
_ALTERNATIVES = 3
_EFFICIENCY = 0.6  # of the fp16 tensor-core ceiling, for WTI
_FIXED_MS = 0.008


class GpuWgmmaWrwSolver(MmaSolverBase):
    """Backward-weights convolution with ``wgmma`` and TMA on sm_90 (H100/H200), fp16/bf16,
    channels-last activations, any filter layout."""

    name = "igemm.gpu_wgmma_wrw"
    #: 1: stream-K shares ranked, span 3 ranked: the defaults of the narrow layers changed
    #: (forty-fifth session).
    revision = 1
    backends = frozenset({"cuda"})
    is_dynamic = True
    dtypes = frozenset({DataType.FLOAT16, DataType.BFLOAT16})

    # -- applicability -----------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D or 3-D backward weights, one group, fp16/bf16, x and dy with channels innermost
        and 16-byte strides (their channels multiples of 8), strides up to 8, sm_90."""
        p = problem
        if not _is_sm90(ctx):
            return not_applicable(f"{ctx.device.arch}: wgmma and this kernel's TMA need sm_90")
        if p.dtype not in self.dtypes:
            kinds = " and ".join(sorted(d.value for d in self.dtypes))
            return not_applicable(f"{p.dtype.value}: this solver computes {kinds}")
        if p.direction is not Direction.BACKWARD_WEIGHTS:
            return not_applicable(f"{p.direction.value}: this kernel computes backward weights")
        if p.spatial_dims not in (2, 3):
            return not_applicable(f"{p.spatial_dims}-D problem: the kernel is 2-D and 3-D")
        if p.groups != 1:
            return not_applicable(f"{p.groups} groups: the kernel computes one")
        reason = _channel_reason(p)
        for name in staged(p):
            reason = reason or copy_reason(getattr(p, name), name)
        if reason:
            return not_applicable(reason)
        if max(p.conv.strides) > _MAX_ELEMENT_STRIDE:
            return not_applicable(f"stride {p.conv.strides}: the TMA steps at most 8 elements")
        if max(p.in_spatial + p.out_spatial) + max(p.conv.pads) >= 1 << 28:
            return not_applicable("spatial extent beyond the kernel's 32-bit coordinates")
        if _slab(p) >= 1 << 31 or p.n >= 1 << 28:
            return not_applicable("filter or batch beyond the kernel's 32-bit indices")
        return APPLICABLE

    # -- configs -------------------------------------------------------------------------------

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Every tile no wider than k and c need x the three pixel boxes that cover the output
        in the fewest boxes x the split-K parts that keep each part's pipeline full; then, on
        layers of at most 64 input channels, the tiles over 2, 3 or 4 taps the same way; then
        every configuration whose parts go through the workspace again with the fix-up
        (``fix``: the last part of a tile adds them, no reduce kernel); then every tile and box
        in stream-K shares (``sk``)."""
        p = problem
        if not _computes(p):
            return []
        out, fixed, shares = [], [], []
        for span in (1, *SPANS):
            for (bm, bn), stages in STAGES.items():
                if not _fits(p, bm, bn, span):
                    continue
                for box in pixel_boxes(p):
                    for split in _splits(p, box):
                        out.append(_config(p, bm, bn, stages, box, split, span))
                        if not _direct(p, (bm, bn), split):
                            fixed.append(_config(p, bm, bn, stages, box, split, span, fixup=True))
                    shares.append(_config(p, bm, bn, stages, box, 1, span, streamk=True))
        return out + fixed + shares

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The tile, box and split the cost model expects fastest (see :func:`ranked`)."""
        if not _computes(problem):
            return _config(problem, 128, 128, STAGES[128, 128], (8, 8, 1, 1), 1)  # declined
        return ranked(ctx, problem)[0]

    def find_configs(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """The cost model's next best tiles (its best split each): a normal find measures
        them beside the default; the binaries are the default's kind, compiled once per
        machine."""
        if not _computes(problem):
            return []
        out: list[PerfConfig] = []
        tiles = set()
        for cfg in ranked(ctx, problem):
            tile = (cfg["bm"], cfg["bn"], cfg.get("span", 1))
            if tile not in tiles:
                tiles.add(tile)
                out.append(cfg)
        return out[1 : 1 + _ALTERNATIVES]

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """The seven keys; a tile with its depth; a box of exactly 64 pixels within the TMA's
        limits; at least one box per split-K part; ``span`` (optional) 2, 3 or 4 taps on a
        layer of at most 64 input channels, ``bn`` 64 a tap; ``sk`` (optional) 1, with one
        part; ``fix`` (optional) 1, without ``sk``, where the parts' sums go through the
        workspace (not straight into the filter)."""
        try:
            bm, bn, stages, tw, th, tn, split = (int(config[k]) for k in _KEYS)
            td = int(config.get("td", 1))
            span = int(config.get("span", 1))
        except (KeyError, TypeError, ValueError):
            return False
        p = problem
        if p.spatial_dims not in (2, 3) or STAGES.get((bm, bn)) != stages or split not in SPLITS:
            return False
        if "span" in config and (span not in SPANS or not _fits(p, bm, bn, span)):
            return False
        if "span" not in config and bn not in PER_TAP_BN:  # 192 columns span three taps
            return False
        if "sk" in config and (config["sk"] != 1 or split != 1):  # stream-K: shares, no parts
            return False
        if "fix" in config and (config["fix"] != 1 or "sk" in config):
            return False
        if "fix" in config and _direct(problem, (bm, bn), split):  # no sums to add up
            return False
        if ("td" in config) != (p.spatial_dims == 3):  # a depth exactly where there is one
            return False
        sd, sh, sw = depth3(p.conv.strides, 1)
        if min(tw, th, td, tn) < 1 or tw * th * td * tn != PIXELS:
            return False
        if tw * sw > _MAX_BOX or th * sh > _MAX_BOX or td * sd > _MAX_BOX:
            return False
        return split <= _boxes(p, (tw, th, td, tn))

    # -- cost ----------------------------------------------------------------------------------

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The GEMM's roofline at the fp16 tensor-core ceiling times the kernel's expected
        efficiency and the share of the tiles and pixel boxes that are real work."""
        p = problem
        if not _computes(p):
            return -1.0  # not this solver's: no estimate
        cfg = self.default_perf_config(ctx, p)
        bm, bn = cfg["bm"], cfg["bn"]
        box = (cfg["tw"], cfg["th"], cfg.get("td", 1), cfg["tn"])
        fill = p.n * math.prod(p.out_spatial) / (_boxes(p, box) * PIXELS)
        fill *= p.k / (_cdiv(p.k, bm) * bm) * p.c / (_cdiv(p.c, bn) * bn)
        steps = _boxes(p, box) / cfg["split"]
        eff = _EFFICIENCY * steps / (steps + _UNIT_FIXED)
        moved = p.bytes_moved + 2 * _partial_bytes(p, (bm, bn), int(cfg["split"]))
        ms = ctx.roofline_ms(float(p.flops), moved, DataType.FLOAT16, eff * fill)
        return ctx.wti(p, ms + _FIXED_MS + copies_ms(ctx, p, staged(p)))

    # -- solution ------------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """x and dy copied to channels-last where TMA cannot read them as they lie
        (:func:`staged`), and the parts' fp32 sums, unless one part stores straight into
        the filter."""
        p = problem
        if not _computes(p):
            return 0
        cfg = self._config(ctx, p, perf_config)
        return _workspace(p, cfg, streamk_blocks(p, cfg, _sms(ctx)))[2]

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The kernel compiled for the tile, depth and element type, and the reduce kernel
        where the parts' sums go through the workspace; the tensor maps made per address
        pair at the first call."""
        caller = problem
        cfg = self._config(ctx, caller, perf_config)
        bm, bn, stages, tw, th, tn, split = (int(cfg[k]) for k in _KEYS)
        td = int(cfg.get("td", 1))
        span = int(cfg.get("span", 1))
        three = caller.spatial_dims == 3
        sms = _sms(ctx)
        streamk = streamk_blocks(caller, cfg, sms)  # blocks of stream-K shares, or 0
        fixup = bool(cfg.get("fix"))  # the last part of each tile adds the slabs: no reduce
        copies, part_at, workspace = _workspace(caller, cfg, streamk)
        p = with_packed(caller, tuple(c.name for c in copies))  # what the kernel reads
        id_, ih, iw = depth3(p.in_spatial, 1)
        od, oh, ow = depth3(p.out_spatial, 1)
        sd, sh, sw = depth3(p.conv.strides, 1)
        direct = _direct(p, (bm, bn), split, streamk)
        slab = _slab(p)
        ws = p.w.strides  # (k, c, [t,] r, s)
        geometry = pack_geometry(p, cfg, streamk)
        units = tile_count(p, (bm, bn), span) * split
        options = (
            _DTYPE_OPTIONS[p.dtype],
            f"-DMIO_BM={bm}",
            f"-DMIO_BN={bn}",
            f"-DMIO_STAGES={stages}",
            *(("-DMIO_3D=1",) if three else ()),
            *((f"-DMIO_SPAN={span}",) if span > 1 else ()),
            *(("-DMIO_STREAMK=1",) if streamk else ()),
            *(("-DMIO_FIXUP=1",) if fixup else ()),
            "--gpu-architecture=sm_90a",  # wgmma and setmaxnreg: the arch-specific target
        )
        kernels = [c.kernel for c in copies] + [
            KernelInfo(
                source=SOURCE,
                kernel_name=KERNEL,
                options=options,
                # persistent: one block per SM walks the units (or its stream-K share)
                grid=(streamk or min(units, sms),),
                block=(THREADS,),
            )
        ]
        if not direct and not fixup:
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name=REDUCE_KERNEL,
                    options=options,
                    # two channels a thread, small blocks: a small filter still spreads
                    grid=(max(1, min(_cdiv(slab // 2, 128), 16 * sms)),),
                    block=(128,),
                )
            )
        shared = stages * (bm + bn) * 128 + 1024  # + alignment of the ring to 1 KiB
        item = p.dtype.itemsize
        xs, ys = p.x.strides, p.y.strides  # (n, c, [d,] h, w)
        if three:  # 5-D maps: (channels, w, h, d, n)
            x_dims, dy_dims = (p.c, iw, ih, id_, p.n), (p.k, ow, oh, od, p.n)
            x_strides = (xs[4] * item, xs[3] * item, xs[2] * item, xs[0] * item)
            dy_strides = (ys[4] * item, ys[3] * item, ys[2] * item, ys[0] * item)
            x_box, x_steps = (CHUNK, tw * sw, th * sh, td * sd, tn), (1, sw, sh, sd, 1)
            dy_box = (CHUNK, tw, th, td, tn)
        else:
            x_dims, dy_dims = (p.c, iw, ih, p.n), (p.k, ow, oh, p.n)
            x_strides = (xs[3] * item, xs[2] * item, xs[0] * item)
            dy_strides = (ys[3] * item, ys[2] * item, ys[0] * item)
            x_box, x_steps = (CHUNK, tw * sw, th * sh, tn), (1, sw, sh, 1)
            dy_box = (CHUNK, tw, th, tn)
        dy_steps = (1,) * len(dy_box)
        paired = ws[1] == 1 and not any(x % 2 for x in (ws[0], *ws[2:]))
        dtype = p.dtype
        counters = counter_bytes(p, cfg)
        counters_at = partial_bytes(p, cfg) - counters  # after the slabs

        def factory(compiled: Any) -> Any:
            from miocore.backends.cuda_tma import tiled_tensor_map
            from miocore.backends.gpu_kernels import KernelArgs

            staging = Copies(copies, compiled[: len(copies)])
            kernel = compiled[len(copies)]
            reducer = None if direct or fixup else compiled[len(copies) + 1]
            reduce_launch = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", geometry)])
            kept: dict[tuple[int, int], Any] = {}

            def args_for(x_ptr: int, dy_ptr: int) -> Any:
                check_alignment((("x", x_ptr, 16), ("dy", dy_ptr, 16)), "igemm.gpu_wgmma_wrw's TMA")
                if len(kept) >= _MAPS_KEPT:
                    kept.clear()
                x_map = tiled_tensor_map(dtype, x_ptr, x_dims, x_strides, x_box, x_steps)
                dy_map = tiled_tensor_map(dtype, dy_ptr, dy_dims, dy_strides, dy_box, dy_steps)
                maps = [("bytes", x_map), ("bytes", dy_map)]
                args = KernelArgs([*maps, ("ptr", 0), ("ptr", 0), ("bytes", geometry)])
                kept[(x_ptr, dy_ptr)] = args
                return args

            def invoker(handle: Any, ip: InvokeParams) -> None:
                x_ptr, dy_ptr, w_ptr = ip.x.ptr, ip.y.ptr, ip.w.ptr
                ws_ptr = ip.workspace.ptr if ip.workspace is not None else 0
                if copies:  # x or dy in a layout TMA cannot read
                    staging.before({"x": x_ptr, "y": dy_ptr}, ws_ptr)
                    x_ptr = staging.pointer("x", x_ptr, ws_ptr)
                    dy_ptr = staging.pointer("y", dy_ptr, ws_ptr)
                args = kept.get((x_ptr, dy_ptr)) or args_for(x_ptr, dy_ptr)
                if paired and w_ptr % (2 * item):
                    check_alignment(
                        (("dw", w_ptr, 2 * item),), "igemm.gpu_wgmma_wrw's paired stores"
                    )
                if direct:
                    args.set_pointers(w_ptr, 0)
                    kernel.launch(args, shared=shared)
                    return
                part_ptr = ws_ptr + part_at
                if fixup:  # each tile's count of arrived parts from zero
                    backend = kernel.backend
                    backend.driver.memset(part_ptr + counters_at, counters, backend.stream_object)
                args.set_pointers(w_ptr, part_ptr)
                kernel.launch(args, shared=shared)
                if reducer is not None:
                    reduce_launch.set_pointers(part_ptr, w_ptr)
                    reducer.launch(reduce_launch)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            kernels=tuple(kernels),
        )


def staged(p: ConvProblem) -> tuple[str, ...]:
    """x and dy where TMA cannot read them as they lie: copied into the workspace as packed
    channels-last copies first (the filter is written through its strides: any layout)."""
    return tuple(name for name in ("x", "y") if not reads_as_is(getattr(p, name)))


def _workspace(p: ConvProblem, config: PerfConfig, streamk: int) -> tuple[list, int, int]:
    """The workspace of ``config``'s solution (``streamk``: its stream-K blocks, or 0): (the
    staged copies, where the partial sums start, the size): the packed copies of x and dy
    (:func:`staged`), then the sums."""
    names = staged(p)
    copies = staged_copies(p, names, "w", 0, _DTYPE_OPTIONS[p.dtype]) if names else []
    part_at = end_of(copies, 0)
    return copies, part_at, part_at + partial_bytes(p, config, streamk)


def _channel_reason(p: ConvProblem) -> str | None:
    """Why x's or dy's channel count does not make TMA rows (16 bytes: a multiple of 8);
    their memory always suits: what TMA cannot read as it lies is copied (:func:`staged`)."""
    item = p.dtype.itemsize
    for name, channels in (("x", p.c), ("dy", p.k)):
        if channels * item % 16:
            return (
                f"{channels} channels of {name}: TMA rows need 16-byte strides "
                f"(a multiple of {16 // item})"
            )
    return None


GPU_SOLVERS = (GpuWgmmaWrwSolver(),)
