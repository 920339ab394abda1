"""``igemm.gpu_fma``: exact-fp32 implicit GEMM on the CUDA cores (FMA, no TF32), all directions.

``kernels/igemm_fma.cu`` is the register-blocked SGEMM (256 threads, 64/128 x 64/128 block
tiles, 8x8 / 4x8 / 4x4 fp32 micro-tiles per thread, reduction-major shared tiles read as
float4, register-prefetched double buffering) applied to the implicit GEMM of each direction:

* forward: ``Y[m=(n,oh,ow), k] = sum_{r=(fy,fx,c)} x[gather(m, r)] * w[k, r]``
* backward data: ``dx[m=(n,ih,iw), c] = sum_{r=(fy,fx,k)} dy[n, oh, ow, k] * w[k, c, fy, fx]``
  with ``oh = (ih + ph - fy*dh) / sh`` (only when divisible and in range); strided problems
  run as sh*sw GEMMs, one per residue class (ih % sh, iw % sw), each over only the taps that
  divide for it (no multiply-by-zero work)
* backward weights: ``dW[k, r=(fy,fx,c)] = sum_{m=(n,oh,ow)} dy[m, k] * x[gather(m, r)]``

Every layout and stride is correct (scalar gathers); 16-byte loads are used per operand where
the channel stride is 1 and the channel counts and other strides are multiples of 4. Groups
are one GEMM each. ``split`` > 1 splits the reduction over blocks: fp32 partials in the
workspace, summed in split order by a second kernel (deterministic). fp32 only (fp16/bf16 go
to the tensor-core solvers), 2-D only.
"""

from __future__ import annotations

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
    THREADS,
    MmaSolverBase,
    check_alignment,
    pack_fields,
    pow2_at_least,
)

SOURCE = "igemm/igemm_fma.cu"
_GRID_Y_LIMIT = 65535
_GRID_X_LIMIT = 2**31 - 1
_TILES = ((128, 128), (128, 64), (64, 128), (64, 64))
_BK = (8, 16)
#: Backward weights reduces over N*Ho*Wo onto a small output: it needs far deeper splits.
_SPLITS = {
    Direction.FORWARD: (1, 2, 4, 8),
    Direction.BACKWARD_DATA: (1, 2, 4, 8),
    Direction.BACKWARD_WEIGHTS: (1, 2, 4, 8, 16, 32, 64, 128, 256),
}
_KEYS = ("bm", "bn", "bk", "split")
_DIR_CODE = {Direction.FORWARD: 0, Direction.BACKWARD_DATA: 1, Direction.BACKWARD_WEIGHTS: 2}
#: Fraction of the fp32 FMA peak (~67 TFLOP/s on H200) reached with 16-byte loads: 0.36 geomean,
#: 0.45 best over ResNet-50 batch 32 (benchmarks/gpu_fma_bench.py). Scalar gathers (NCHW,
#: channel counts not a multiple of 4): an estimate, not measured on ResNet-sized layers.
_EFF_VEC = 0.4
_EFF_SCALAR = 0.1

#: The fields of ``MioFmaParams`` in ``kernels/igemm_fma.cu``, in declaration order (a CPU test
#: parses the struct and checks this order: the kernel reads them by position).
PARAM_FIELDS = (
    *("n", "c", "h", "w", "k", "fy", "fx", "ho", "wo", "groups", "cg", "kg"),
    *("ph", "pw", "sh", "sw", "dh", "dw"),
    *("xs_n", "xs_c", "xs_h", "xs_w", "ws_k", "ws_c", "ws_y", "ws_x"),
    *("ys_n", "ys_c", "ys_h", "ys_w"),
    *("gm", "gn", "gk", "tiles_per_split", "splits"),
)


def pack_params(values: dict[str, int]) -> bytes:
    """``MioFmaParams`` by value: every field an int64, in :data:`PARAM_FIELDS` order."""
    return pack_fields(PARAM_FIELDS, values)


