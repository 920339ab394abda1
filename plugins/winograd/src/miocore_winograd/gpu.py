"""GPU Winograd: ``winograd.gpu_f2x3`` (F(2x2, 3x3)) and ``winograd.gpu_f4x3`` (F(4x4, 3x3)).

Multi-kernel ("non-fused") Winograd for 2-D 3x3 filters, stride 1, dilation 1, any padding:

* forward: the input-transform kernel turns alpha x alpha tiles of x into
  ``V[alpha^2][tiles][C]``, the filter-transform kernel turns w into ``U[alpha^2][C][K/g]``, the
  vendor BLAS multiplies ``M[xi] = V[xi] . U[xi]`` for the alpha^2 points (one strided-batched
  GEMM per group, float32 output, fp32 accumulation; tensor cores for fp16/bf16, exact FMA for
  fp32), and the output-transform kernel turns M into y (cropped to Ho x Wo).
* backward data: the same pipeline on dy, the filter rotated by 180 degrees with K and C
  swapped inside the filter-transform kernel, and padding ``r - 1 - pad``.
* backward weights: F(3x3, m x m), the m x m tiles of dy taking the filter's role: x tiles
  (alpha = m + 2) and dy tiles are transformed, the BLAS reduces over the tiles
  (``S[xi] = sum_t X[xi][t]^T DY[xi][t]``, float32, accumulated over image chunks) and the
  inverse transform writes the 3x3 filter gradient.

V, U (and the backward-weights X, DY) are stored in the tensors' element type so that half types
feed the tensor cores; M is stored in the element type too (:data:`HALF_M`; the BLAS still
accumulates in float32: for the half types half of M's traffic, the largest of the pipeline,
goes); S is float32. Images go in chunks whose transformed tiles fit
:data:`WORKSPACE_BUDGET`. The transform matrices come from :mod:`miocore_winograd.transforms`
and reach the kernels as compile-time constants (``-DWINO_BT={...}`` etc.).

Launches per image chunk: forward / backward data: the tile transform (on the first chunk the
filter transform runs in leading blocks of the same grid), one batched GEMM per group, the
output transform; backward weights: the x and the dy tile transforms and one batched GEMM per
group, then the filter-gradient transform once. Every thread of a transform takes
:func:`vector_width` adjacent channels, one 4-16 byte access in NHWC.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    KernelInfo,
    NotApplicableError,
    PerfConfig,
    Solver,
    not_applicable,
)
from miocore.backends.gpu_kernels import (
    DTYPE_OPTIONS,
    GPU_BACKENDS,
    tensor5_bytes,
)
from miocore_winograd.transforms import toom_cook

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    pass

KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "winograd/winograd_gpu.cu"
#: Largest workspace one chunk of images may use (bytes); at least one image always goes.
WORKSPACE_BUDGET = 1 << 30
#: Most groups handled (one GEMM call per group and chunk); depthwise goes elsewhere.
MAX_GROUPS = 32
#: Fields of the kernels' ``WinoParams`` after the two ``MioTensor5``, in order.
PARAM_FIELDS = (
    "n0",
    "nb",
    "tiles_h",
    "tiles_w",
    "step",
    "pad_h",
    "pad_w",
    "cin",
    "cout",
    "groups",
    "flip",
    "aux_blocks",
)
_BLOCK = 256
_ALIGN = 256
#: Relative error in units of the element type's unit roundoff at a reduction of 16 or fewer,
#: per output tile (forward / backward data) or dy tile (backward weights) and for float32 /
#: the half types: the transforms' growth of rounding errors. Emulated in numpy (V, U, X, DY
#: rounded to the element type, float32 GEMM and transforms; ``tests/test_gpu_winograd_cpu.py``
#: runs the emulation) on random data, the largest error found sits at half of this or less
#: (F(4,3): float32 up to 75 units, fp16 / bf16 up to 30 with 1-3 channels on 64x64 images;
#: F(2,3): about 7 and 2). On the H200 against cuDNN (whose own error is included) the largest
#: ratio seen was 0.53 (F(2,3) fp32 backward weights of VGG-16 conv1_2, 200k tiles) and 0.36
#: (F(4,3) fp16 forward of VGG-16 conv1_1, 3 channels).
ERROR_GROWTH = {(2, True): 48.0, (2, False): 16.0, (4, True): 300.0, (4, False): 150.0}
_UNIT_ROUNDOFF = {
    DataType.FLOAT32: 2.0**-24,
    DataType.FLOAT16: 2.0**-11,
    DataType.BFLOAT16: 2.0**-8,
}
#: Cost model, measured on the H200 (benchmarks/gpu_winograd_bench.py, VGG-16 conv3_2 batch 16):
#: the batched GEMM reaches about 0.65 of the fp32 FMA peak (cutlass SIMT sgemm, 45 TFLOP/s) and
#: 0.3 of the fp16 tensor peak (nvjet, 315 TFLOP/s), less with few channels per group (cuBLAS
#: with m or n below 32: VGG-16 conv1_1, 3 channels, ran at a tenth); the transform kernels
#: stream at 0.6-0.75 of the memory bandwidth (0.5 here to cover partial tiles and NCHW); every
#: launch costs about 6 us of device time.
GEMM_EFFICIENCY = {DataType.FLOAT32: 0.65, DataType.FLOAT16: 0.3, DataType.BFLOAT16: 0.3}
#: Element types whose GEMM output M is stored in the element type (else float32; the BLAS
#: accumulates in float32 either way). Emulated (tests/test_gpu_winograd_cpu.py's pipeline, 1-64
#: channels, 48x48 images, forward and backward data), the largest error over the bound went
#: from 0.19 to 0.24 (float16) and 0.24 to 0.26 (bfloat16, whose output rounding dominates).
HALF_M = frozenset({DataType.FLOAT16, DataType.BFLOAT16})
#: Channels per thread, by tile size m, as (most channels, most bytes of one access). The
#: tile-input transforms hold the whole alpha x alpha tile (alpha^2 = 16 / 36 accesses) and
#: alpha^2 x VEC partial sums in registers, the output transform m x alpha x VEC (8 / 24) sums,
#: the dy transform (backward weights) m^2 accesses and alpha x m x VEC sums. Chosen on the H200
#: (plugins/winograd/benchmarks/gpu_winograd_ab.py, ResNet-50 / VGG-16 3x3 layers, NHWC): wider
#: threads than these ran 2-7% slower (past about 128 registers a thread the SM holds too few
#: warps to hide the loads), narrower ones up to 10% slower.
VEC_IN_CAP = {2: (2, 16), 4: (8, 4)}
VEC_OUT_CAP = {2: (8, 16), 4: (4, 8)}
VEC_DY_CAP = {2: (8, 16), 4: (2, 16)}
#: Forward / backward data F(4,3) with fewer tiles than this per chunk (7x7-28x28 images, a
#: few thousand tiles or less) take one channel per thread in the input transform: 5-12%
#: faster there on the H200 (more threads for a small grid), 3-8% slower on larger ones.
SMALL_TILES = 1024
TRANSFORM_BANDWIDTH = 0.5
LAUNCH_MS = 0.006


def _c_float(value: Any) -> str:
    return f"{float(value)!r}f"


def _c_matrix(matrix: Any) -> str:
    return "{" + ",".join(_c_float(v) for row in matrix for v in row) + "}"


def kernel_options(
    dtype: DataType, m: int, r: int, vec_in: int = 1, vec_out: int = 1, half_m: bool = False
) -> tuple[str, ...]:
    """Compile options of the transform kernels for F(m, r) on ``dtype`` (``vec_in`` /
    ``vec_out`` channels per thread, ``half_m``: M stored in the element type)."""
    a_t, g, b_t = toom_cook(m, r)
    return (
        DTYPE_OPTIONS[dtype],
        f"-DWINO_M={m}",
        f"-DWINO_R={r}",
        f"-DWINO_BT={_c_matrix(b_t)}",
        f"-DWINO_G={_c_matrix(g)}",
        f"-DWINO_AT={_c_matrix(a_t)}",
        f"-DWINO_VEC_IN={vec_in}",
        f"-DWINO_VEC_OUT={vec_out}",
        f"-DWINO_M_HALF={int(half_m)}",
    )


def vector_width(channels: int, cap: tuple[int, int], itemsize: int) -> int:
    """Channels per thread: the largest power of two dividing ``channels`` within ``cap`` (most
    channels, most bytes)."""
    most, most_bytes = cap
    vec = 1
    while vec * 2 <= most and vec * 2 * itemsize <= most_bytes and channels % (vec * 2) == 0:
        vec *= 2
    return vec


def _round(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


class _Plan:
    """Sizes of one problem's pipeline: channels, tiles, chunking and workspace offsets."""

    def __init__(self, p: ConvProblem, m: int) -> None:
        self.p = p
        self.m = m
        self.direction = p.direction
        self.wrw = p.direction is Direction.BACKWARD_WEIGHTS
        size = p.dtype.itemsize
        g = p.groups
        ho, wo = p.out_spatial
        h, w = p.in_spatial
        if self.wrw:
            # F(3, m): x tiles of alpha = m + 2 stepping by m, dy tiles of m x m
            self.tm, self.tr = 3, m
            self.cin, self.cout = p.c, p.k
            self.tiles_h, self.tiles_w = -(-ho // m), -(-wo // m)
            self.pads = tuple(p.conv.pads)
        else:
            self.tm, self.tr = m, 3
            if p.direction is Direction.FORWARD:
                self.cin, self.cout = p.c, p.k
                out_h, out_w = ho, wo
                self.pads = tuple(p.conv.pads)
            else:
                self.cin, self.cout = p.k, p.c
                out_h, out_w = h, w
                self.pads = tuple(2 - q for q in p.conv.pads)
            self.tiles_h, self.tiles_w = -(-out_h // m), -(-out_w // m)
        self.alpha = self.tm + self.tr - 1
        a2 = self.alpha**2
        self.a2 = a2
        self.cing, self.coutg = self.cin // g, self.cout // g
        self.half_m = p.dtype in HALF_M and not self.wrw
        msize = size if self.half_m else 4
        self.msize = msize
        per_image_tiles = self.tiles_h * self.tiles_w
        self.per_image_tiles = per_image_tiles
        if self.wrw:
            fixed = _round(a2 * self.cout * self.cing * 4)
            per_image = a2 * per_image_tiles * (self.cin + self.cout) * size
        else:
            fixed = _round(a2 * self.cin * self.coutg * size)
            per_image = a2 * per_image_tiles * (self.cin * size + self.cout * msize)
        self.nb = max(1, min(p.n, (WORKSPACE_BUDGET - fixed) // max(per_image, 1)))
        t = self.nb * per_image_tiles
        self.max_tiles = t
        # backward weights: WINO_VEC_OUT is the dy transform's width
        self.vec_in = vector_width(self.cin, VEC_IN_CAP[m], size)
        if m == 4 and not self.wrw and self.max_tiles < SMALL_TILES:
            self.vec_in = 1
        if self.wrw:
            self.vec_out = vector_width(self.cout, VEC_DY_CAP[m], size)
        else:
            self.vec_out = vector_width(self.cout, VEC_OUT_CAP[m], msize)
        if self.wrw:
            # S (float32), X (x tiles), DY (dy tiles)
            self.off_s = 0
            self.off_x = fixed
            self.off_dy = self.off_x + _round(a2 * t * self.cin * size)
            self.workspace = self.off_dy + _round(a2 * t * self.cout * size)
        else:
            # U (filters), V (tiles), M (products: float32, or the element type per HALF_M)
            self.off_u = 0
            self.off_v = fixed
            self.off_m = self.off_v + _round(a2 * t * self.cin * size)
            self.workspace = self.off_m + _round(a2 * t * self.cout * msize)

    @property
    def chunks(self) -> list[tuple[int, int]]:
        """``(n0, nb)`` of every image chunk."""
        return [(n0, min(self.nb, self.p.n - n0)) for n0 in range(0, self.p.n, self.nb)]

    def gemm_flops(self) -> float:
        """Flops of the batched GEMMs over the whole problem."""
        tiles = self.p.n * self.per_image_tiles
        return 2.0 * self.a2 * tiles * self.cin * self.coutg

    def transform_bytes(self) -> float:
        """Bytes the transform kernels and the GEMM operands move over the whole problem."""
        p = self.p
        size = p.dtype.itemsize
        tiles = p.n * self.per_image_tiles
        tensors = (p.x.element_count + p.y.element_count + p.w.element_count) * size
        if self.wrw:
            tiles_bytes = 2 * self.a2 * tiles * (self.cin + self.cout) * size
            return tensors + tiles_bytes + 2 * self.a2 * self.cout * self.cing * 4
        tiles_bytes = 2 * self.a2 * tiles * (self.cin * size + self.cout * self.msize)
        return tensors + tiles_bytes + 2 * self.a2 * self.cin * self.coutg * size

    def params(
        self, n0: int, nb: int, src: Any, dst: Any, flip: int, cin: int, cout: int, aux: int = 0
    ) -> bytes:
        """The kernels' ``WinoParams`` struct (two MioTensor5 then :data:`PARAM_FIELDS`)."""
        import numpy as np

        step = self.m
        values = {
            "n0": n0,
            "nb": nb,
            "tiles_h": self.tiles_h,
            "tiles_w": self.tiles_w,
            "step": step,
            "pad_h": self.pads[0],
            "pad_w": self.pads[1],
            "cin": cin,
            "cout": cout,
            "groups": self.p.groups,
            "flip": flip,
            "aux_blocks": aux,
        }
        tail = np.array([values[f] for f in PARAM_FIELDS], dtype=np.int64)
        return tensor5_bytes(src) + tensor5_bytes(dst) + tail.tobytes()


class WinogradGpuSolver(Solver):
    """Non-fused GPU Winograd with output tile ``m`` (subclasses fix it): transform kernels and
    the backend's batched BLAS GEMM, every direction, fp32 / fp16 / bf16, NCHW / NHWC."""

    algorithm = Algorithm.WINOGRAD
    backends = GPU_BACKENDS
    is_dynamic = True
    m: int = 2

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D, 3x3 filter, stride 1, dilation 1, up to :data:`MAX_GROUPS` groups."""
        p = problem
        if p.spatial_dims != 2:
            return not_applicable(f"{p.spatial_dims}-D problem; {self.name} is 2-D only")
        if tuple(p.filter_spatial) != (3, 3):
            return not_applicable(f"filter {tuple(p.filter_spatial)}; {self.name} needs 3x3")
        if any(s != 1 for s in p.conv.strides):
            return not_applicable(f"strides {tuple(p.conv.strides)}; {self.name} needs 1")
        if any(d != 1 for d in p.conv.dilations):
            return not_applicable(f"dilations {tuple(p.conv.dilations)}; {self.name} needs 1")
        if p.groups > MAX_GROUPS:
            return not_applicable(
                f"groups {p.groups} > {MAX_GROUPS} (one GEMM per group; depthwise is direct's)"
            )
        if p.dtype not in _UNIT_ROUNDOFF:
            return not_applicable(f"dtype {p.dtype}; {self.name} takes fp32, fp16, bf16")
        for name in ("x", "w", "y"):
            desc = getattr(p, name)
            if desc.layout not in ("NCHW", "NHWC"):
                return not_applicable(f"{name} layout {desc.layout}; needs NCHW or NHWC")
        plan = _Plan(p, self.m)
        widest = plan.max_tiles * max(plan.cin, plan.cout)
        if max(plan.cin * plan.cout, plan.max_tiles, widest) >= 2**31:
            return not_applicable("a GEMM dimension or transform index exceeds 32 bits")
        return APPLICABLE

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Forward / backward data: U + V of one image chunk in the element type, M in float32;
        backward weights: X + DY of one chunk in the element type, S in float32 (each part
        rounded up to 256 bytes)."""
        return _Plan(problem, self.m).workspace

    def expected_error(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> float | None:
        """Relative error bound: the element type's unit roundoff (the transformed operands are
        stored in it) times the tile's error growth (:data:`ERROR_GROWTH`), growing with the
        square root of the Winograd-domain reduction (channels per group; backward weights:
        all tiles, as summed by the BLAS), like a random walk of roundings."""
        plan = _Plan(problem, self.m)
        reduction = problem.n * plan.per_image_tiles if plan.wrw else plan.cing
        growth = ERROR_GROWTH[self.m, problem.dtype is DataType.FLOAT32]
        return growth * _UNIT_ROUNDOFF[problem.dtype] * max(1.0, math.sqrt(reduction / 16))

    def predicted_ms(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """GEMM flops at :data:`GEMM_EFFICIENCY` of the dtype's peak (scaled down below 32
        channels per group), plus the transform traffic at :data:`TRANSFORM_BANDWIDTH` of the
        memory bandwidth, plus launches."""
        plan = _Plan(problem, self.m)
        narrow = min(1.0, min(plan.cing, plan.coutg) / 32)
        efficiency = GEMM_EFFICIENCY[problem.dtype] * narrow
        gemm = ctx.roofline_ms(plan.gemm_flops(), 0, problem.dtype, efficiency)
        traffic = ctx.roofline_ms(0, plan.transform_bytes() / TRANSFORM_BANDWIDTH, problem.dtype)
        launches = len(plan.chunks) * (2 + problem.groups) + plan.wrw
        return gemm + traffic + LAUNCH_MS * launches

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Ideal time over :meth:`predicted_ms`."""
        if not self.is_applicable(ctx, problem):
            return -1.0
        return ctx.wti(problem, self.predicted_ms(ctx, problem))

    def kernel_infos(self, problem: ConvProblem) -> tuple[KernelInfo, ...]:
        """The kernels of the problem's direction, in the invoker's order: forward / backward
        data: the tile (and filter) transforms, the output transform; backward weights: the x
        tile, dy tile and filter-gradient transforms."""
        plan = _Plan(problem, self.m)
        opts = kernel_options(
            problem.dtype, plan.tm, plan.tr, plan.vec_in, plan.vec_out, plan.half_m
        )
        names = (
            ("wino_input_filter", "wino_dy_transform", "wino_filter_output")
            if plan.wrw
            else ("wino_input_filter", "wino_output_transform")
        )
        return tuple(
            KernelInfo(source=SOURCE, kernel_name=n, options=opts, block=(_BLOCK,)) for n in names
        )

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """Three transform kernels and a BLAS-driving invoker."""
        if perf_config:
            raise InvalidArgumentError(
                f"{self.name} takes no perf config", field="perf_config", value=dict(perf_config)
            )
        plan = _Plan(problem, self.m)

        def factory(compiled: Any) -> Any:
            backend = compiled[0].backend
            if backend.blas is None:
                raise NotApplicableError(
                    getattr(backend.driver, "blas_error", "no BLAS on this backend"),
                    field="solver",
                    value=self.name,
                )
            from miocore_winograd.gpu_invoker import WinogradInvoker

            return WinogradInvoker(plan, backend.device, backend.blas, compiled)

        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace,
            invoker_factory=factory,
            kernels=self.kernel_infos(problem),
        )


class WinogradGpuF2x3(WinogradGpuSolver):
    """F(2x2, 3x3) (alpha = 4): the most accurate tile; backward weights F(3x3, 2x2)."""

    name = "winograd.gpu_f2x3"
    numerical_notes = frozenset({"winograd", "down_convert"})
    m = 2


class WinogradGpuF4x3(WinogradGpuSolver):
    """F(4x4, 3x3) (alpha = 6): 4x fewer multiplications than direct; backward weights
    F(3x3, 4x4)."""

    name = "winograd.gpu_f4x3"
    numerical_notes = frozenset({"winograd", "down_convert"})
    m = 4


GPU_SOLVERS = (WinogradGpuF2x3(), WinogradGpuF4x3())
