"""``igemm.gpu_wgmma``: forward convolution on Hopper's warpgroup tensor cores (sm_90), fed by
the tensor memory accelerator; fp16/bf16, channels-last, fp32 accumulation.

``kernels/igemm_wgmma.cu`` computes a tile of 128 output pixels by ``bn`` output channels per
block. The pixels are a box of ``tn`` images x ``th`` rows x ``tw`` columns, so that for each
filter tap and 64-channel slice the input it needs is one rectangular box of x, copied by one
TMA load whose origin moves with the tap (the tensor map's element strides take the
convolution's stride, and the hardware writes zeros where the box leaves the tensor: padding
and channel tails need no masks). The filter slice is a second TMA load. A producer warpgroup
issues the loads into a ``stages``-deep ring; two consumer warpgroups multiply with
``wgmma`` (m64 x ``bn`` x k16).

Every size, and the pixel box, is a run-time argument; only ``bn``, ``stages`` and the element
type are compiled in, so one binary serves every problem (the solver is dynamic: the default
find measures it without compiling per problem). The tensor maps hold the tensors' addresses:
the invoker encodes them once per (x, w) address pair and keeps them.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    DataType,
    Direction,
    ExecutionContext,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore.backends.gpu_kernels import DTYPE_OPTIONS
from miocore_igemm.gpu_common import KERNEL_DIR as KERNEL_DIR
from miocore_igemm.gpu_common import check_alignment

SOURCE = "igemm/igemm_wgmma.cu"
KERNEL = "igemm_wgmma_fwd"
THREADS = 384  # one producer and two consumer warpgroups
ROWS = 128  # output pixels of the smaller tile
BK = 64  # channels per pipeline slice: 128 bytes of fp16/bf16, the swizzle width
#: Pipeline depths per tile (pixels bm x channels bn): each fills 160-200 KiB of the 227 KiB an
#: sm_90 block may use (a stage is bm x 128 bytes of pixels and bn x 128 bytes of filter); a
#: consumer holds bm/2 x bn fp32 accumulators in 128 threads (at most 128 each).
STAGES = {(128, 256): (4, 3), (128, 128): (6, 4), (128, 64): (8, 4), (256, 128): (4, 3),
          (256, 64): (5, 4)}  # fmt: skip
#: Relative speed of a tile per unit of work (bigger tiles reuse their operands more).
_TILE_EFFICIENCY = {(128, 256): 1.0, (256, 128): 1.0, (128, 128): 0.85, (256, 64): 0.8,
                    (128, 64): 0.65}  # fmt: skip
#: The fraction of the fp16 tensor-core ceiling the kernel is expected to reach on a large
#: layer (a first estimate; refitted once measured).
_EFFICIENCY = 0.55
_FIXED_MS = 0.008
#: Box extents the TMA allows: 256 elements per dimension, element strides up to 8.
_MAX_BOX = 256
_MAX_ELEMENT_STRIDE = 8
_KEYS = ("bm", "bn", "stages", "tw", "th", "tn", "persist", "cluster")
_GEOMETRY = struct.Struct("<18i3q")
_MAPS_KEPT = 64


def _is_sm90(ctx: ExecutionContext) -> bool:
    return ctx.backend == "cuda" and ctx.device.arch.replace("_", "") == "sm90"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pixel_boxes(p: ConvProblem, count: int = 4, rows: int = ROWS) -> list[tuple[int, int, int]]:
    """The ``count`` boxes ``(tw, th, tn)`` of at most ``rows`` output pixels that cover the
    output in the fewest tiles (wider boxes first among equals: longer runs of stores)."""
    n, (oh, ow) = p.n, p.out_spatial
    sh, sw = p.conv.strides
    scored = []
    for tw in range(1, min(ow, rows) + 1):
        if tw * sw > _MAX_BOX:
            break
        for th in range(1, min(oh, rows // tw) + 1):
            if th * sh > _MAX_BOX:
                break
            tn = min(n, rows // (tw * th), _MAX_BOX)
            tiles = _cdiv(n, tn) * _cdiv(oh, th) * _cdiv(ow, tw)
            scored.append((tiles, -tw, -th, (tw, th, tn)))
    scored.sort()
    return [box for *_, box in scored[:count]]


def _tiles(p: ConvProblem, box: tuple[int, int, int]) -> int:
    tw, th, tn = box
    oh, ow = p.out_spatial
    return _cdiv(p.n, tn) * _cdiv(oh, th) * _cdiv(ow, tw)


class GpuWgmmaForwardSolver(TunableSolver):
    """Forward convolution with ``wgmma`` and TMA on sm_90 (H100/H200), fp16/bf16, NHWC."""

    name = "igemm.gpu_wgmma"
    algorithm = Algorithm.IMPLICIT_GEMM
    backends = frozenset({"cuda"})
    is_dynamic = True
    dtypes = frozenset({DataType.FLOAT16, DataType.BFLOAT16})

    # -- applicability -----------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D forward, one group, fp16/bf16, channels innermost in x, w and y with 16-byte
        strides (C a multiple of 8), an even K, sm_90."""
        p = problem
        if not _is_sm90(ctx):
            return not_applicable(f"{ctx.device.arch}: wgmma and this kernel's TMA need sm_90")
        if p.dtype not in self.dtypes:
            return not_applicable(f"{p.dtype.value}: this kernel computes fp16 and bf16")
        if p.direction is not Direction.FORWARD:
            return not_applicable(f"{p.direction.value}: this kernel computes forward only")
        if p.spatial_dims != 2:
            return not_applicable(f"{p.spatial_dims}-D problem: the kernel is 2-D only")
        if p.groups != 1:
            return not_applicable(f"{p.groups} groups: the kernel computes one")
        reason = _layout_reason(p)
        if reason:
            return not_applicable(reason)
        if max(p.conv.strides) > _MAX_ELEMENT_STRIDE:
            return not_applicable(f"stride {p.conv.strides}: the TMA steps at most 8 elements")
        if max(p.in_spatial + p.out_spatial) + max(p.conv.pads) >= 1 << 28:
            return not_applicable("spatial extent beyond the kernel's 32-bit coordinates")
        return APPLICABLE

    # -- configs -------------------------------------------------------------------------------

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Tiles no wider than K needs x their pipeline depths x the three pixel boxes that
        cover the output in the fewest tiles x persistent or one tile per block."""
        p = problem
        if p.spatial_dims != 2 or p.direction is not Direction.FORWARD:
            return []
        widest = max(64, 1 << max(0, (p.k - 1).bit_length()))
        out = []
        for (bm, bn), depths in STAGES.items():
            if bn > widest:
                continue
            for box in pixel_boxes(p, 3, bm):
                for stages, persist, cluster in itertools.product(depths, (1, 0), (2, 1)):
                    out.append(
                        PerfConfig(
                            bm=bm,
                            bn=bn,
                            stages=stages,
                            tw=box[0],
                            th=box[1],
                            tn=box[2],
                            persist=persist,
                            cluster=cluster,
                        )
                    )
        return out

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The tile and box whose waves of blocks take least time (bigger tiles do more per
        block and reuse more, smaller ones fill more SMs), the deepest pipeline of that tile,
        persistent blocks (the next tile's loads overlap a tile's stores)."""
        p = problem
        sms = max(1, ctx.device.compute_units)
        widest = max(64, 1 << max(0, (p.k - 1).bit_length()))
        best: tuple[float, int, int, tuple[int, int, int]] | None = None
        for bm, bn in STAGES:
            if bn > widest:
                continue
            box = pixel_boxes(p, 1, bm)[0] if p.spatial_dims == 2 else (16, 8, 1)
            blocks = _tiles(p, box) * _cdiv(p.k, bn) if p.spatial_dims == 2 else 1
            cost = _cdiv(blocks, sms) * bm * bn / _TILE_EFFICIENCY[(bm, bn)]
            if best is None or cost < best[0]:
                best = (cost, bm, bn, box)
        assert best is not None
        _, bm, bn, box = best
        return PerfConfig(
            bm=bm,
            bn=bn,
            stages=STAGES[(bm, bn)][0],
            tw=box[0],
            th=box[1],
            tn=box[2],
            persist=1,
            cluster=1,
        )

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """The seven keys; a tile with one of its depths; a box of at most bm pixels within
        the TMA's limits."""
        try:
            bm, bn, stages, tw, th, tn, persist, cluster = (int(config[k]) for k in _KEYS)
        except (KeyError, TypeError, ValueError):
            return False
        p = problem
        if p.spatial_dims != 2 or stages not in STAGES.get((bm, bn), ()):
            return False
        if persist not in (0, 1) or cluster not in (1, 2):
            return False
        sh, sw = p.conv.strides
        return (
            min(tw, th, tn) >= 1
            and tw * th * tn <= bm
            and tw * sw <= _MAX_BOX
            and th * sh <= _MAX_BOX
            and tn <= _MAX_BOX
        )

    def _config(self, ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig | None) -> PerfConfig:
        if cfg is not None and self.is_valid_perf_config(ctx, p, cfg):
            return cfg
        return self.default_perf_config(ctx, p)

    # -- cost ----------------------------------------------------------------------------------

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The GEMM's roofline at the fp16 tensor-core ceiling times the kernel's expected
        efficiency and the share of the tiles' rows and columns that are real work."""
        p = problem
        cfg = self.default_perf_config(ctx, p)
        box = (cfg["tw"], cfg["th"], cfg["tn"])
        oh, ow = p.out_spatial
        fill = p.n * oh * ow / (_tiles(p, box) * cfg["bm"])
        fill *= p.k / (_cdiv(p.k, cfg["bn"]) * cfg["bn"])
        fill *= p.c / (_cdiv(p.c, BK) * BK)
        ms = ctx.roofline_ms(float(p.flops), p.bytes_moved, DataType.FLOAT16, _EFFICIENCY * fill)
        return ctx.wti(p, ms + _FIXED_MS)

    # -- solution ------------------------------------------------------------------------------

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The kernel compiled for the tile width, depth and element type; the tensor maps of
        x and w made per address pair at the first call."""
        p = problem
        cfg = self._config(ctx, p, perf_config)
        bm, bn, stages, tw, th, tn, persist, cluster = (int(cfg[k]) for k in _KEYS)
        oh, ow = p.out_spatial
        ih, iw = p.in_spatial
        r, s = p.filter_spatial
        sh, sw = p.conv.strides
        ph, pw = p.conv.pads
        dh, dw = p.conv.dilations
        xs, ws, ys = p.x.strides, p.w.strides, p.y.strides  # (n, c, h, w) order, elements
        tiles_q, tiles_p = _cdiv(ow, tw), _cdiv(oh, th)
        geometry = _GEOMETRY.pack(
            p.n, oh, ow, p.k, r, s, _cdiv(p.c, BK), sh, sw, ph, pw, dh, dw,
            tw, th, tn, tiles_q, tiles_p, ys[0], ys[2], ys[3],
        )  # fmt: skip
        # A work unit: one tile per block of a cluster (consecutive pixel boxes, the same
        # channels). Persistent: one block per SM walks the units (shared memory allows one).
        units = _cdiv(tiles_q * tiles_p * _cdiv(p.n, tn), cluster) * _cdiv(p.k, bn)
        sms = max(1, ctx.device.compute_units)
        grid = (cluster * (min(units, sms // cluster) if persist else units),)
        options = (
            DTYPE_OPTIONS[p.dtype],
            f"-DMIO_BM={bm}",
            f"-DMIO_BN={bn}",
            f"-DMIO_STAGES={stages}",
            f"-DMIO_CLUSTER={cluster}",
            "--gpu-architecture=sm_90a",  # wgmma and setmaxnreg: the arch-specific target
        )
        shared = stages * (bm + bn) * BK * 2 + 1024  # + alignment of the ring to 1 KiB
        item = p.dtype.itemsize
        x_dims = (p.c, iw, ih, p.n)
        x_strides = (xs[3] * item, xs[2] * item, xs[0] * item)
        x_box = (BK, tw * sw, th * sh, tn)
        x_steps = (1, sw, sh, 1)
        w_dims = (p.c, r * s, p.k)
        w_strides = (_tap_stride(p) * item, ws[0] * item)
        dtype = p.dtype

        def factory(compiled: Any) -> Any:
            from miocore.backends.cuda_tma import tiled_tensor_map
            from miocore.backends.gpu_kernels import KernelArgs

            kernel = compiled[0]
            kept: dict[tuple[int, int], Any] = {}

            def args_for(x_ptr: int, w_ptr: int) -> Any:
                check_alignment((("x", x_ptr, 16), ("w", w_ptr, 16)), "igemm.gpu_wgmma's TMA")
                if len(kept) >= _MAPS_KEPT:
                    kept.clear()
                x_map = tiled_tensor_map(dtype, x_ptr, x_dims, x_strides, x_box, x_steps)
                w_box = (BK, 1, bn // cluster)  # each block of a cluster loads its share
                w_map = tiled_tensor_map(dtype, w_ptr, w_dims, w_strides, w_box, (1, 1, 1))
                args = KernelArgs(
                    [("bytes", x_map), ("bytes", w_map), ("ptr", 0), ("bytes", geometry)]
                )
                kept[(x_ptr, w_ptr)] = args
                return args

            def invoker(handle: Any, ip: InvokeParams) -> None:
                args = kept.get((ip.x.ptr, ip.w.ptr)) or args_for(ip.x.ptr, ip.w.ptr)
                y_ptr = ip.y.ptr
                if y_ptr % 4:
                    check_alignment((("y", y_ptr, 4),), "igemm.gpu_wgmma's paired stores")
                args.set_pointers(y_ptr)
                kernel.launch(args, shared=shared)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=0,
            invoker_factory=factory,
            kernels=(
                KernelInfo(
                    source=SOURCE, kernel_name=KERNEL, options=options, grid=grid, block=(THREADS,)
                ),
            ),
        )


def _layout_reason(p: ConvProblem) -> str | None:
    """Why the tensors' memory does not suit the kernel's TMA loads and paired stores."""
    xs, ws, ys = p.x.strides, p.w.strides, p.y.strides
    if xs[1] != 1 or ws[1] != 1 or ys[1] != 1:
        return "channels are not innermost (the kernel reads and writes channels-last)"
    if p.c % 8:
        return f"C = {p.c}: TMA rows need 16-byte strides (C a multiple of 8)"
    if p.k % 2:
        return f"K = {p.k}: the epilogue stores channel pairs (K even)"
    r, s = p.filter_spatial
    if r > 1 and s > 1 and ws[2] != s * ws[3]:
        return "the filter's taps are not one run (its row stride is not S x its column stride)"
    for name, strides in (("x", (xs[0], xs[2], xs[3])), ("w", (ws[0], _tap_stride(p)))):
        if any(v % 8 for v in strides):
            return f"{name} strides {strides}: TMA needs multiples of 16 bytes"
    if any(v % 2 for v in (ys[0], ys[2], ys[3])):
        return f"y strides {ys}: the epilogue's 4-byte stores need even strides"
    return None


def _tap_stride(p: ConvProblem) -> int:
    """Elements from one filter tap to the next (taps are one run in (fy, fx) order); a 1x1
    filter's is any multiple of 16 bytes."""
    r, s = p.filter_spatial
    ws = p.w.strides
    if s > 1:
        return ws[3]
    if r > 1:
        return ws[2]
    return _cdiv(p.c, 8) * 8


GPU_SOLVERS = (GpuWgmmaForwardSolver(),)
