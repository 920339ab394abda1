"""GPU backward-weights implicit GEMM on the matrix units: ``igemm.gpu_mma_wrw`` (fp16/bf16) and
``igemm.gpu_tf32_wrw`` (fp32 through TF32, only in the ``"tf32"`` math mode).

``kernels/igemm_wrw.cu`` computes ``dW[k, r] = sum_m dy[m, k] * x[m, r]`` per group, with
``k`` the group's output channels (GEMM rows), ``r = (fy, fx, c)`` (GEMM columns, Y*X*Cg) and
the reduction over ``m = (n, oh, ow)`` (N*Ho*Wo, long). Blocks of 8 warps compute a ``bm`` x
``bn`` tile of dW with ``mma.sync`` (m16n8k16 fp16/bf16, m16n8k8 tf32; fp32 accumulators),
staging ``bk`` reduction rows per stage through a ``stages``-deep cp.async pipeline; the
fragments are read transposed from shared memory (``ldmatrix.trans``). The reduction is split
over ``split`` blocks (grid z); the partial tiles go to an fp32 workspace, either added
atomically into one copy (``atomic`` = 1, cleared by a first kernel) or each split into its own
slab (``atomic`` = 0, deterministic), and a last kernel sums, casts and stores dW.

Any layout is correct: dy and x are read with 16-byte vectors where the channels are innermost
and the group's channels and strides are multiples of 16 bytes (NHWC), element by element
otherwise (NCHW: slower). 2-D only (3-D declines). On AMD CDNA2/3 (gfx90a, gfx940-942) the
kernel runs on the matrix cores: 4 waves of 64, each covering two warps' tiles along N, with
``v_mfma_f32_16x16x16f16`` / ``_bf16_1k`` and ``v_mfma_f32_16x16x4f32`` (exact fp32) for fp32.
Elsewhere without ``mma.sync`` (other HIP targets, CUDA before sm_80) a scalar path multiplies
the same tiles (correct, slow).
"""

from __future__ import annotations

import functools
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
from miocore.backends.gpu_kernels import DTYPE_OPTIONS, gemm_fill
from miocore_igemm.gpu_common import KERNEL_DIR as KERNEL_DIR
from miocore_igemm.gpu_common import (
    MAX_SPLIT_WORKSPACE,
    MMA_BK,
    SHARED_LIMIT,
    THREADS,
    MmaSolverBase,
    Tf32Only,
    check_alignment,
    pack_fields,
    pow2_at_least,
    uses_mfma,
)

SOURCE = "igemm/igemm_wrw.cu"
#: What a block may opt in to on NVIDIA GPUs, by compute capability (the CUDA backend sets
#: MAX_DYNAMIC_SHARED_SIZE_BYTES for launches above 48 KiB).
_CUDA_SHARED = {90: 227 * 1024, 80: 163 * 1024, 87: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024}
#: Shared-memory row padding in elements (kernel's MIO_PAD).
PAD = 8
_GRID_LIMIT = 65535
_INT32 = 2**31 - 1
_BM = (256, 128, 64)
_BN = (256, 128, 64)
_BK = MMA_BK
_STAGES = (4, 3, 2)
_SPLITS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_KEYS = ("bm", "bn", "bk", "stages", "split", "atomic")

#: The fields of ``MioWrwParams`` in ``kernels/igemm_wrw.cu``, in declaration order (a CPU test
#: parses the struct and checks this order: the kernel reads them by position).
PARAM_FIELDS = (
    *("n", "c", "h", "w", "k", "fy", "fx", "ho", "wo", "groups", "cg", "kg"),
    *("ph", "pw", "sh", "sw", "dh", "dw"),
    *("xs_n", "xs_c", "xs_h", "xs_w", "ys_n", "ys_c", "ys_h", "ys_w"),
    *("ws_k", "ws_c", "ws_y", "ws_x"),
    *("m", "r", "tiles_per_split", "splits", "atomic"),
)


