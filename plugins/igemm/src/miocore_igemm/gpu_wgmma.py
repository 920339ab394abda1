"""``igemm.gpu_wgmma``: convolution on Hopper's warpgroup tensor cores (sm_90), fed by the
tensor memory accelerator; forward and stride-1 backward data, 2-D and 3-D, fp16/bf16,
channels-last, fp32 accumulation.

``kernels/igemm_wgmma.cu`` computes a tile of ``bm`` output pixels by ``bn`` output channels
per block. The pixels are a box of ``tn`` images x ``th`` rows x ``tw`` columns, so that for
each filter tap and 64-channel slice the input it needs is one rectangular box of the
activation it reads, copied by one TMA load whose origin moves with the tap (the tensor map's
element strides take the convolution's stride, and the hardware writes zeros where the box
leaves the tensor: padding and channel tails need no masks). The filter slice is a second TMA
load. A producer warpgroup issues the loads into a ``stages``-deep ring; two consumer
warpgroups multiply with ``wgmma`` (m64 x ``bn`` x k16), either sharing each tile
(cooperative) or owning alternate tiles (``pingpong``: one multiplies while the other
stores, which is what the layers with few 64-channel slices per tile lacked).

Backward data of a stride-1 layer is the same kernel on a forward problem: dx = conv(dy, w')
with w'[c, r, s, k] = w[k, R-1-r, S-1-s, c] (written into the workspace by a small kernel
first), padding ``dilation x (R - 1) - pad`` and the layer's dilation.

3-D problems run the same kernel built with ``MIO_3D`` (a depth in the pixel box, a 5-D
tensor map, taps over depth too).

Every size, and the pixel box, is a run-time argument; only the tile, depth, cluster size and
element type are compiled in, so one binary serves every problem (the solver is dynamic: the
default find measures it without compiling per problem). The tensor maps hold the tensors'
addresses: the invoker encodes them once per address pair and keeps them.
"""

from __future__ import annotations

import itertools
import struct
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
from miocore_igemm.gpu_common import KERNEL_DIR as KERNEL_DIR
from miocore_igemm.gpu_common import MmaSolverBase, Tf32Only, check_alignment
from miocore_igemm.gpu_wgmma_layout import (
    Copies,
    copies_ms,
    copy_reason,
    with_packed,
)
from miocore_igemm.gpu_wgmma_operands import (
    flipped_filter_bytes,
    flips_filter,
    layout_reason,
    staged,
    tap_stride,
    workspace,
)
from miocore_igemm.gpu_wgmma_plan import (
    _DTYPE_OPTIONS,
    _MAX_BOX,
    _MAX_ELEMENT_STRIDE,
    ROW_BYTES,
    SPLITS,
    STAGES,
    _cdiv,
    _is_sm90,
    _partial_bytes,
    _rate_factor,
    _sms,
    _splits,
    _tiles,
    box_config,
    gemm_view,
    pixel_boxes,
    ranked,
)

SOURCE = "igemm/igemm_wgmma.cu"
KERNEL = "igemm_wgmma_fwd"
FLIP_KERNEL = "igemm_wgmma_wflip"
REDUCE_KERNEL = "igemm_wgmma_reduce"
THREADS = 384  # one producer and two consumer warpgroups
#: Other tiles a normal find measures besides the default (see find_configs).
_ALTERNATIVES = 3
#: The fraction of the fp16 tensor-core ceiling (the CUDA backend's 16 x FP32 lanes x clock)
#: the kernel reaches, fitted on ResNet-50's and VGG-16's 3x3 layers (H200, fp16 and bf16, the
#: default configurations, 2026-11-27): a tile's slices of 64 channels pay a fixed cost each
#: (the barrier round, the epilogue spread over them), so a part of ``n`` slices reaches
#: _EFFICIENCY * n / (n + _SLICE_COST): 0.37 at 9 slices (C = 64), 0.63 at 72 (C = 512).
#: Backward data also flips the filter first.
_EFFICIENCY = 0.70
_SLICE_COST = 8.0
_FLIP_FACTOR = 0.85
_FIXED_MS = 0.008
_KEYS = ("bm", "bn", "stages", "tw", "th", "tn", "persist", "cluster", "split", "pingpong")
_GEOMETRY = struct.Struct("<20i4q")
_GEOMETRY_3D = struct.Struct("<8iq")  # MioWgmmaGeom's depth fields, after the 2-D ones
_FLIP = struct.Struct("<4i4q")  # the flip kernel's MioFlipGeom
_FLIP_3D = struct.Struct("<2iq")
_MAPS_KEPT = 64


