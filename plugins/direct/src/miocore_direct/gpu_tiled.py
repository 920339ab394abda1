"""``direct.gpu_tiled``: a shared-memory tiled direct convolution for small 2-D filters.

``kernels/tiled_conv.cu`` has one kernel per direction. A thread block stages a tile of the
read tensor with its halo (and the filter slice) in shared memory and computes a spatial tile
of the written tensor for several channels at once (register accumulators), one thread per
position. Backward weights splits the reduction over images and tiles across blocks; with more
than one split the float partials go to the workspace and a second kernel sums them.

Covers: 2-D problems (3-D goes to ``direct.gpu_naive``: the staged tile is 2-D), filters up to
7x7 in each dimension (any rectangle: 1x7, 3x5, ...), any stride, padding and dilation whose
staged tile fits in 48 KiB of shared memory, groups (depthwise included), any layout and
strides, fp32/fp16/bf16 with fp32 accumulation. The filter size and the tile are compile-time
(one compile per filter shape, tile and element type); stride, padding, dilation and sizes are
kernel arguments.

Performance config: ``th`` x ``tw`` (spatial tile = threads per block), ``kpb`` (written
channels per block), ``cpb`` (reduction channels staged per step).
"""

from __future__ import annotations

import math
from pathlib import Path
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
from miocore.backends.gpu_kernels import DTYPE_OPTIONS, GPU_BACKENDS, KernelArgs, tensor5_bytes

KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "direct/tiled_conv.cu"
_KERNELS = {
    Direction.FORWARD: "tiled_conv_fwd",
    Direction.BACKWARD_DATA: "tiled_conv_bwd",
    Direction.BACKWARD_WEIGHTS: "tiled_conv_wrw",
}
MAX_FILTER = 7
#: Dynamic shared memory a block may use without an opt-in (both vendors).
SHARED_LIMIT = 48 * 1024
#: Accumulators per thread in backward weights (``MIO_WRW_R``), to keep registers bounded.
MAX_WRW_R = 32
#: At most 256 threads: 512-thread blocks ran out of registers on an H200 (launch failure).
_TILES = ((8, 16), (4, 32), (16, 16), (8, 8))
_KPB = (8, 16, 4, 2, 1)
_CPB = (4, 8, 2, 1)
_GRID_YZ_LIMIT = 65535


def _geometry(p: ConvProblem) -> dict[str, int]:
    """Sizes of the canonical 2-D problem."""
    fy, fx = p.w.lengths[2], p.w.lengths[3]
    return {
        "n": p.x.lengths[0],
        "c": p.x.lengths[1],
        "k": p.y.lengths[1],
        "g": p.groups,
        "cg": p.w.lengths[1],
        "kg": p.y.lengths[1] // p.groups,
        "h": p.x.lengths[2],
        "w": p.x.lengths[3],
        "ho": p.y.lengths[2],
        "wo": p.y.lengths[3],
        "fy": fy,
        "fx": fx,
        "ph": p.conv.pads[0],
        "pw": p.conv.pads[1],
        "sh": p.conv.strides[0],
        "sw": p.conv.strides[1],
        "dh": p.conv.dilations[0],
        "dw": p.conv.dilations[1],
    }


def _stage_extent(p: ConvProblem, th: int, tw: int) -> tuple[int, int]:
    """Rows and columns of the tile the kernel stages in shared memory."""
    s = _geometry(p)
    if p.direction is Direction.BACKWARD_DATA:  # the dy window a dx tile's taps reach
        eh = (th - 2 + (s["fy"] - 1) * s["dh"] + s["sh"]) // s["sh"] + 1
        ew = (tw - 2 + (s["fx"] - 1) * s["dw"] + s["sw"]) // s["sw"] + 1
        return eh, ew
    return (th - 1) * s["sh"] + (s["fy"] - 1) * s["dh"] + 1, (tw - 1) * s["sw"] + (s["fx"] - 1) * s[
        "dw"
    ] + 1


def shared_bytes(p: ConvProblem, cfg: PerfConfig) -> int:
    """Dynamic shared memory of one block for ``cfg``."""
    th, tw, kpb, cpb = cfg["th"], cfg["tw"], cfg["kpb"], cfg["cpb"]
    eh, ew = _stage_extent(p, th, tw)
    taps = p.w.lengths[2] * p.w.lengths[3]
    second = kpb * th * tw if p.direction is Direction.BACKWARD_WEIGHTS else kpb * cpb * taps
    return 4 * (cpb * eh * ew + second)


