"""GPU implicit GEMM on the matrix units: ``igemm.gpu_mma`` (fp16/bf16) and ``igemm.gpu_tf32``.

``kernels/igemm_mma.cu`` computes a forward convolution over channels-innermost tensors (NHWC
x and y, KYXC-ordered w: every tensor's channel stride is 1) as one GEMM per group,
``Y[m, k] = sum_r A[m, r] * B[k, r]`` with ``m = (n, oh, ow)`` (M = N*Ho*Wo), ``k`` the group's
output channels and ``r = (fy, fx, c)`` (Y*X*Cg, gathered from x on the fly). Each block of 4
warps computes a ``bm`` x ``bn`` tile with ``mma.sync`` (m16n8k16 fp16/bf16, m16n8k8 tf32;
fp32 accumulators), staging ``bk``-wide reduction slices through a ``stages``-deep cp.async
pipeline; ``split`` > 1 splits the reduction over blocks (fp32 partials in the workspace,
summed by a second kernel). Loads are 16-byte vectors when the group's channels and the
strides are multiples of 16 bytes, else scalar.

``igemm.gpu_tf32`` is the same kernel on fp32 tensors with inputs rounded to TF32 (10-bit
mantissa): it only applies when the execution context's math mode is ``"tf32"``
(``Handle(..., math_mode="tf32")``); in the default ``"exact"`` mode it declines, so a caller
asking for fp32 never gets TF32 results silently.

Without ``mma.sync`` (HIP, CUDA before sm_80) the kernel multiplies the same tiles with a
scalar path (``MIO_MMA_SYNC`` in ``miocore_gpu.h``), so it stays correct there, only slower.
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
THREADS = 128
#: Dynamic shared memory a block may use without an opt-in (both vendors).
SHARED_LIMIT = 48 * 1024
#: Split-K partials beyond this are not worth the traffic (and the caller's memory).
MAX_SPLIT_WORKSPACE = 256 << 20
_GRID_Y_LIMIT = 65535
_BM = (128, 64)
_BN = (128, 64, 32)
_BK = {DataType.FLOAT16: (32, 64), DataType.BFLOAT16: (32, 64), DataType.FLOAT32: (16, 32)}
_STAGES = (4, 3, 2)
_SPLITS = (1, 2, 4, 8)
_KEYS = ("bm", "bn", "bk", "stages", "split")


#: The fields of ``MioIgemmParams`` in ``kernels/igemm_mma.cu``, in declaration order (a CPU
#: test parses the struct and checks this order: the kernel reads them by position).
PARAM_FIELDS = (
    *("n", "c", "h", "w", "k", "fy", "fx", "ho", "wo", "groups", "cg", "kg"),
    *("ph", "pw", "sh", "sw", "dh", "dw"),
    *("xs_n", "xs_h", "xs_w", "ws_k", "ws_y", "ws_x", "ys_n", "ys_h", "ys_w"),
    *("m", "kred", "tiles_per_split", "splits"),
)


def pack_params(values: dict[str, int]) -> bytes:
    """``MioIgemmParams`` by value: every field an int64, in :data:`PARAM_FIELDS` order."""
    if set(values) != set(PARAM_FIELDS):
        raise ValueError(f"parameter fields differ: {sorted(set(values) ^ set(PARAM_FIELDS))}")
    return np.array([values[f] for f in PARAM_FIELDS], dtype=np.int64).tobytes()


def _geometry(p: ConvProblem) -> dict[str, int]:
    n, c, h, w = p.x.lengths
    k, cg, fy, fx = p.w.lengths
    return {
        "n": n,
        "c": c,
        "h": h,
        "w": w,
        "k": k,
        "fy": fy,
        "fx": fx,
        "ho": p.y.lengths[2],
        "wo": p.y.lengths[3],
        "g": p.groups,
        "cg": cg,
        "kg": k // p.groups,
        "m": n * p.y.lengths[2] * p.y.lengths[3],
        "kred": fy * fx * cg,
    }


def vector_width(p: ConvProblem) -> int:
    """Elements per 16-byte load when channels and strides allow it, else 1."""
    vec = 16 // p.dtype.itemsize
    s = _geometry(p)
    strides = [*p.x.strides[:1], *p.x.strides[2:], *p.w.strides[:1], *p.w.strides[2:]]
    if s["cg"] % vec or any(st % vec for st in strides):
        return 1
    return vec


def shared_bytes(p: ConvProblem, cfg: PerfConfig) -> int:
    """Dynamic shared memory of one block: ``stages`` x (bm + bn) rows of ``bk`` + 16 B."""
    item = p.dtype.itemsize
    return cfg["stages"] * (cfg["bm"] + cfg["bn"]) * (cfg["bk"] * item + 16)


def _ktiles(p: ConvProblem, bk: int) -> int:
    return -(-_geometry(p)["kred"] // bk)


def _split_workspace(p: ConvProblem, split: int) -> int:
    s = _geometry(p)
    return 0 if split == 1 else split * s["m"] * s["k"] * 4


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


class _GpuIgemmBase(TunableSolver):
    """Shared by both solvers; subclasses set the dtypes and the math-mode condition."""

    algorithm = Algorithm.IMPLICIT_GEMM
    backends = GPU_BACKENDS
    dtypes: frozenset[DataType] = frozenset()

    # -- applicability -----------------------------------------------------------------------

    def _math_reason(self, ctx: ExecutionContext) -> str | None:
        return None

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D forward, channels innermost in x, w and y (NHWC), the solver's dtypes."""
        p = problem
        if p.dtype not in self.dtypes:
            names = "/".join(sorted(d.value for d in self.dtypes))
            return not_applicable(f"{p.dtype.value}: this solver computes {names}")
        reason = self._math_reason(ctx)
        if reason:
            return not_applicable(reason)
        if p.direction is not Direction.FORWARD:
            return not_applicable("forward only so far (backward data/weights: not yet)")
        if p.spatial_dims != 2:
            return not_applicable("2-D problems only so far")
        if any(t.strides[1] != 1 for t in (p.x, p.w, p.y)):
            return not_applicable(
                "needs channels innermost in x, w and y (NHWC / channels_last; NCHW: not yet)"
            )
        if not self.perf_config_space(ctx, p):
            return not_applicable("no tile configuration fits (grid or shared-memory limits)")
        return APPLICABLE

    # -- configs -------------------------------------------------------------------------------

    def _fits(self, p: ConvProblem, cfg: PerfConfig) -> bool:
        s = _geometry(p)
        if shared_bytes(p, cfg) > SHARED_LIMIT:
            return False
        if s["g"] * -(-s["kg"] // cfg["bn"]) > _GRID_Y_LIMIT:
            return False
        if vector_width(p) == 1 and (cfg["bm"] > 64 or cfg["bk"] > 32):
            return False  # scalar loads: keep the per-thread row table small
        split = cfg["split"]
        if split > 1:
            if _ktiles(p, cfg["bk"]) < 2 * split:
                return False
            if _split_workspace(p, split) > MAX_SPLIT_WORKSPACE:
                return False
        return True

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Tiles x reduction width x pipeline depth x split-K that fit, no tile column wider
        than the group's output channels need."""
        p = problem
        if p.spatial_dims != 2 or p.dtype not in _BK:
            return []
        s = _geometry(p)
        out = []
        for bm in _BM:
            for bn in _BN:
                if bn > max(32, _pow2_at_least(s["kg"])):
                    continue
                for bk in _BK[p.dtype]:
                    for stages in _STAGES:
                        for split in _SPLITS:
                            cfg = PerfConfig(bm=bm, bn=bn, bk=bk, stages=stages, split=split)
                            if self._fits(p, cfg):
                                out.append(cfg)
        return out

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The rule fitted on ResNet-50's 22 distinct layers (H200, fp16, batch 32, 7 configs
        each, see docs/performance.md): 128 x 128 tiles, bk 32, 2 stages where the group has
        at least 128 output channels, the reduction is 128..1152 long and those tiles fill
        the device 1 to 2 times; otherwise 64 x 64 tiles (columns narrowed to the group's
        channels), bk 64 with 2 stages (bk 32, 4 stages, for reductions under 64). Split-K
        only when even those tiles fill less than half the device."""
        p = problem
        space = self.perf_config_space(ctx, p)
        if not space:
            return PerfConfig(bm=64, bn=32, bk=32, stages=2, split=1)
        s = _geometry(p)
        sms = max(1, ctx.device.compute_units)
        big_blocks = -(-s["m"] // 128) * s["g"] * -(-s["kg"] // 128)
        preferred = []
        if s["kg"] >= 128 and 128 <= s["kred"] <= 1152 and sms <= big_blocks <= 2 * sms:
            preferred.append((128, 128, 32, 2))
        bn = min(64, max(32, _pow2_at_least(s["kg"])))
        blocks = -(-s["m"] // 64) * s["g"] * -(-s["kg"] // bn)
        split = 1
        while blocks * split * 2 <= sms and split < 8:
            split *= 2
        if s["kred"] >= 64:
            preferred.append((64, bn, 64, 2))
        preferred += [(64, bn, 32, 4), (64, bn, 32, 3), (64, bn, 32, 2), (64, 32, 32, 2)]
        for want_split in (split, 1):
            for bm, b_n, bk, stages in preferred:
                cfg = PerfConfig(bm=bm, bn=b_n, bk=bk, stages=stages, split=want_split)
                if cfg in space:
                    return cfg
        return space[0]

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
        if bm not in _BM or bn not in _BN or bk not in _BK[p.dtype]:
            return False
        if stages not in _STAGES or split not in _SPLITS:
            return False
        return self._fits(p, config)

    # -- cost ----------------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Split-K: one fp32 partial output per split."""
        cfg = self._config(ctx, problem, perf_config)
        return _split_workspace(problem, cfg["split"])

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Tensor cores: well above the CUDA-core kernels; the scalar fallback is not."""
        if ctx.backend != "cuda":
            return 0.05
        return 0.5

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
        """The forward kernel compiled for the tile, pipeline, vector width and element type;
        plus the split-K reduction kernel when ``split`` > 1."""
        p = problem
        cfg = self._config(ctx, p, perf_config)
        s = _geometry(p)
        bm, bn, bk, stages, split = (cfg[k] for k in _KEYS)
        vec = vector_width(p)
        ktiles = _ktiles(p, bk)
        per_split = -(-ktiles // split)
        options = (
            DTYPE_OPTIONS[p.dtype],
            f"-DMIO_BM={bm}",
            f"-DMIO_BN={bn}",
            f"-DMIO_BK={bk}",
            f"-DMIO_STAGES={stages}",
            f"-DMIO_VEC={vec}",
        )
        grid = (-(-s["m"] // bm), s["g"] * -(-s["kg"] // bn), split)
        kernels = [
            KernelInfo(
                source=SOURCE,
                kernel_name="igemm_mma_fwd",
                options=options,
                grid=grid,
                block=(THREADS,),
            )
        ]
        total = s["m"] * s["k"]
        if split > 1:
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name="igemm_mma_reduce",
                    options=options,
                    grid=(max(1, min(-(-total // 256), 8 * max(1, ctx.device.compute_units))),),
                    block=(256,),
                )
            )
        xs, ws, ys = p.x.strides, p.w.strides, p.y.strides
        params = pack_params(
            {
                **{name: s[name] for name in ("n", "c", "h", "w", "k", "fy", "fx", "ho", "wo")},
                "groups": s["g"],
                "cg": s["cg"],
                "kg": s["kg"],
                "ph": p.conv.pads[0],
                "pw": p.conv.pads[1],
                "sh": p.conv.strides[0],
                "sw": p.conv.strides[1],
                "dh": p.conv.dilations[0],
                "dw": p.conv.dilations[1],
                "xs_n": xs[0],
                "xs_h": xs[2],
                "xs_w": xs[3],
                "ws_k": ws[0],
                "ws_y": ws[2],
                "ws_x": ws[3],
                "ys_n": ys[0],
                "ys_h": ys[2],
                "ys_w": ys[3],
                "m": s["m"],
                "kred": s["kred"],
                "tiles_per_split": per_split,
                "splits": split,
            }
        )
        shared = shared_bytes(p, cfg)
        workspace = _split_workspace(p, split)
        align = 16 if vec > 1 else p.dtype.itemsize

        def factory(compiled: Any) -> Any:
            main = compiled[0]
            from miocore.backends.gpu_kernels import KernelArgs

            args = KernelArgs([("ptr", 0)] * 4 + [("bytes", params)])
            rargs = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", params)])

            def invoker(handle: Any, ip: InvokeParams) -> None:
                if ip.x.ptr % align or ip.w.ptr % align:
                    raise InvalidArgumentError(
                        f"igemm GPU kernels need {align}-byte aligned x and w",
                        field="x/w pointer",
                        value=hex(ip.x.ptr),
                    )
                part = ip.workspace.ptr if split > 1 else 0
                args.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr, part)
                main.launch(args, shared=shared)
                if split > 1:
                    rargs.set_pointers(part, ip.y.ptr)
                    compiled[1].launch(rargs)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            kernels=tuple(kernels),
        )


class GpuMmaIgemmSolver(_GpuIgemmBase):
    """Implicit GEMM on tensor cores, fp16/bf16 with fp32 accumulation (forward, NHWC)."""

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
