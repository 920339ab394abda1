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

from pathlib import Path
from typing import Any

import numpy as np

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    DataType,
    Direction,
    ExecutionContext,
    InvalidArgumentError,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    TunableSolver,
    not_applicable,
)
from miocore.backends.gpu_kernels import DTYPE_OPTIONS, GPU_BACKENDS

KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "igemm/igemm_mma.cu"
THREADS = 256
#: Dynamic shared memory a block may use without an opt-in (both vendors).
SHARED_LIMIT = 48 * 1024
#: Split-K partials beyond this are not worth the traffic (and the caller's memory).
MAX_SPLIT_WORKSPACE = 256 << 20
_GRID_Y_LIMIT = 65535
#: Block tiles (rows, columns), largest first; each runs on 8 warps (see :func:`warp_grid`).
TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64), (64, 32))
_BK = {DataType.FLOAT16: (32, 64), DataType.BFLOAT16: (32, 64), DataType.FLOAT32: (16, 32)}
_STAGES = (4, 3)
_SPLITS = (1, 2, 4, 8)
_KEYS = ("bm", "bn", "bk", "stages", "split")
_WARP_GRIDS = ((2, 4), (4, 2), (1, 8), (8, 1))
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
#: AMD targets whose kernels take the MFMA path (``MIO_MFMA`` in ``miocore_gpu.h``).
MFMA_ARCHS = frozenset({"gfx90a", "gfx940", "gfx941", "gfx942"})
#: The MFMA path against the H200's measured fractions (not measured on AMD: no device here);
#: halved because HIP has no cp.async (tiles are staged through registers, no overlap).
_MFMA_FACTOR = 0.5


def uses_mfma(ctx: ExecutionContext) -> bool:
    """Whether this context's kernels run on AMD matrix cores (HIP on gfx90a / gfx94x)."""
    return ctx.backend == "hip" and ctx.device.arch.split(":", 1)[0] in MFMA_ARCHS


#: The fields of ``MioIgemmParams`` in ``kernels/igemm_mma.cu``, in declaration order (a CPU
#: test parses the struct and checks this order: the kernel reads them by position).
PARAM_FIELDS = (
    *("n", "groups", "ih", "iw", "icg", "is_n", "is_h", "is_w", "is_c"),
    *("oh", "ow", "ocg", "rh", "rw", "phases", "mo", "os_n", "os_h", "os_w", "os_c"),
    *("bs_col", "bs_y", "bs_x", "bs_c", "bs_grp"),
    *("fy", "fx", "ph", "pw", "sh", "sw", "dh", "dw"),
    *("ws_k", "ws_c", "ws_y", "ws_x"),
    *("m", "kred", "tiles_per_split", "splits"),
)


def pack_params(values: dict[str, int]) -> bytes:
    """``MioIgemmParams`` by value: every field an int64, in :data:`PARAM_FIELDS` order."""
    if set(values) != set(PARAM_FIELDS):
        raise ValueError(f"parameter fields differ: {sorted(set(values) ^ set(PARAM_FIELDS))}")
    return np.array([values[f] for f in PARAM_FIELDS], dtype=np.int64).tobytes()