def _written_and_reduced(p: ConvProblem) -> tuple[int, int]:
    """Channels per group of the tensor a block writes, and of the one it reduces over."""
    s = _geometry(p)
    if p.direction is Direction.BACKWARD_DATA:
        return s["cg"], s["kg"]
    return s["kg"], s["cg"]


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def _tiles(p: ConvProblem, th: int, tw: int) -> tuple[int, int]:
    """Spatial tiles (along H, along W) of the tensor the blocks tile."""
    s = _geometry(p)
    h, w = (s["h"], s["w"]) if p.direction is Direction.BACKWARD_DATA else (s["ho"], s["wo"])
    return -(-h // th), -(-w // tw)


def _wrw_split(ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig) -> int:
    """Blocks along the backward-weights reduction: enough to fill the device about 4 times."""
    s = _geometry(p)
    th_n, tw_n = _tiles(p, cfg["th"], cfg["tw"])
    items = s["n"] * th_n * tw_n
    base = s["g"] * -(-s["kg"] // cfg["kpb"]) * -(-s["cg"] // cfg["cpb"])
    wanted = -(-4 * max(1, ctx.device.compute_units) // base)
    return int(max(1, min(items, wanted, 1024)))


class GpuTiledDirectSolver(TunableSolver):
    """Small 2-D filters (up to 7x7) on CUDA and HIP devices, all directions."""

    name = "direct.gpu_tiled"
    numerical_notes = frozenset()
    algorithm = Algorithm.DIRECT
    backends = GPU_BACKENDS

    # -- applicability and configs -----------------------------------------------------------

    def _fits(self, p: ConvProblem, cfg: PerfConfig) -> bool:
        if shared_bytes(p, cfg) > SHARED_LIMIT:
            return False
        written, _ = _written_and_reduced(p)
        s = _geometry(p)
        if p.direction is Direction.BACKWARD_WEIGHTS:
            threads = cfg["th"] * cfg["tw"]
            taps = s["fy"] * s["fx"]
            if -(-cfg["kpb"] * cfg["cpb"] * taps // threads) > MAX_WRW_R:
                return False
            if -(-s["cg"] // cfg["cpb"]) > _GRID_YZ_LIMIT:
                return False
        elif s["n"] > _GRID_YZ_LIMIT:
            return False
        return s["g"] * -(-written // cfg["kpb"]) <= _GRID_YZ_LIMIT

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Tiles x channel blockings that fit, best guesses first; no channel blocking wider
        than the group's channels (rounded up to a power of two)."""
        p = problem
        if p.spatial_dims != 2:
            return []
        written, reduced = _written_and_reduced(p)
        out = []
        for th, tw in _TILES:
            for kpb in _KPB:
                if kpb > max(1, _pow2_at_least(written)):
                    continue
                for cpb in _CPB:
                    if cpb > max(1, _pow2_at_least(reduced)):
                        continue
                    cfg = PerfConfig(th=th, tw=tw, kpb=kpb, cpb=cpb)
                    if self._fits(p, cfg):
                        out.append(cfg)
        return out

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """What measured best on ResNet-50 3x3 layers (H200): a 4x32 tile for wide outputs
        (8x16 below 28 columns and for backward weights), 16 written channels per block (8 for
        backward weights), 4
        reduced channels per step; narrower for narrow groups, else the first config that
        fits."""
        p = problem
        space = self.perf_config_space(ctx, p)
        if not space:
            return PerfConfig(th=8, tw=16, kpb=1, cpb=1)
        written, reduced = _written_and_reduced(p)
        _, tiles_w = _tiles(p, 1, 1)
        wrw = p.direction is Direction.BACKWARD_WEIGHTS
        th, tw = (4, 32) if tiles_w >= 28 and not wrw else (8, 16)
        kpb = 8 if wrw else 16
        preferred = PerfConfig(
            th=th,
            tw=tw,
            kpb=min(kpb, _pow2_at_least(written)),
            cpb=min(4, _pow2_at_least(reduced)),
        )
        return preferred if preferred in space else space[0]

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """Any config with the four keys of sane values that fits this problem."""
        try:
            th, tw, kpb, cpb = (int(config[k]) for k in ("th", "tw", "kpb", "cpb"))
        except (KeyError, TypeError, ValueError):
            return False
        if not (1 <= th * tw <= 1024 and 1 <= kpb <= 64 and 1 <= cpb <= 64):
            return False
        return problem.spatial_dims == 2 and self._fits(problem, config)

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D, filter at most 7x7, and a tile that fits in shared memory."""
        p = problem
        if p.spatial_dims != 2:
            return not_applicable("3-D problems: the staged tile is 2-D (direct.gpu_naive)")
        fy, fx = p.w.lengths[2], p.w.lengths[3]
        if fy > MAX_FILTER or fx > MAX_FILTER:
            return not_applicable(f"filter {fy}x{fx} is larger than {MAX_FILTER}x{MAX_FILTER}")
        if not self.perf_config_space(ctx, p):
            return not_applicable("no tile fits in 48 KiB of shared memory (large dilation)")
        return APPLICABLE

    # -- cost ----------------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Backward weights with more than one split: float partials, one dw per split."""
        p = problem
        if p.direction is not Direction.BACKWARD_WEIGHTS:
            return 0
        cfg = self._config(ctx, p, perf_config)
        split = _wrw_split(ctx, p, cfg)
        return 0 if split == 1 else split * p.w.element_count * 4

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Shared-memory reuse puts it well above the naive kernels (1-3%), well below tuned
        GEMM/tensor-core paths; stride holes waste part of backward data."""
        p = problem
        if p.direction is Direction.BACKWARD_WEIGHTS:
            return 0.05
        if p.direction is Direction.BACKWARD_DATA:
            return 0.08 / math.prod(p.conv.strides)
        return 0.1

    # -- solution ------------------------------------------------------------------------------

    def _config(
        self, ctx: ExecutionContext, p: ConvProblem, perf_config: PerfConfig | None
    ) -> PerfConfig:
        if perf_config is not None and self.is_valid_perf_config(ctx, p, perf_config):
            return perf_config
        return self.default_perf_config(ctx, p)

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The direction's kernel compiled for the filter shape, tile and element type."""
        import numpy as np

        p = problem
        cfg = self._config(ctx, p, perf_config)
        s = _geometry(p)
        th, tw, kpb, cpb = cfg["th"], cfg["tw"], cfg["kpb"], cfg["cpb"]
        tiles_h, tiles_w = _tiles(p, th, tw)
        eh, ew = _stage_extent(p, th, tw)
        written, _ = _written_and_reduced(p)
        k_tiles = -(-written // kpb)
        direction = p.direction
        split = _wrw_split(ctx, p, cfg) if direction is Direction.BACKWARD_WEIGHTS else 1
        if direction is Direction.BACKWARD_WEIGHTS:
            grid = (split, s["g"] * k_tiles, -(-s["cg"] // cpb))
        else:
            grid = (tiles_h * tiles_w, s["g"] * k_tiles, s["n"])
        options = (
            DTYPE_OPTIONS[p.dtype],
            f"-DMIO_FY={s['fy']}",
            f"-DMIO_FX={s['fx']}",
            f"-DMIO_TH={th}",
            f"-DMIO_TW={tw}",
            f"-DMIO_KPB={kpb}",
            f"-DMIO_CPB={cpb}",
        )
        kernels = [
            KernelInfo(
                source=SOURCE,
                kernel_name=_KERNELS[direction],
                options=options,
                grid=grid,
                block=(th * tw,),
            )
        ]
        wcount = p.w.element_count
        if split > 1:
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name="tiled_conv_wrw_reduce",
                    options=options,
                    grid=(max(1, min(-(-wcount // 256), 4096)),),
                    block=(256,),
                )
            )
        tail = np.array(
            [
                s["g"],
                s["ph"],
                s["pw"],
                s["sh"],
                s["sw"],
                s["dh"],
                s["dw"],
                tiles_w,
                tiles_h * tiles_w,
                k_tiles,
                split,
                eh,
                ew,
            ],
            dtype=np.int64,
        )
        params = tensor5_bytes(p.x) + tensor5_bytes(p.w) + tensor5_bytes(p.y) + tail.tobytes()
        shared = shared_bytes(p, cfg)
        workspace = 0 if split == 1 else split * wcount * 4

        def factory(compiled: Any) -> Any:
            main = compiled[0]
            if direction is Direction.BACKWARD_WEIGHTS:
                args = KernelArgs([("ptr", 0)] * 4 + [("bytes", params)])
                if split > 1:
                    reduce = compiled[1]
                    rargs = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", params)])

                    def invoker(handle: Any, ip: InvokeParams) -> None:
                        part = ip.workspace.ptr
                        args.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr, part)
                        main.launch(args, shared=shared)
                        rargs.set_pointers(ip.w.ptr, part)
                        reduce.launch(rargs)

                    return invoker

                def invoker_one(handle: Any, ip: InvokeParams) -> None:
                    args.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr, 0)
                    main.launch(args, shared=shared)

                return invoker_one
            args3 = KernelArgs([("ptr", 0), ("ptr", 0), ("ptr", 0), ("bytes", params)])

            def invoker3(handle: Any, ip: InvokeParams) -> None:
                args3.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr)
                main.launch(args3, shared=shared)

            return invoker3

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            kernels=tuple(kernels),
        )
