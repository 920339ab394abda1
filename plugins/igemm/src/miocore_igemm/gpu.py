"""GPU implicit GEMM on the matrix units: ``igemm.gpu_mma`` (fp16/bf16) and ``igemm.gpu_tf32``.

``kernels/igemm_mma.cu`` computes a 2-D convolution, **forward or backward data**, as one GEMM
per group, ``O[m, col] = sum_r A[m, r] * B[col, r]``:

* forward: ``m = (n, oh, ow)``, ``col`` the output channel, ``r = (fy, fx, c)``; A gathered
  from x on the fly, B read from w;
* backward data: ``m = (n, ih, iw)``, ``col`` the input channel, ``r = (fy, fx, k)``; A gathered
  from dy where ``oh = (ih + ph - fy*dh) / sh`` divides exactly and lies in range (strided and
  dilated problems are correct, the skipped taps only cost time), B is w transposed to
  ``[g][c][fy][fx][k]`` in the workspace by a small kernel first.

Each block of 8 warps computes a ``bm`` x ``bn`` tile (128 x 128, 256 x 128, 128 x 256, ...)
with ``mma.sync`` (m16n8k16 fp16/bf16 with fragments by ``ldmatrix.x4``, m16n8k8 tf32; fp32
accumulators), staging ``bk``-wide reduction slices through a ``stages``-deep cp.async
pipeline in padded (bank-conflict-free) shared memory; ``split`` > 1 splits the reduction
over blocks (fp32 partials in the workspace, summed by a second kernel).

**NHWC (channels-last) is the fast layout**: there the reduction channel is contiguous, so
tiles are staged with 16-byte loads when the channels per group and the strides are multiples
of 16 bytes. Any other layout (NCHW, arbitrary strides) and odd channel counts run through the
same kernel with scalar loads: correct, several times slower.

``igemm.gpu_tf32`` is the same kernel on fp32 tensors with inputs rounded to TF32 (10-bit
mantissa): it only applies when the execution context's math mode is ``"tf32"``
(``Handle(..., math_mode="tf32")``); in the default ``"exact"`` mode it declines, so a caller
asking for fp32 never gets TF32 results silently.

On AMD CDNA2/3 (gfx90a, gfx940-942; ``MIO_MFMA`` in ``miocore_gpu.h``) the same kernel runs
on the matrix cores: the 8 warps become 4 waves of 64, each covering two warps' tiles along N
(so every warp grid has an even number of warps along N, see :func:`warp_grid`), with
``v_mfma_f32_16x16x16f16`` / ``_16x16x16bf16_1k`` and, for fp32, ``v_mfma_f32_16x16x4f32``
(exact fp32: more exact than TF32, so ``igemm.gpu_tf32`` stays correct there). Elsewhere
without ``mma.sync`` (other HIP targets, CUDA before sm_80) a scalar path multiplies the same
tiles, correct and slower. ``-DMIO_MFMA_EMULATE`` (CUDA only) computes the MFMA path's
instructions in software from AMD's documented lane layouts, so that the wave64 path runs and
is tested on NVIDIA GPUs (``tests/test_gpu_igemm_mfma.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from miocore.backends.gpu_kernels import DTYPE_OPTIONS, gemm_fill
from miocore_igemm.gpu_common import KERNEL_DIR as KERNEL_DIR
from miocore_igemm.gpu_common import (
    MAX_SPLIT_WORKSPACE,
    MMA_BK,
    THREADS,
    MmaSolverBase,
    Tf32Only,
    check_alignment,
    pow2_at_least,
    uses_mfma,
)
from miocore_igemm.gpu_common import MFMA_ARCHS as MFMA_ARCHS
from miocore_igemm.gpu_geometry import PARAM_FIELDS as PARAM_FIELDS
from miocore_igemm.gpu_geometry import (
    gemm_params,
    is_phased,
    ktiles,
    min_blocks,
    occupancy,
    pack_params,
    shared_bytes,
    shared_limit,
    split_bytes,
    tap_reach,
    tile_blocks,
    transposed_filter_bytes,
    vector_width,
    warp_grid,
)

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    pass

SOURCE = "igemm/igemm_mma.cu"
_GRID_Y_LIMIT = 65535
#: Block tiles (rows, columns), largest first; each runs on 8 warps (see :func:`warp_grid`).
TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64), (64, 32))
_BK = MMA_BK
_STAGES = (4, 3)
_SPLITS = (1, 2, 4, 8)
_KEYS = ("bm", "bn", "bk", "stages", "split")
#: Fraction of the device's fp16 tensor-core ceiling (``ctx.device.peak_gflops``: 16 x the
#: FP32 lanes x clock, 1070 TFLOP/s on an H200) that the 16-byte path reached on ResNet-50,
#: batch 32, NHWC fp16 (H200, 2026-11-22, geomean over 23 layers: 95 TFLOP/s forward,
#: 70 TFLOP/s backward data). TF32 runs at half the fp16 rate.
_MMA_EFFICIENCY = {Direction.FORWARD: 0.09, Direction.BACKWARD_DATA: 0.065}
#: The scalar-load path (NCHW, odd channel counts): ResNet-50's conv1 (C = 3) forward ran at
#: 13 TFLOP/s on the H200.
_SCALAR_EFFICIENCY = 0.012
#: Per-launch time beyond the roofline (see :meth:`_GpuIgemmBase.wti`).
_FIXED_MS = 0.015
#: Without mma.sync or MFMA: scalar FMAs against the matrix-unit ceiling (not measured).
_NO_MMA_EFFICIENCY = 0.01
#: The MFMA path against the H200's measured fractions (not measured on AMD: no device here);
#: halved because HIP has no cp.async (tiles are staged through registers, no overlap).
_MFMA_FACTOR = 0.5


class _GpuIgemmBase(MmaSolverBase):
    """Shared by both solvers; subclasses set the dtypes and the math-mode condition."""

    # -- applicability -----------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D forward or backward data, any layout (NHWC fast), the solver's dtypes."""
        p = problem
        if p.dtype not in self.dtypes:
            names = "/".join(sorted(d.value for d in self.dtypes))
            return not_applicable(f"{p.dtype.value}: this solver computes {names}")
        reason = self._math_reason(ctx)
        if reason:
            return not_applicable(reason)
        if p.direction not in (Direction.FORWARD, Direction.BACKWARD_DATA):
            return not_applicable(
                f"{p.direction.value}: this kernel computes forward and backward data only"
            )
        if p.spatial_dims != 2:
            return not_applicable(f"{p.spatial_dims}-D problem: the kernel is 2-D only")
        s = gemm_params(p)
        if s["groups"] * -(-s["ocg"] // 32) > _GRID_Y_LIMIT:
            return not_applicable(
                f"{s['groups']} groups x {s['ocg']} columns need more than {_GRID_Y_LIMIT} "
                "blocks along grid y"
            )
        if max(s["ih"], s["iw"], s["oh"], s["ow"]) + max(s["ph"], s["pw"]) >= 1 << 28:
            return not_applicable("spatial extent beyond the kernel's 32-bit coordinates")
        if tap_reach(p) >= 1 << 31:
            return not_applicable(
                f"one tap's reach ({tap_reach(p)} elements) beyond the kernel's 32-bit offsets"
            )
        if not self.perf_config_space(ctx, p):
            return not_applicable("no tile configuration fits (shared-memory or split limits)")
        return APPLICABLE

    # -- configs -------------------------------------------------------------------------------

    def _fits(self, ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig) -> bool:
        s = gemm_params(p)
        bm, bn, bk, split = cfg["bm"], cfg["bn"], cfg["bk"], cfg["split"]
        if shared_bytes(p, cfg) > shared_limit(ctx):
            return False
        if s["groups"] * -(-s["ocg"] // bn) > _GRID_Y_LIMIT:
            return False
        if vector_width(p) == 1 and (bm > 64 or bn > 64 or bk != _BK[p.dtype][0]):
            return False  # scalar loads: keep the per-thread row tables small
        if split > 1:
            if ktiles(p, bk) < 2 * split:
                return False
            if split_bytes(p, split) > MAX_SPLIT_WORKSPACE:
                return False
            # splitting only pays where the tiles leave the device under-filled
            if tile_blocks(p, bm, bn) * split > 2 * max(1, ctx.device.compute_units):
                return False
        return True

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Tiles x reduction width x pipeline depth x split-K that fit, no tile wider than
        the group's columns or taller than the rows need."""
        p = problem
        if p.spatial_dims != 2 or p.dtype not in _BK:
            return []
        if p.direction not in (Direction.FORWARD, Direction.BACKWARD_DATA):
            return []
        s = gemm_params(p)
        out = []
        for bm, bn in TILES:
            if bn > max(32, pow2_at_least(s["ocg"])) or bm > max(64, pow2_at_least(s["m"])):
                continue
            for bk in _BK[p.dtype]:
                for stages in _STAGES:
                    for split in _SPLITS:
                        cfg = PerfConfig(bm=bm, bn=bn, bk=bk, stages=stages, split=split)
                        if self._fits(ctx, p, cfg):
                            out.append(cfg)
        return out

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The rule fitted on ResNet-50 (H200, fp16, batch 32, forward and backward data, 10
        configs per layer; see docs/performance.md): 128-row tiles, 128 columns (64 where the
        group has at most 64), bk 32 and 3 stages (two blocks share an SM, no spills; within
        3% of each layer's best of 10 on average); split-K doubling while the tiles give
        fewer blocks than SMs. Where that config does not fit (scalar loads: tiles up to
        64 x 64), a wave model picks among the space."""
        p = problem
        space = self.perf_config_space(ctx, p)
        if not space:
            return PerfConfig(bm=64, bn=32, bk=_BK.get(p.dtype, (32,))[0], stages=3, split=1)
        s = gemm_params(p)
        sms = max(1, ctx.device.compute_units)
        bn = 64 if s["ocg"] <= 64 else 128
        bk = _BK[p.dtype][0]  # bk 64 spills at two blocks per SM (128 registers)
        blocks = tile_blocks(p, 128, bn)
        split = 1
        while blocks * split < sms and split < 8 and ktiles(p, bk) >= 4 * split:
            split *= 2
        for want in range(split.bit_length() - 1, -1, -1):
            cfg = PerfConfig(bm=128, bn=bn, bk=bk, stages=3, split=1 << want)
            if cfg in space:
                return cfg
        return self._wave_model_default(ctx, p, space)

    def _wave_model_default(
        self, ctx: ExecutionContext, p: ConvProblem, space: list[PerfConfig]
    ) -> PerfConfig:
        """Each tile's estimated time: its waves (blocks over SMs x blocks per SM) times its
        work over its relative efficiency (bigger warp tiles reuse fragments more)."""
        sms = max(1, ctx.device.compute_units)
        efficiency = {
            (256, 128): 1.0,
            (128, 256): 1.0,
            (128, 128): 0.85,
            (128, 64): 0.62,
            (64, 128): 0.62,
            (64, 64): 0.45,
            (64, 32): 0.3,
        }
        bk0 = _BK[p.dtype][0]

        def cost(cfg: PerfConfig) -> float:
            bm, bn = cfg["bm"], cfg["bn"]
            occ = occupancy(ctx, p, cfg)
            blocks = tile_blocks(p, bm, bn) * cfg["split"]
            waves = -(-blocks // (sms * occ))
            per_block = bm * bn * -(-ktiles(p, cfg["bk"]) // cfg["split"])
            return waves * occ * per_block / efficiency[(bm, bn)]

        wanted = [c for c in space if c["bk"] == bk0 and c["stages"] == 4] or space
        return min(wanted, key=lambda c: (cost(c), c["split"], -c["bm"] * c["bn"]))

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """The five keys with values of the search space, fitting this problem."""
        try:
            bm, bn, bk, stages, split = (int(config[k]) for k in _KEYS)
        except (KeyError, TypeError, ValueError):
            return False
        p = problem
        if p.dtype not in _BK or p.spatial_dims != 2:
            return False
        if (bm, bn) not in TILES or bk not in _BK[p.dtype]:
            return False
        if stages not in _STAGES or split not in _SPLITS:
            return False
        return self._fits(ctx, p, config)

    # -- cost ----------------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Backward data: the transposed filter; split-K: one fp32 partial output per split."""
        cfg = self._config(ctx, problem, perf_config)
        return transposed_filter_bytes(problem) + split_bytes(problem, cfg["split"])

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Roofline of the GEMM this kernel runs (dilated strided backward data multiplies
        every tap, sh x sw times the useful flops; undilated runs per stride phase) at the
        tensor-core rate scaled by the measured efficiency of the 16-byte path; far lower for
        scalar loads and without a matrix unit. On AMD MFMA (not measured there) the same
        fractions halved, fp32 against the fp32 ceiling (``v_mfma_f32_16x16x4f32`` runs at the
        packed-FP32 rate the HIP backend reports)."""
        p = problem
        flops = float(p.flops)
        if p.direction is Direction.BACKWARD_DATA and not is_phased(p):
            flops *= p.conv.strides[0] * p.conv.strides[1]
        mfma = uses_mfma(ctx)
        if ctx.backend != "cuda" and not mfma:
            eff = _NO_MMA_EFFICIENCY
        elif vector_width(p) == 1:
            eff = _SCALAR_EFFICIENCY
        else:
            eff = _MMA_EFFICIENCY[p.direction]
        ceiling = DataType.FLOAT16
        if mfma:
            eff *= _MFMA_FACTOR
            ceiling = DataType.FLOAT32 if p.dtype is DataType.FLOAT32 else DataType.FLOAT16
        elif p.dtype is DataType.FLOAT32:
            eff /= 2  # TF32 runs at half the fp16 tensor rate
        eff *= gemm_fill(p)  # a narrow group's GEMM leaves the tiles mostly empty
        ms = ctx.roofline_ms(flops, p.bytes_moved + 2 * transposed_filter_bytes(p), ceiling, eff)
        # launch, pipeline fill and epilogue: the small ResNet-50 layers (under 1 GFLOP) took
        # 15-20 us more than their roofline on the H200
        return ctx.wti(p, ms + _FIXED_MS)

    # -- solution ------------------------------------------------------------------------------

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The GEMM kernel compiled for the tile, pipeline, vector width, element type and
        direction; backward data first transposes w into the workspace; split-K adds the
        reduction kernel."""
        import numpy as np

        p = problem
        cfg = self._config(ctx, p, perf_config)
        s = gemm_params(p)
        bwd = p.direction is Direction.BACKWARD_DATA
        bm, bn, bk, stages, split = (cfg[k] for k in _KEYS)
        wm, wn = warp_grid(bm, bn)
        vec = vector_width(p)
        per_split = -(-ktiles(p, bk) // split)
        options = (
            DTYPE_OPTIONS[p.dtype],
            f"-DMIO_BM={bm}",
            f"-DMIO_BN={bn}",
            f"-DMIO_BK={bk}",
            f"-DMIO_WARPS_M={wm}",
            f"-DMIO_WARPS_N={wn}",
            f"-DMIO_STAGES={stages}",
            f"-DMIO_VEC={vec}",
            f"-DMIO_BWD={int(bwd)}",
            # dilated strided backward data: taps read only where the stride divides
            f"-DMIO_BWD_DIV={int(bwd and not is_phased(p) and max(p.conv.strides) > 1)}",
            f"-DMIO_MIN_BLOCKS={min_blocks(bm, bn)}",
        )
        sms = max(1, ctx.device.compute_units)
        grid = (-(-s["m"] // bm), s["groups"] * -(-s["ocg"] // bn), split * s["phases"])
        kernels = []
        wt_total = int(np.prod(p.w.lengths))
        if bwd:
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name="igemm_mma_wtrans",
                    options=options,
                    grid=(max(1, min(-(-wt_total // 256), 8 * sms)),),
                    block=(256,),
                )
            )
        kernels.append(
            KernelInfo(
                source=SOURCE,
                kernel_name="igemm_mma_main",
                options=options,
                grid=grid,
                block=(THREADS,),
            )
        )
        total = s["mo"] * s["groups"] * s["ocg"]
        if split > 1:
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name="igemm_mma_reduce",
                    options=options,
                    grid=(max(1, min(-(-total // 256), 8 * sms)),),
                    block=(256,),
                )
            )
        params = pack_params({**s, "tiles_per_split": per_split, "splits": split})
        shared = shared_bytes(p, cfg)
        wt_bytes = transposed_filter_bytes(p)
        workspace = wt_bytes + split_bytes(p, split)
        align = 16 if vec > 1 else p.dtype.itemsize

        def factory(compiled: Any) -> Any:
            from miocore.backends.gpu_kernels import KernelArgs

            first = 1 if bwd else 0
            main = compiled[first]
            args = KernelArgs([("ptr", 0)] * 4 + [("bytes", params)])
            rargs = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", params)])
            targs = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", params)])

            def invoker(handle: Any, ip: InvokeParams) -> None:
                a, out = (ip.y, ip.x) if bwd else (ip.x, ip.y)
                check_alignment(
                    (("x", ip.x.ptr, align), ("w", ip.w.ptr, align), ("y", ip.y.ptr, align)),
                    "igemm GPU kernels",
                )
                ws = ip.workspace.ptr if workspace else 0
                if bwd:
                    targs.set_pointers(ip.w.ptr, ws)
                    compiled[0].launch(targs)
                    b = ws
                else:
                    b = ip.w.ptr
                part = ws + wt_bytes if split > 1 else 0
                args.set_pointers(a.ptr, b, out.ptr, part)
                main.launch(args, shared=shared)
                if split > 1:
                    rargs.set_pointers(part, out.ptr)
                    compiled[first + 1].launch(rargs)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            kernels=tuple(kernels),
        )


class GpuMmaIgemmSolver(_GpuIgemmBase):
    """Implicit GEMM on tensor cores, fp16/bf16 with fp32 accumulation (forward and backward
    data; any layout, NHWC fast)."""

    name = "igemm.gpu_mma"
    numerical_notes = frozenset()
    dtypes = frozenset({DataType.FLOAT16, DataType.BFLOAT16})


class GpuTf32IgemmSolver(Tf32Only, _GpuIgemmBase):
    """fp32 convolution through TF32 tensor cores: only in the ``"tf32"`` math mode."""

    name = "igemm.gpu_tf32"
    numerical_notes = frozenset({"tf32"})


GPU_SOLVERS = (GpuMmaIgemmSolver(), GpuTf32IgemmSolver())