def gemm_params(p: ConvProblem) -> dict[str, int]:
    """The GEMM view of ``p`` (forward or backward data), every field but the split ones.

    Forward gathers A from x and reads B from w; backward data gathers A from dy (held in y)
    and reads B from w transposed to ``[g][c][fy][fx][k]`` (contiguous, in the workspace).
    """
    n, _, h, w = p.x.lengths
    k, cg, fy, fx = p.w.lengths
    g = p.groups
    kg = k // g
    ho, wo = p.y.lengths[2:]
    xs, ws, ys = p.x.strides, p.w.strides, p.y.strides
    common = {
        "n": n,
        "groups": g,
        "fy": fy,
        "fx": fx,
        "ph": p.conv.pads[0],
        "pw": p.conv.pads[1],
        "sh": p.conv.strides[0],
        "sw": p.conv.strides[1],
        "dh": p.conv.dilations[0],
        "dw": p.conv.dilations[1],
        "ws_k": ws[0],
        "ws_c": ws[1],
        "ws_y": ws[2],
        "ws_x": ws[3],
    }
    if p.direction is Direction.BACKWARD_DATA:
        sh, sw = p.conv.strides
        # one GEMM per stride phase: rows ih = phase + sh * i, taps fy = fy0 + sh * t only
        rh, rw, phases, kred = h, w, 1, fy * fx * kg
        if is_phased(p):
            rh, rw, phases = -(-h // sh), -(-w // sw), sh * sw
            kred = -(-fy // sh) * -(-fx // sw) * kg  # the largest phase's reduction
        return {
            **common,
            **{"ih": ho, "iw": wo, "icg": kg},
            **{"is_n": ys[0], "is_h": ys[2], "is_w": ys[3], "is_c": ys[1]},
            **{"oh": h, "ow": w, "ocg": cg, "rh": rh, "rw": rw, "phases": phases},
            "mo": n * h * w,
            **{"os_n": xs[0], "os_h": xs[2], "os_w": xs[3], "os_c": xs[1]},
            **{"bs_col": fy * fx * kg, "bs_y": fx * kg, "bs_x": kg, "bs_c": 1},
            "bs_grp": cg * fy * fx * kg,
            "m": n * rh * rw,
            "kred": kred,
        }
    return {
        **common,
        **{"ih": h, "iw": w, "icg": cg},
        **{"is_n": xs[0], "is_h": xs[2], "is_w": xs[3], "is_c": xs[1]},
        **{"oh": ho, "ow": wo, "ocg": kg, "rh": ho, "rw": wo, "phases": 1},
        "mo": n * ho * wo,
        **{"os_n": ys[0], "os_h": ys[2], "os_w": ys[3], "os_c": ys[1]},
        **{"bs_col": ws[0], "bs_y": ws[2], "bs_x": ws[3], "bs_c": ws[1]},
        "bs_grp": kg * ws[0],
        "m": n * ho * wo,
        "kred": fy * fx * cg,
    }


def is_phased(p: ConvProblem) -> bool:
    """Backward data with a stride above 1 and no dilation runs as one dense GEMM per stride
    phase (``sh * sw`` of them, grid z); dilated strided problems skip taps instead (slower)."""
    return (
        p.direction is Direction.BACKWARD_DATA
        and max(p.conv.strides) > 1
        and max(p.conv.dilations) == 1
    )


def tap_reach(p: ConvProblem) -> int:
    """The largest offset the kernel adds to a row's (or column's) base pointer in 32-bit
    arithmetic: every tap's displacement plus every reduction channel, in A and in B."""
    s = gemm_params(p)
    fy, fx = s["fy"], s["fx"]
    a = (fy - 1) * s["dh"] * abs(s["is_h"]) + (fx - 1) * s["dw"] * abs(s["is_w"])
    a += s["icg"] * abs(s["is_c"])
    b = (fy - 1) * abs(s["bs_y"]) + (fx - 1) * abs(s["bs_x"]) + s["icg"] * abs(s["bs_c"])
    return max(a, b)


def vector_width(p: ConvProblem) -> int:
    """Elements per 16-byte load when the reduction channels are innermost and they and the
    strides are multiples of 16 bytes, else 1 (scalar loads through any strides)."""
    vec = 16 // p.dtype.itemsize
    s = gemm_params(p)
    if s["is_c"] != 1 or s["bs_c"] != 1 or s["icg"] % vec:
        return 1
    strides = (s["is_n"], s["is_h"], s["is_w"], s["bs_col"], s["bs_y"], s["bs_x"])
    return 1 if any(st % vec for st in strides) else vec


def warp_grid(bm: int, bn: int) -> tuple[int, int]:
    """Warps along rows and columns (8 in all) whose warp tile is most nearly square, rows
    preferred (an A fragment is reused across more columns); each warp tile side a multiple
    of 16 (ldmatrix.x4 loads B for two 8-column tiles at once), and an even number of warps
    along columns (the MFMA path pairs them into waves of 64)."""
    best = None
    for wm, wn in _WARP_GRIDS:
        if bm % (16 * wm) or bn % (16 * wn) or wn % 2:
            continue
        tm, tn = bm // wm, bn // wn
        key = (abs(np.log2(tm / tn)), tm < tn)
        if best is None or key < best[0]:
            best = (key, (wm, wn))
    if best is None:
        raise InvalidArgumentError("no 8-warp grid for this tile", field="bm x bn", value=(bm, bn))
    return best[1]


def min_blocks(bm: int, bn: int) -> int:
    """Blocks per SM the kernel's register budget is bounded for: 2 for warp tiles up to
    64 x 32 (they fit in 128 registers without spills), 1 for 64 x 64 (about 240)."""
    wm, wn = warp_grid(bm, bn)
    return 2 if (bm // wm) * (bn // wn) <= 2048 else 1


def shared_bytes(p: ConvProblem, cfg: PerfConfig) -> int:
    """Dynamic shared memory of one block: ``stages`` x (bm + bn) rows of ``bk`` + 16 B."""
    item = p.dtype.itemsize
    return cfg["stages"] * (cfg["bm"] + cfg["bn"]) * (cfg["bk"] * item + 16)


def shared_limit(ctx: ExecutionContext) -> int:
    """Dynamic shared memory one block may use on this device (with the driver's opt-in above
    48 KiB on CUDA): 227 KiB on sm_90, 163 KiB on sm_80/87, 99 KiB on other sm_8x, 64 KiB LDS
    on AMD."""
    if ctx.backend != "cuda":
        return 64 * 1024
    arch = ctx.device.arch
    if arch.startswith("sm9") or arch.startswith("sm1"):
        return 227 * 1024
    if arch in ("sm80", "sm87"):
        return 163 * 1024
    if arch.startswith("sm8"):
        return 99 * 1024
    return SHARED_LIMIT


def _ktiles(p: ConvProblem, bk: int) -> int:
    return -(-gemm_params(p)["kred"] // bk)


def _blocks(p: ConvProblem, bm: int, bn: int) -> int:
    s = gemm_params(p)
    return -(-s["m"] // bm) * s["groups"] * -(-s["ocg"] // bn) * s["phases"]


def _wt_bytes(p: ConvProblem) -> int:
    """Backward data: the transposed filter, rounded up to 256 bytes (partials follow it)."""
    if p.direction is not Direction.BACKWARD_DATA:
        return 0
    return -(-int(np.prod(p.w.lengths)) * p.dtype.itemsize // 256) * 256


def _split_bytes(p: ConvProblem, split: int) -> int:
    s = gemm_params(p)
    return 0 if split == 1 else split * s["mo"] * s["groups"] * s["ocg"] * 4


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def _occupancy(ctx: ExecutionContext, p: ConvProblem, cfg: PerfConfig) -> int:
    """Blocks per SM: by shared memory and by registers (estimated from the warp tile)."""
    wm, wn = warp_grid(cfg["bm"], cfg["bn"])
    warp_elems = (cfg["bm"] // wm) * (cfg["bn"] // wn)
    regs = 240 if warp_elems >= 4096 else 128 if warp_elems >= 2048 else 96
    by_regs = 65536 // (THREADS * regs)
    by_smem = shared_limit(ctx) // max(1, shared_bytes(p, cfg))
    return max(1, min(by_regs, by_smem, 4))


class _GpuIgemmBase(TunableSolver):
    """Shared by both solvers; subclasses set the dtypes and the math-mode condition."""

    algorithm = Algorithm.IMPLICIT_GEMM
    backends = GPU_BACKENDS
    dtypes: frozenset[DataType] = frozenset()

    # -- applicability -----------------------------------------------------------------------

    def _math_reason(self, ctx: ExecutionContext) -> str | None:
        return None

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
            if _ktiles(p, bk) < 2 * split:
                return False
            if _split_bytes(p, split) > MAX_SPLIT_WORKSPACE:
                return False
            # splitting only pays where the tiles leave the device under-filled
            if _blocks(p, bm, bn) * split > 2 * max(1, ctx.device.compute_units):
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
            if bn > max(32, _pow2_at_least(s["ocg"])) or bm > max(64, _pow2_at_least(s["m"])):
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
        blocks = _blocks(p, 128, bn)
        split = 1
        while blocks * split < sms and split < 8 and _ktiles(p, bk) >= 4 * split:
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
            occ = _occupancy(ctx, p, cfg)
            blocks = _blocks(p, bm, bn) * cfg["split"]
            waves = -(-blocks // (sms * occ))
            per_block = bm * bn * -(-_ktiles(p, cfg["bk"]) // cfg["split"])
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
        return _wt_bytes(problem) + _split_bytes(problem, cfg["split"])

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
        ms = ctx.roofline_ms(flops, p.bytes_moved + 2 * _wt_bytes(p), ceiling, eff)
        # launch, pipeline fill and epilogue: the small ResNet-50 layers (under 1 GFLOP) took
        # 15-20 us more than their roofline on the H200
        return ctx.wti(p, ms + _FIXED_MS)

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
        """The GEMM kernel compiled for the tile, pipeline, vector width, element type and
        direction; backward data first transposes w into the workspace; split-K adds the
        reduction kernel."""
        p = problem
        cfg = self._config(ctx, p, perf_config)
        s = gemm_params(p)
        bwd = p.direction is Direction.BACKWARD_DATA
        bm, bn, bk, stages, split = (cfg[k] for k in _KEYS)
        wm, wn = warp_grid(bm, bn)
        vec = vector_width(p)
        ktiles = _ktiles(p, bk)
        per_split = -(-ktiles // split)
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
        wt_bytes = _wt_bytes(p)
        workspace = wt_bytes + _split_bytes(p, split)
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
                for name, t in (("x", ip.x), ("w", ip.w), ("y", ip.y)):
                    if t.ptr % align:
                        raise InvalidArgumentError(
                            f"igemm GPU kernels need {align}-byte aligned tensors here",
                            field=f"{name} pointer",
                            value=hex(t.ptr),
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
    dtypes = frozenset({DataType.FLOAT16, DataType.BFLOAT16})


class GpuTf32IgemmSolver(_GpuIgemmBase):
    """fp32 convolution through TF32 tensor cores: only in the ``"tf32"`` math mode."""

    name = "igemm.gpu_tf32"
    dtypes = frozenset({DataType.FLOAT32})

    def _math_reason(self, ctx: ExecutionContext) -> str | None:
        mode = getattr(ctx, "math_mode", "exact")
        if mode != "tf32":
            return (
                f"math mode is {mode!r}: TF32 rounds fp32 inputs to 10 mantissa bits; pass "
                "Handle(..., math_mode='tf32') to allow it"
            )
        return None


GPU_SOLVERS = (GpuMmaIgemmSolver(), GpuTf32IgemmSolver())