def pack_params(values: dict[str, int]) -> bytes:
    """``MioWrwParams`` by value: every field an int64, in :data:`PARAM_FIELDS` order."""
    return pack_fields(PARAM_FIELDS, values)


def geometry(p: ConvProblem) -> dict[str, int]:
    """Sizes of the GEMM view: ``kg`` rows, ``r`` columns, ``m`` reduction, per group ``g``."""
    n, c, h, w = p.x.lengths
    k, cg, fy, fx = p.w.lengths
    ho, wo = p.y.lengths[2], p.y.lengths[3]
    return {
        **{"n": n, "c": c, "h": h, "w": w, "k": k, "fy": fy, "fx": fx, "ho": ho, "wo": wo},
        "g": p.groups,
        "cg": cg,
        "kg": k // p.groups,
        "m": n * ho * wo,
        "r": fy * fx * cg,
    }


def vector_widths(p: ConvProblem) -> tuple[int, int]:
    """Elements per load of dy and of x: 16 bytes when that tensor's channels are innermost
    and the group's channels and the other strides are multiples of 16 bytes, else 1."""
    vec = 16 // p.dtype.itemsize
    s = geometry(p)

    def width(desc: Any, per_group: int) -> int:
        st = desc.strides
        if st[1] != 1 or per_group % vec or any(v % vec for v in (st[0], *st[2:])):
            return 1
        return vec

    return width(p.y, s["kg"]), width(p.x, s["cg"])


def shared_bytes(p: ConvProblem, cfg: PerfConfig) -> int:
    """Dynamic shared memory of one block: ``stages`` x ``bk`` rows of (bm + bn + 2 pads)."""
    return cfg["stages"] * cfg["bk"] * (cfg["bm"] + cfg["bn"] + 2 * PAD) * p.dtype.itemsize