def _valid_taps(f: int, pad: int, stride: int, dil: int, residue: int) -> int:
    """Backward data: the taps of one filter axis that reach output pixels ``= residue``
    (mod stride), i.e. ``(residue + pad - tap * dil) % stride == 0``."""
    return sum((residue + pad - t * dil) % stride == 0 for t in range(f))


def class_rows(p: ConvProblem) -> int:
    """Backward data: rows of one residue class, ``N * ceil(H / sh) * ceil(W / sw)``."""
    n, _, h, w = p.x.lengths
    sh, sw = p.conv.strides
    return n * -(-h // sh) * -(-w // sw)


def gemm_shape(p: ConvProblem) -> tuple[int, int, int]:
    """Per-group GEMM rows, columns and reduction length of the problem's direction (backward
    data: rows of all sh*sw residue classes, the longest class reduction)."""
    n = p.x.lengths[0]
    k, cg, fy, fx = p.w.lengths
    ho, wo = p.y.lengths[2:]
    kg = k // p.groups
    if p.direction is Direction.FORWARD:
        return n * ho * wo, kg, fy * fx * cg
    if p.direction is Direction.BACKWARD_DATA:
        (sh, sw), (ph, pw), (dh, dw) = p.conv.strides, p.conv.pads, p.conv.dilations
        nfy = max(_valid_taps(fy, ph, sh, dh, r) for r in range(sh))
        nfx = max(_valid_taps(fx, pw, sw, dw, r) for r in range(sw))
        return sh * sw * class_rows(p), cg, max(1, nfy * nfx * kg)
    return kg, fy * fx * cg, n * ho * wo


def _vec_ok(count: int, strides: tuple[int, ...], channel_stride: int) -> bool:
    """16-byte loads: channel stride 1, channel count and every other stride multiples of 4."""
    return channel_stride == 1 and count % 4 == 0 and all(s % 4 == 0 for s in strides)


def load_modes(p: ConvProblem) -> tuple[int, int, int, int]:
    """``(a_vec, a_along_r, b_vec, b_along_r)`` of the kernel for this problem (see the .cu)."""
    xs, ws, ys = p.x.strides, p.w.strides, p.y.strides
    cg, kg = p.w.lengths[1], p.w.lengths[0] // p.groups
    x_vec = _vec_ok(cg, (xs[0], *xs[2:]), xs[1])
    w_c_vec = _vec_ok(cg, (ws[0], *ws[2:]), ws[1])
    y_vec = _vec_ok(kg, (ys[0], *ys[2:]), ys[1])
    if p.direction is Direction.FORWARD:
        a = (4, 1) if x_vec else (1, int(xs[1] == 1))
        b = (4, 1) if w_c_vec else (1, 1)
    elif p.direction is Direction.BACKWARD_DATA:
        a = (4, 1) if y_vec else (1, int(ys[1] == 1))
        b = (4, 0) if w_c_vec else (1, 0)
    else:
        a = (4, 0) if y_vec else (1, int(ys[1] != 1))
        b = (4, 0) if x_vec else (1, int(xs[1] != 1))
    return (a[0], a[1], b[0], b[1])


def _span(t: Any) -> int:
    """Elements from a tensor's first to one past its last element."""
    return 1 + sum((n - 1) * abs(s) for n, s in zip(t.lengths, t.strides, strict=True))


def _row_tiles(p: ConvProblem, bm: int) -> int:
    """Grid x: row tiles (backward data: per residue class, so no tile straddles two)."""
    if p.direction is Direction.BACKWARD_DATA:
        sh, sw = p.conv.strides
        return sh * sw * -(-class_rows(p) // bm)
    return -(-gemm_shape(p)[0] // bm)


def _blocks(p: ConvProblem, bm: int, bn: int) -> int:
    _, gn, _ = gemm_shape(p)
    return _row_tiles(p, bm) * p.groups * -(-gn // bn)


def _split_workspace(p: ConvProblem, split: int) -> int:
    gm, gn, _ = gemm_shape(p)
    return 0 if split == 1 else split * p.groups * gm * gn * 4


#: Relative speed of one block per flop by tile (128x128 best: most reuse per shared load),
#: except that 128x128 spills under the 128-register cap of two blocks per SM (ptxas: 68 B
#: forward, 220 B backward data, 32 B backward weights), which costs backward data most.
_TILE_SPEED = {(128, 128): 1.0, (128, 64): 0.85, (64, 128): 0.85, (64, 64): 0.7}
_TILE_SPEED_BWD = {**_TILE_SPEED, (128, 128): 0.75}
#: Deeper splits than this were slower wherever measured outside backward weights.
_DEFAULT_MAX_SPLIT = 4
#: Achieved fraction of the fp32 FMA peak of a full wave of 128x128 blocks (measured ~0.45).
_WAVE_EFF = 0.45
_PEAK_TFLOPS_PER_SM = 0.5  # H200: 67 TFLOP/s over 132 SMs
_PARTIAL_GBPS = 3000.0  # split-K partials: written and read back at ~3 TB/s


def working_row_tiles(p: ConvProblem, bm: int) -> int:
    """Row tiles that have a reduction to do (backward data: classes some tap reaches)."""
    if p.direction is not Direction.BACKWARD_DATA:
        return _row_tiles(p, bm)
    _, _, fy, fx = p.w.lengths
    (sh, sw), (ph, pw), (dh, dw) = p.conv.strides, p.conv.pads, p.conv.dilations
    live = sum(_valid_taps(fy, ph, sh, dh, r) > 0 for r in range(sh))
    live *= sum(_valid_taps(fx, pw, sw, dw, r) > 0 for r in range(sw))
    return live * -(-class_rows(p) // bm)


def predict_us(p: ConvProblem, cfg: PerfConfig, sms: int) -> float:
    """Modelled time of one config: waves of blocks (two resident per SM; a lone block per SM
    runs 1.5x faster) times one block's flops at the tile's speed, plus the split-K partials'
    traffic. Fitted to the H200 ResNet-50 runs; used to pick the default config."""
    _, gn, gk = gemm_shape(p)
    bm, bn, bk, split = (cfg[k] for k in _KEYS)
    blocks = working_row_tiles(p, bm) * p.groups * -(-gn // bn) * split
    ktiles = -(-gk // bk)
    per_block = bm * bn * bk * -(-ktiles // split) * 2.0
    speed = (_TILE_SPEED_BWD if p.direction is Direction.BACKWARD_DATA else _TILE_SPEED)[(bm, bn)]
    rate = _PEAK_TFLOPS_PER_SM * 1e6 / 2 * _WAVE_EFF * speed  # flop/us of one block slot
    if blocks <= sms:
        rate *= 1.5
    waves = -(-blocks // (2 * sms))
    partial_us = 0.0
    if split > 1:
        gm_all, _, _ = gemm_shape(p)
        partial_us = (2 * split + 1) * p.groups * gm_all * gn * 4 / (_PARTIAL_GBPS * 1e3) + 5
    return waves * per_block / rate + partial_us


class GpuFmaIgemmSolver(MmaSolverBase):
    """Exact-fp32 implicit GEMM on CUDA cores: forward, backward data and backward weights,
    2-D, any layout and groups."""

    name = "igemm.gpu_fma"
    numerical_notes = frozenset()
    dtypes = frozenset({DataType.FLOAT32})

    # -- applicability -----------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """fp32, 2-D, any direction, layout, stride and groups."""
        p = problem
        if p.dtype is not DataType.FLOAT32:
            return not_applicable(
                f"{p.dtype.value}: this solver computes float32 exactly (fp16/bf16: igemm.gpu_mma)"
            )
        if p.spatial_dims != 2:
            return not_applicable("2-D problems only (3-D: not yet)")
        if max(_span(t) for t in (p.x, p.w, p.y)) >= 2**31:
            return not_applicable("tensors spanning 2**31 elements or more: 32-bit coordinates")
        if not self.perf_config_space(ctx, p):
            return not_applicable("no tile configuration fits (grid limits)")
        return APPLICABLE

    # -- configs -------------------------------------------------------------------------------

    def _fits(self, p: ConvProblem, cfg: PerfConfig) -> bool:
        _, gn, gk = gemm_shape(p)
        bm, bn, bk, split = (cfg[k] for k in _KEYS)
        if p.groups * -(-gn // bn) > _GRID_Y_LIMIT or _row_tiles(p, bm) > _GRID_X_LIMIT:
            return False
        if split > 1:
            if -(-gk // bk) < 2 * split:
                return False
            if _split_workspace(p, split) > MAX_SPLIT_WORKSPACE:
                return False
        return True

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """Block tiles x reduction width x split-K that fit; no tile side wider than the
        GEMM side needs (64 is the smallest)."""
        p = problem
        if p.spatial_dims != 2 or p.dtype is not DataType.FLOAT32:
            return []
        gm, gn, _ = gemm_shape(p)
        out = []
        for bm, bn in _TILES:
            if bm > max(64, pow2_at_least(gm)) or bn > max(64, pow2_at_least(gn)):
                continue
            for bk in _BK:
                for split in _SPLITS[p.direction]:
                    cfg = PerfConfig(bm=bm, bn=bn, bk=bk, split=split)
                    if self._fits(p, cfg):
                        out.append(cfg)
        return out

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The config of least :func:`predict_us` (a wave-quantised model fitted on ResNet-50
        batch 32, H200, exact fp32, benchmarks/gpu_fma_bench.py); bk 16 when a GEMM side is at
        most 64 and both operands load 16 bytes, else 8."""
        p = problem
        space = self.perf_config_space(ctx, p)
        if not space:
            return PerfConfig(bm=64, bn=64, bk=8, split=1)
        gm, gn, _ = gemm_shape(p)
        a_vec, _, b_vec, _ = load_modes(p)
        small = (gn if p.direction is not Direction.BACKWARD_WEIGHTS else min(gm, gn)) <= 64
        bk = 16 if small and a_vec == 4 and b_vec == 4 else 8
        pool = [c for c in space if c["bk"] == bk] or space
        if p.direction is not Direction.BACKWARD_WEIGHTS:
            pool = [c for c in pool if c["split"] <= _DEFAULT_MAX_SPLIT] or pool
        sms = max(1, ctx.device.compute_units)
        return min(pool, key=lambda c: predict_us(p, c, sms))

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """The four keys with values of the search space, fitting this problem."""
        try:
            bm, bn, bk, split = (int(config[k]) for k in _KEYS)
        except (KeyError, TypeError, ValueError):
            return False
        p = problem
        if p.dtype is not DataType.FLOAT32 or p.spatial_dims != 2:
            return False
        if (bm, bn) not in _TILES or bk not in _BK or split not in _SPLITS[p.direction]:
            return False
        return self._fits(p, PerfConfig(bm=bm, bn=bn, bk=bk, split=split))

    # -- cost ----------------------------------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Split-K: one fp32 partial output per split."""
        cfg = self._config(ctx, problem, perf_config)
        return _split_workspace(problem, cfg["split"])

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Roofline of the problem's flops at the measured fraction of the fp32 FMA peak
        (lower with scalar gathers, scaled down when the default grid underfills the device);
        tensor traffic plus split-K partials at the memory rate."""
        p = problem
        a_vec, _, b_vec, _ = load_modes(p)
        eff = _EFF_VEC if a_vec == 4 and b_vec == 4 else _EFF_SCALAR
        if ctx.backend != "cuda":
            eff *= 0.5  # no tuned path for wave64 / MFMA-less CDNA FMA yet
        cfg = self.default_perf_config(ctx, p)
        blocks = _blocks(p, cfg["bm"], cfg["bn"]) * cfg["split"]
        eff *= min(1.0, blocks / max(1, ctx.device.compute_units))
        eff *= gemm_fill(p)  # a narrow group's GEMM leaves the tiles mostly empty
        nbytes = p.bytes_moved + 2 * _split_workspace(p, cfg["split"])
        return ctx.wti(p, ctx.roofline_ms(p.flops, nbytes, p.dtype, max(eff, 1e-6)))

    # -- solution ------------------------------------------------------------------------------

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The direction's kernel compiled for the tile, bk and load modes; plus the split-K
        reduction kernel when ``split`` > 1."""
        p = problem
        cfg = self._config(ctx, p, perf_config)
        bm, bn, bk, split = (cfg[k] for k in _KEYS)
        gm, gn, gk = gemm_shape(p)
        a_vec, a_r, b_vec, b_r = load_modes(p)
        ktiles = -(-gk // bk)
        per_split = -(-ktiles // split)
        # scalar gathers keep more per-thread row state: let them have the registers
        minb = 2 if a_vec == 4 and b_vec == 4 else 1
        options = (
            DTYPE_OPTIONS[p.dtype],
            f"-DMIO_DIR={_DIR_CODE[p.direction]}",
            f"-DMIO_BM={bm}",
            f"-DMIO_BN={bn}",
            f"-DMIO_BK={bk}",
            f"-DMIO_A_VEC={a_vec}",
            f"-DMIO_A_ALONG_R={a_r}",
            f"-DMIO_B_VEC={b_vec}",
            f"-DMIO_B_ALONG_R={b_r}",
            f"-DMIO_MINB={minb}",
        )
        grid = (_row_tiles(p, bm), p.groups * -(-gn // bn), split)
        kernels = [
            KernelInfo(
                source=SOURCE, kernel_name="igemm_fma", options=options, grid=grid, block=(THREADS,)
            )
        ]
        total = p.groups * gm * gn
        if split > 1:
            kernels.append(
                KernelInfo(
                    source=SOURCE,
                    kernel_name="igemm_fma_reduce",
                    options=options,
                    grid=(max(1, min(-(-total // 256), 8 * max(1, ctx.device.compute_units))),),
                    block=(256,),
                )
            )
        n, c, h, w = p.x.lengths
        k, cg, fy, fx = p.w.lengths
        xs, ws, ys = p.x.strides, p.w.strides, p.y.strides
        params = pack_params(
            {
                **dict(n=n, c=c, h=h, w=w, k=k, fy=fy, fx=fx),
                **dict(ho=p.y.lengths[2], wo=p.y.lengths[3]),
                **dict(groups=p.groups, cg=cg, kg=k // p.groups),
                **dict(ph=p.conv.pads[0], pw=p.conv.pads[1]),
                **dict(sh=p.conv.strides[0], sw=p.conv.strides[1]),
                **dict(dh=p.conv.dilations[0], dw=p.conv.dilations[1]),
                **dict(xs_n=xs[0], xs_c=xs[1], xs_h=xs[2], xs_w=xs[3]),
                **dict(ws_k=ws[0], ws_c=ws[1], ws_y=ws[2], ws_x=ws[3]),
                **dict(ys_n=ys[0], ys_c=ys[1], ys_h=ys[2], ys_w=ys[3]),
                **dict(gm=gm, gn=gn, gk=gk, tiles_per_split=per_split, splits=split),
            }
        )
        workspace = _split_workspace(p, split)
        a_name, b_name = {0: ("x", "w"), 1: ("y", "w"), 2: ("y", "x")}[_DIR_CODE[p.direction]]
        vec_names = [n for n, v in ((a_name, a_vec), (b_name, b_vec)) if v == 4]
        out_name = {0: "y", 1: "x", 2: "w"}[_DIR_CODE[p.direction]]

        def factory(compiled: Any) -> Any:
            from miocore.backends.gpu_kernels import KernelArgs

            main = compiled[0]
            args = KernelArgs([("ptr", 0)] * 4 + [("bytes", params)])
            rargs = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", params)])

            def invoker(handle: Any, ip: InvokeParams) -> None:
                check_alignment(
                    ((name, getattr(ip, name).ptr, 16) for name in vec_names),
                    "igemm.gpu_fma's 16-byte loads",
                )
                part = ip.workspace.ptr if split > 1 else 0
                args.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr, part)
                main.launch(args)
                if split > 1:
                    rargs.set_pointers(part, getattr(ip, out_name).ptr)
                    compiled[1].launch(rargs)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            kernels=tuple(kernels),
            perf_config=cfg,
        )


GPU_FMA_SOLVERS = (GpuFmaIgemmSolver(),)