class GpuWgmmaSolver(MmaSolverBase):
    """Forward and stride-1 backward-data convolution with ``wgmma`` and TMA on sm_90
    (H100/H200), fp16/bf16, channels-last."""

    name = "igemm.gpu_wgmma"
    backends = frozenset({"cuda"})
    is_dynamic = True
    dtypes = frozenset({DataType.FLOAT16, DataType.BFLOAT16})

    # -- applicability -----------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D or 3-D forward or stride-1 backward data, one group, fp16/bf16, the read activation's
        channels a multiple of 8 and the written one's even, sm_90. Tensors in any layout:
        those the kernel cannot take as they lie (channels not innermost, strides not
        multiples of 16 bytes) are copied through the workspace (:func:`staged`)."""
        p = problem
        if not _is_sm90(ctx):
            return not_applicable(f"{ctx.device.arch}: wgmma and this kernel's TMA need sm_90")
        if p.dtype not in self.dtypes:
            kinds = " and ".join(sorted(d.value for d in self.dtypes))
            return not_applicable(f"{p.dtype.value}: this solver computes {kinds}")
        reason = self._math_reason(ctx)
        if reason:
            return not_applicable(reason)
        if p.direction not in (Direction.FORWARD, Direction.BACKWARD_DATA):
            return not_applicable(
                f"{p.direction.value}: this kernel computes forward and backward data"
            )
        if p.direction is Direction.BACKWARD_DATA and max(p.conv.strides) != 1:
            return not_applicable(f"backward data with stride {p.conv.strides}: stride 1 only")
        if p.spatial_dims not in (2, 3):
            return not_applicable(f"{p.spatial_dims}-D problem: the kernel is 2-D and 3-D")
        if p.groups != 1:
            return not_applicable(f"{p.groups} groups: the kernel computes one")
        reason = layout_reason(p)
        for name in staged(p):
            reason = reason or copy_reason(getattr(p, name), name)
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
        if p.spatial_dims not in (2, 3) or p.direction not in (
            Direction.FORWARD,
            Direction.BACKWARD_DATA,
        ):
            return []
        v = gemm_view(p)
        widest = max(64, 1 << max(0, (v.k - 1).bit_length()))
        out = []
        for (bm, bn, pingpong), depths in STAGES.items():
            if bn > widest:
                continue
            for box in pixel_boxes(v, 3, bm):
                splits = _splits(_sms(ctx), v, bn, box)
                # ping-pong tiles take turns within a block: only persistent blocks have turns
                for stages, persist, cluster, split in itertools.product(
                    depths, (1,) if pingpong else (1, 0), (2, 1), splits
                ):
                    out.append(
                        box_config(
                            v,
                            box,
                            bm=bm,
                            bn=bn,
                            stages=stages,
                            persist=persist,
                            cluster=cluster,
                            split=split,
                            pingpong=pingpong,
                        )
                    )
        return out

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The tile, box and split-K the cost model expects fastest (see :func:`ranked`)."""
        if problem.spatial_dims not in (2, 3):  # declined anyway: any valid config
            return PerfConfig(
                bm=128, bn=128, stages=6, tw=16, th=8, tn=1, persist=1, cluster=1, split=1,
                pingpong=0,
            )  # fmt: skip
        return ranked(ctx, problem)[0]

    def find_configs(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """The cost model's next best tiles (one configuration each): a normal find measures
        them once the default comes near the best. The model ranks tiles of one layer well
        but not always first (VGG-16's conv4_2: 64 x 256 ping-pong 1.2x faster than the
        128 x 128 it puts first); the binaries are the default's kind, compiled once per
        machine, so each costs the find a few runs of the kernel."""
        if problem.spatial_dims not in (2, 3):
            return []
        out: list[PerfConfig] = []
        tiles = set()
        for cfg in ranked(ctx, problem):
            tile = (cfg["bm"], cfg["bn"], cfg["pingpong"])
            if tile not in tiles:
                tiles.add(tile)
                out.append(cfg)
        return out[1 : 1 + _ALTERNATIVES]

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """The ten keys (``pingpong`` 0 where absent: configurations recorded before it);
        a tile with one of its depths; ping-pong with persistent blocks; a box of at most bm
        pixels within the TMA's limits; at least one slice per split-K part."""
        try:
            bm, bn, stages, tw, th, tn, persist, cluster, split, pingpong = _values(config)
            td = int(config.get("td", 1))
        except (KeyError, TypeError, ValueError):
            return False
        p = problem
        if p.spatial_dims not in (2, 3) or stages not in STAGES.get((bm, bn, pingpong), ()):
            return False
        if ("td" in config) != (p.spatial_dims == 3):  # a depth exactly where there is one
            return False
        if persist not in (0, 1) or cluster not in (1, 2) or split not in SPLITS:
            return False
        if pingpong and not persist:
            return False
        v = gemm_view(p)
        if split > v.slices:
            return False
        return (
            min(tw, th, td, tn) >= 1
            and tw * th * td * tn <= bm
            and tw * v.sw <= _MAX_BOX
            and th * v.sh <= _MAX_BOX
            and td * v.sd <= _MAX_BOX
            and tn <= _MAX_BOX
        )

    # -- cost ----------------------------------------------------------------------------------

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The GEMM's roofline at the fp16 tensor-core ceiling times the kernel's expected
        efficiency and the share of the tiles' rows and columns that are real work, plus the
        layout copies (each tensor read and written once, and a launch)."""
        p = problem
        if p.spatial_dims not in (2, 3) or p.direction is Direction.BACKWARD_WEIGHTS:
            return -1.0  # not this solver's: no estimate
        cfg = self.default_perf_config(ctx, p)
        box = (cfg["tw"], cfg["th"], cfg.get("td", 1), cfg["tn"])
        v = gemm_view(p)
        fill = v.n * v.pixels / (_tiles(v, box) * cfg["bm"])
        fill *= v.k / (_cdiv(v.k, cfg["bn"]) * cfg["bn"])
        fill *= v.c / (_cdiv(v.c, v.bk) * v.bk)
        slices = v.slices / cfg["split"]
        flips = flips_filter(p, int(cfg["cluster"]))
        eff = _EFFICIENCY * slices / (slices + _SLICE_COST) * (_FLIP_FACTOR if flips else 1.0)
        moved = p.bytes_moved + (2 * flipped_filter_bytes(p) if flips else 0)
        eff *= _rate_factor(p.dtype)  # of the fp16 tensor-core ceiling
        ms = ctx.roofline_ms(float(p.flops), moved, DataType.FLOAT16, eff * fill)
        return ctx.wti(p, ms + _FIXED_MS + copies_ms(ctx, p, staged(p)))

    # -- solution ------------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Backward data with a flipped copy of the filter (see :func:`flips_filter`): that
        copy; tensors copied to channels-last (:func:`staged`): their copies; split-K: the
        parts' fp32 sums."""
        p = problem
        if p.spatial_dims not in (2, 3):
            return 0
        cfg = self._config(ctx, p, perf_config)
        return workspace(p, int(cfg["cluster"]), int(cfg["split"]))[2]

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The kernel compiled for the tile, depth, cluster and element type (backward data:
        the filter read as it is, or flipped into the workspace first where it cannot be, see
        :func:`flips_filter`); the tensor maps made per address pair at the first call."""
        caller = problem
        cfg = self._config(ctx, caller, perf_config)
        bm, bn, stages, tw, th, tn, persist, cluster, split, pingpong = _values(cfg)
        td = int(cfg.get("td", 1))
        copies, part_at, _ = workspace(caller, cluster, split)
        p = with_packed(caller, tuple(c.name for c in copies))  # what the kernels see
        v = gemm_view(p)
        flip = flips_filter(p, cluster)
        mn_filter = v.flip and not flip  # backward data on the filter as it is
        tiles_q, tiles_p, tiles_d = _cdiv(v.ow, tw), _cdiv(v.oh, th), _cdiv(v.od, td)
        dst = v.dst  # strides (n, c, [d,] h, w)
        steps = v.slices
        slab = v.n * v.pixels * v.k
        geometry = _GEOMETRY.pack(
            v.n, v.oh, v.ow, v.k, v.r, v.s, _cdiv(v.c, v.bk), v.sh, v.sw, v.ph, v.pw, v.dh, v.dw,
            tw, th, tn, tiles_q, tiles_p, split, steps, dst[0], dst[-2], dst[-1], slab,
        )  # fmt: skip
        if v.three:  # MioWgmmaGeom's depth fields (MIO_3D)
            geometry += _GEOMETRY_3D.pack(v.od, v.t, v.sd, v.pd, v.dd, td, tiles_d, 0, dst[2])
        # A work unit: one tile per block of a cluster (consecutive pixel boxes, the same
        # channels), one part of its sum. Persistent: one block per SM walks the units
        # (shared memory allows one); ping-pong, its consumers take alternate units.
        boxes = tiles_q * tiles_p * tiles_d * _cdiv(v.n, tn)
        units = _cdiv(boxes, cluster) * _cdiv(v.k, bn) * split
        sms = max(1, ctx.device.compute_units)
        grid = (cluster * (min(units, sms // cluster) if persist else units),)
        options = (
            _DTYPE_OPTIONS[p.dtype],
            f"-DMIO_BM={bm}",
            f"-DMIO_BN={bn}",
            f"-DMIO_STAGES={stages}",
            f"-DMIO_CLUSTER={cluster}",
            f"-DMIO_PINGPONG={pingpong}",
            f"-DMIO_B_MN={int(mn_filter)}",
            *(("-DMIO_3D=1",) if v.three else ()),
            "--gpu-architecture=sm_90a",  # wgmma and setmaxnreg: the arch-specific target
        )
        shared = stages * (bm + bn) * ROW_BYTES + 1024  # + alignment of the ring to 1 KiB
        item = p.dtype.itemsize
        src = v.src  # strides (n, c, [d,] h, w)
        if v.three:
            x_dims = (v.c, v.iw, v.ih, v.id, v.n)
            x_strides = (src[4] * item, src[3] * item, src[2] * item, src[0] * item)
            x_box = (v.bk, tw * v.sw, th * v.sh, td * v.sd, tn)
            x_steps = (1, v.sw, v.sh, v.sd, 1)
        else:
            x_dims = (v.c, v.iw, v.ih, v.n)
            x_strides = (src[3] * item, src[2] * item, src[0] * item)
            x_box = (v.bk, tw * v.sw, th * v.sh, tn)
            x_steps = (1, v.sw, v.sh, 1)
        w_dims = (v.c, v.taps, v.k)
        w_box = (v.bk, 1, bn // cluster)  # each block of a cluster loads its share
        if flip:  # w' in the workspace: [c][taps][k], contiguous
            w_strides = (v.c * item, v.taps * v.c * item)
        else:  # w[k][tap][c] as it is (backward data: boxes of 64 c x 64 k)
            w_strides = (tap_stride(p) * item, p.w.strides[0] * item)
        if mn_filter:
            w_dims, w_box = (p.c, v.taps, p.k), (64, 1, v.bk)
        kernels = [
            KernelInfo(
                source=SOURCE, kernel_name=KERNEL, options=options, grid=grid, block=(THREADS,)
            )
        ]
        flip_args = b""
        if flip:
            kernels.insert(
                0,
                KernelInfo(
                    source=SOURCE,
                    kernel_name=FLIP_KERNEL,
                    options=options,
                    grid=(_cdiv(p.c, 32), _cdiv(p.k, 32), v.taps),  # 32 x 32 tiles per tap
                    block=(32, 8),
                ),
            )
            ws = p.w.strides  # (k, c, [t,] r, s)
            flip_args = _FLIP.pack(p.k, p.c, v.r, v.s, ws[0], ws[1], ws[-2], ws[-1])
            if v.three:  # MioFlipGeom's depth fields
                flip_args += _FLIP_3D.pack(v.t, 0, ws[2])
        if split > 1:
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name=REDUCE_KERNEL,
                    options=options,
                    grid=(max(1, min(_cdiv(slab // 2, 256), 8 * sms)),),
                    block=(256,),
                )
            )
        kernels = [c.kernel for c in copies] + kernels
        dtype = p.dtype
        pair = 2 * p.dtype.itemsize  # bytes of the epilogue's stores

        def factory(compiled: Any) -> Any:
            from miocore.backends.cuda_tma import tiled_tensor_map
            from miocore.backends.gpu_kernels import KernelArgs

            staging = Copies(copies, compiled[: len(copies)])
            compiled = compiled[len(copies) :]
            kernel = compiled[1 if flip else 0]
            flipper = compiled[0] if flip else None
            reducer = compiled[-1] if split > 1 else None
            flip_launch = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", flip_args)])
            reduce_launch = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", geometry)])
            kept: dict[tuple[int, int], Any] = {}

            def args_for(src_ptr: int, w_ptr: int) -> Any:
                check_alignment(
                    (("activation", src_ptr, 16), ("filter", w_ptr, 16)), "igemm.gpu_wgmma's TMA"
                )
                if len(kept) >= _MAPS_KEPT:
                    kept.clear()
                x_map = tiled_tensor_map(dtype, src_ptr, x_dims, x_strides, x_box, x_steps)
                w_map = tiled_tensor_map(dtype, w_ptr, w_dims, w_strides, w_box, (1, 1, 1))
                maps = [("bytes", x_map), ("bytes", w_map)]
                args = KernelArgs([*maps, ("ptr", 0), ("ptr", 0), ("bytes", geometry)])
                kept[(src_ptr, w_ptr)] = args
                return args

            def invoker(handle: Any, ip: InvokeParams) -> None:
                ws_ptr = ip.workspace.ptr if ip.workspace is not None else 0
                if copies:  # the tensors the kernels cannot take as they lie
                    tensors = {"x": ip.x.ptr, "w": ip.w.ptr, "y": ip.y.ptr}
                    staging.before(tensors, ws_ptr)
                    x_ptr = staging.pointer("x", ip.x.ptr, ws_ptr)
                    w_ptr = staging.pointer("w", ip.w.ptr, ws_ptr)
                    y_ptr = staging.pointer("y", ip.y.ptr, ws_ptr)
                else:
                    x_ptr, w_ptr, y_ptr = ip.x.ptr, ip.w.ptr, ip.y.ptr
                if flip:
                    src_ptr, dst_ptr = y_ptr, x_ptr
                    flip_launch.set_pointers(w_ptr, ws_ptr)
                    flipper.launch(flip_launch)
                    w_ptr = ws_ptr
                elif mn_filter:
                    src_ptr, dst_ptr = y_ptr, x_ptr
                else:
                    src_ptr, dst_ptr = x_ptr, y_ptr
                args = kept.get((src_ptr, w_ptr)) or args_for(src_ptr, w_ptr)
                if dst_ptr % pair:
                    check_alignment((("output", dst_ptr, pair),), "igemm.gpu_wgmma's paired stores")
                if reducer is None:
                    args.set_pointers(dst_ptr, 0)
                    kernel.launch(args, shared=shared)
                else:
                    part_ptr = ws_ptr + part_at
                    args.set_pointers(dst_ptr, part_ptr)
                    kernel.launch(args, shared=shared)
                    reduce_launch.set_pointers(part_ptr, dst_ptr)
                    reducer.launch(reduce_launch)
                if copies:
                    staging.after(tensors, ws_ptr)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=part_at + _partial_bytes(v, split),
            invoker_factory=factory,
            kernels=tuple(kernels),
        )


def _values(config: Any) -> tuple[int, ...]:
    """A configuration's keys in ``_KEYS`` order as integers; ``pingpong`` 0 where absent."""
    return tuple(int(config.get(k, 0) if k == "pingpong" else config[k]) for k in _KEYS)


class GpuWgmmaTf32Solver(Tf32Only, GpuWgmmaSolver):
    """fp32 forward and stride-1 backward data through TF32 ``wgmma`` (k8, 32-channel slices
    of 128 bytes, the tensor cores reading the fp32 bits as TF32), only in the ``"tf32"`` math
    mode; backward data always through the flipped filter (TF32 operands are K-major only)."""

    name = "igemm.gpu_wgmma_tf32"
    numerical_notes = frozenset({"tf32"})


GPU_SOLVERS = (GpuWgmmaSolver(), GpuWgmmaTf32Solver())