def _rtiles(p: ConvProblem, bk: int) -> int:
    return -(-geometry(p)["m"] // bk)


def _blocks(p: ConvProblem, bm: int, bn: int) -> int:
    s = geometry(p)
    return s["g"] * -(-s["kg"] // bm) * -(-s["r"] // bn)


def split_workspace(p: ConvProblem, split: int, atomic: int) -> int:
    """Bytes of fp32 workspace: none without split-K, one K x R copy when atomic, else one
    copy per split."""
    if split == 1:
        return 0
    s = geometry(p)
    return (1 if atomic else split) * s["k"] * s["r"] * 4


def shared_limit(ctx: ExecutionContext) -> int:
    """Dynamic shared memory per block on this device: the opt-in maximum of the NVIDIA
    architecture (``sm90``: 227 KiB), 48 KiB elsewhere."""
    arch = ctx.device.arch
    if ctx.backend == "cuda" and arch.startswith("sm"):
        digits = "".join(ch for ch in arch if ch.isdigit())
        if digits:
            return _CUDA_SHARED.get(int(digits), SHARED_LIMIT)
    return SHARED_LIMIT


def _tile_rank(p: ConvProblem, tile: tuple[int, int]) -> tuple[int, int]:
    """Bigger tiles first; between equal areas, the longer side along the larger GEMM
    dimension (the order the benchmark sweeps tiles in)."""
    s = geometry(p)
    bm, bn = tile
    return (bm * bn, bm if s["kg"] >= s["r"] else bn)


def default_tile(p: ConvProblem) -> tuple[int, int]:
    """128 rows when the group has at least 128 output channels, else 64; 128 columns when
    Y*X*Cg exceeds 4 x Kg (3x3 filters; not the 1x1 expansions, where it is exactly 4 x),
    else 64. On the H200 (ResNet-50, fp16, batch 32) 128 x 64 (4 x 2 warps of 32 x 32) won 14
    of 23 layers, 128 x 128 the 3x3 layers with 128-256 output channels; the 256-wide tiles
    (64 x 64 per warp, one block per SM) never won."""
    s = geometry(p)
    return (128 if s["kg"] >= 128 else 64, 128 if s["r"] > 4 * s["kg"] else 64)


def default_split(ctx: ExecutionContext, p: ConvProblem, bm: int, bn: int) -> int:
    """Split-K: the largest power of two up to 128 with tiles x split <= 1.5 x 2 x SMs (two
    blocks of these tiles are resident per SM), except that 2 becomes 1 (a second slab and the
    summing kernel cost more than half a wave on the H200)."""
    sms = max(1, ctx.device.compute_units)
    blocks = _blocks(p, bm, bn)
    split = 1
    while split < 128 and blocks * split * 2 <= 3 * sms:
        split *= 2
    return 1 if split == 2 else split


def _fits(p: ConvProblem, cfg: PerfConfig, limit: int) -> bool:
    s = geometry(p)
    if cfg["bm"] * cfg["bn"] > 256 * 128:
        return False  # 64 x 64 fp32 accumulators per thread at most
    if shared_bytes(p, cfg) > limit:
        return False
    if s["g"] * -(-s["kg"] // cfg["bm"]) > _GRID_LIMIT:
        return False
    if -(-s["r"] // cfg["bn"]) > 2**31 - 1:
        return False
    veca, vecb = vector_widths(p)
    # scalar loads: keep the per-thread row table (bk x tile columns / 256 rows) small
    if veca == 1 and (cfg["bm"] > 64 or cfg["bk"] > 32):
        return False
    if vecb == 1 and (cfg["bn"] > 64 or cfg["bk"] > 32):
        return False
    split, atomic = cfg["split"], cfg["atomic"]
    if split == 1:
        return atomic == 0
    if _rtiles(p, cfg["bk"]) < 4 * split:
        return False
    return split_workspace(p, split, atomic) <= MAX_SPLIT_WORKSPACE


@functools.lru_cache(maxsize=1024)
def _space(problem: ConvProblem, limit: int) -> tuple[PerfConfig, ...]:
    """:meth:`_GpuWrwBase.perf_config_space` within ``limit`` bytes of shared memory."""
    p = problem
    if p.spatial_dims != 2 or p.dtype not in _BK or p.direction is not Direction.BACKWARD_WEIGHTS:
        return ()
    s = geometry(p)
    out = []
    for bm in _BM:
        if bm > max(64, pow2_at_least(s["kg"])):
            continue
        for bn in _BN:
            if bn > max(64, pow2_at_least(s["r"])):
                continue
            for bk in _BK[p.dtype]:
                for stages in _STAGES:
                    for split in _SPLITS:
                        for atomic in (1, 0):
                            cfg = PerfConfig(
                                bm=bm, bn=bn, bk=bk, stages=stages, split=split, atomic=atomic
                            )
                            if _fits(p, cfg, limit):
                                out.append(cfg)
    return tuple(out)


class _GpuWrwBase(MmaSolverBase):
    """Shared by both solvers; subclasses set the dtypes and the math-mode condition."""

    # -- applicability -----------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D backward weights in the solver's dtypes, any layout, 32-bit index ranges."""
        p = problem
        if p.direction is not Direction.BACKWARD_WEIGHTS:
            return not_applicable(f"backward weights only (got {p.direction.value})")
        if p.dtype not in self.dtypes:
            names = "/".join(sorted(d.value for d in self.dtypes))
            return not_applicable(f"{p.dtype.value}: this solver computes {names}")
        reason = self._math_reason(ctx)
        if reason:
            return not_applicable(reason)
        if p.spatial_dims != 2:
            return not_applicable("2-D problems only (3-D: not yet)")
        s = geometry(p)
        if s["m"] > _INT32 - 1024 or s["r"] > _INT32 or s["k"] * s["r"] > _INT32:
            return not_applicable("N*Ho*Wo or K*Y*X*C/groups exceeds the kernel's 32-bit indices")
        if not self.perf_config_space(ctx, p):
            return not_applicable("no tile configuration fits (grid or shared-memory limits)")
        return APPLICABLE

    # -- configs -------------------------------------------------------------------------------

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Tiles x reduction rows per stage x pipeline depth x split-K (atomic or slabs) that
        fit, no tile wider than the group's channels or filter columns need (the same for
        every call alike: remembered, a find asks for it several times per problem)."""
        return list(_space(problem, shared_limit(ctx)))

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """:func:`default_tile` (narrower where the scalar load path or the space requires),
        the smallest bk at the deepest pipeline that fits, :func:`default_split` with
        per-split slabs (deterministic; they beat atomic adds on the H200). Fitted on the
        H200 sweep of ResNet-50's layers (fp16, batch 32): geomean cuDNN/miocore 0.358 with
        this rule against 0.362 for the best of ~25 configs per layer."""
        p = problem
        space = self.perf_config_space(ctx, p)
        if not space:
            return PerfConfig(bm=64, bn=64, bk=32, stages=2, split=1, atomic=0)
        bm, bn = default_tile(p)
        for tm, tn in dict.fromkeys([(bm, bn), (64, bn), (bm, 64), (64, 64)]):
            fitting = [c for c in space if c["bm"] == tm and c["bn"] == tn and c["atomic"] == 0]
            if not fitting:
                continue
            bk = min(c["bk"] for c in fitting)
            split = default_split(ctx, p, tm, tn)
            for want in sorted({c["split"] for c in fitting if c["split"] <= split}, reverse=True):
                cands = [c for c in fitting if c["split"] == want and c["bk"] == bk]
                if cands:
                    return max(cands, key=lambda c: c["stages"])
        return space[0]

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """The six keys with values of the search space, fitting this problem."""
        try:
            bm, bn, bk, stages, split, atomic = (int(config[k]) for k in _KEYS)
        except (KeyError, TypeError, ValueError):
            return False
        p = problem
        if p.dtype not in _BK or p.spatial_dims != 2:
            return False
        if bm not in _BM or bn not in _BN or bk not in _BK[p.dtype]:
            return False
        if stages not in _STAGES or split not in _SPLITS or atomic not in (0, 1):
            return False
        return _fits(p, config, shared_limit(ctx))

    # -- cost ----------------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Split-K: one fp32 copy of dW (atomic) or one per split."""
        cfg = self._config(ctx, problem, perf_config)
        return split_workspace(problem, cfg["split"], cfg["atomic"])

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Roofline at the efficiency measured on the H200 (fp16, ResNet-50, default configs:
        about 0.15 of the dense fp16 rate on 16-byte loads, 0.02 on scalar ones) plus ~18 us of
        fixed cost (the intercept of time against flops there); TF32 (not timed yet) assumed
        at the fp16 fraction. AMD MFMA (gfx90a/gfx94x, not measured): half those fractions
        (no cp.async there); other HIP targets run the scalar fallback."""
        p = problem
        mfma = uses_mfma(ctx)
        if ctx.backend != "cuda" and not mfma:
            return ctx.wti(p, ctx.roofline_ms(p.flops, p.bytes_moved, p.dtype, 0.005))
        veca, vecb = vector_widths(p)
        efficiency = 0.15 if veca > 1 and vecb > 1 else 0.02
        if mfma:
            efficiency /= 2
        efficiency *= gemm_fill(p)  # a narrow group's GEMM leaves the tiles mostly empty
        predicted = ctx.roofline_ms(p.flops, p.bytes_moved, p.dtype, efficiency) + 0.018
        return ctx.wti(p, predicted)

    # -- solution ------------------------------------------------------------------------------

    def params(self, p: ConvProblem, cfg: PerfConfig) -> dict[str, int]:
        """The kernel's ``MioWrwParams`` values for this problem and config."""
        s = geometry(p)
        rtiles = _rtiles(p, cfg["bk"])
        xs, ys, ws = p.x.strides, p.y.strides, p.w.strides
        return {
            **{f: s[f] for f in ("n", "c", "h", "w", "k", "fy", "fx", "ho", "wo", "cg", "kg")},
            "groups": s["g"],
            "ph": p.conv.pads[0],
            "pw": p.conv.pads[1],
            "sh": p.conv.strides[0],
            "sw": p.conv.strides[1],
            "dh": p.conv.dilations[0],
            "dw": p.conv.dilations[1],
            **{f"xs_{a}": xs[i] for i, a in enumerate("nchw")},
            **{f"ys_{a}": ys[i] for i, a in enumerate("nchw")},
            **{f"ws_{a}": ws[i] for i, a in enumerate("kcyx")},
            "m": s["m"],
            "r": s["r"],
            "tiles_per_split": -(-rtiles // cfg["split"]),
            "splits": cfg["split"],
            "atomic": cfg["atomic"] if cfg["split"] > 1 else 0,
        }

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The wrw kernel compiled for the tile, pipeline, vector widths and element type; with
        split-K also the clearing kernel (atomic) and the summing/casting kernel."""
        p = problem
        cfg = self._config(ctx, p, perf_config)
        s = geometry(p)
        bm, bn, bk, stages, split, atomic = (cfg[k] for k in _KEYS)
        veca, vecb = vector_widths(p)
        options = (
            DTYPE_OPTIONS[p.dtype],
            f"-DMIO_BM={bm}",
            f"-DMIO_BN={bn}",
            f"-DMIO_BK={bk}",
            f"-DMIO_STAGES={stages}",
            f"-DMIO_VECA={veca}",
            f"-DMIO_VECB={vecb}",
        )
        grid = (-(-s["r"] // bn), s["g"] * -(-s["kg"] // bm), split)
        total = s["k"] * s["r"]
        small = (max(1, min(-(-total // 256), 8 * max(1, ctx.device.compute_units))),)

        def kernel(name: str, grid: tuple[int, ...], block: int) -> KernelInfo:
            return KernelInfo(
                source=SOURCE, kernel_name=name, options=options, grid=grid, block=(block,)
            )

        kernels = [kernel("igemm_wrw", grid, THREADS)]
        if split > 1:
            if atomic:
                kernels.append(kernel("igemm_wrw_zero", small, 256))
            kernels.append(kernel("igemm_wrw_reduce", small, 256))
        params = pack_params(self.params(p, cfg))
        shared = shared_bytes(p, cfg)
        workspace = split_workspace(p, split, atomic)
        # 16-byte loads need 16-byte aligned tensors (dy: veca, x: vecb)
        align = {"x": p.dtype.itemsize * vecb, "y": p.dtype.itemsize * veca}

        def factory(compiled: Any) -> Any:
            from miocore.backends.gpu_kernels import KernelArgs

            main = compiled[0]
            args = KernelArgs([("ptr", 0)] * 4 + [("bytes", params)])
            zargs = KernelArgs([("ptr", 0), ("bytes", params)])
            rargs = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", params)])

            def invoker(handle: Any, ip: InvokeParams) -> None:
                check_alignment(
                    (("x", ip.x.ptr, align["x"]), ("y", ip.y.ptr, align["y"])), "igemm wrw kernels"
                )
                part = ip.workspace.ptr if split > 1 else 0
                if split > 1 and atomic:
                    zargs.set_pointers(part)
                    compiled[1].launch(zargs)
                args.set_pointers(ip.x.ptr, ip.y.ptr, ip.w.ptr, part)
                main.launch(args, shared=shared)
                if split > 1:
                    rargs.set_pointers(part, ip.w.ptr)
                    compiled[-1].launch(rargs)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            kernels=tuple(kernels),
            perf_config=cfg,
        )


class GpuMmaWrwSolver(_GpuWrwBase):
    """Backward-weights implicit GEMM on tensor cores, fp16/bf16 with fp32 accumulation."""

    name = "igemm.gpu_mma_wrw"
    numerical_notes = frozenset({"nondeterministic"})
    dtypes = frozenset({DataType.FLOAT16, DataType.BFLOAT16})


class GpuTf32WrwSolver(Tf32Only, _GpuWrwBase):
    """fp32 backward weights through TF32 tensor cores: only in the ``"tf32"`` math mode."""

    name = "igemm.gpu_tf32_wrw"
    numerical_notes = frozenset({"tf32", "nondeterministic"})


GPU_WRW_SOLVERS = (GpuMmaWrwSolver(), GpuTf32WrwSolver())
