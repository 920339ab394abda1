"""``gemm.gpu_im2col``: MIOpen's GEMM fallback on GPUs: im2col / col2im kernels and the vendor
BLAS (cuBLAS, hipBLAS) through the backend's ``blas`` (no vendor binding is imported here).

Per group g, with Cg = C/g, Kg = K/g, F filter taps and O output positions:

* forward:          Y[n, g] (Kg x O)  = W[g] (Kg x Cg F) . col[n, g] (Cg F x O)
* backward data:    col[n, g]         = W[g]^T . dY[n, g], then col2im gathers dx
* backward weights: dW[g]             = sum_n dY[n, g] . col[n, g]^T (float32 accumulator for
  fp16/bf16, cast once at the end)

1x1 filters with stride 1 and no padding skip the column buffer. Images go in chunks whose
column buffer fits :data:`WORKSPACE_BUDGET`; each chunk is one strided-batched GEMM per group
(backward weights: one GEMM per image and group, accumulating). Applies to packed NCHW / NCDHW
tensors; ``direct.gpu_naive`` covers every other layout.
"""

from __future__ import annotations

import functools
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
    InvokeParams,
    KernelInfo,
    NotApplicableError,
    PerfConfig,
    Solver,
    not_applicable,
)
from miocore.backends.gpu_kernels import (
    DTYPE_OPTIONS,
    GPU_BACKENDS,
    KernelArgs,
    gemm_fill,
    grid_for,
    tensor5_bytes,
)
from miocore_gemm.tf32 import Tf32Twin

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    pass

KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "gemm/im2col.cu"
#: Largest column buffer a chunk of images may use (bytes).
WORKSPACE_BUDGET = 256 << 20
_BLOCK = 256


def _sizes(p: ConvProblem) -> tuple[int, int, int, int, int, int]:
    g = p.groups
    cg, kg = p.c // g, p.k // g
    f = math.prod(p.filter_spatial)
    o = math.prod(p.out_spatial)
    i = math.prod(p.in_spatial)
    return g, cg, kg, f, o, i


def _is_pointwise(p: ConvProblem) -> bool:
    return (
        all(s == 1 for s in p.filter_spatial)
        and all(s == 1 for s in p.conv.strides)
        and not any(p.conv.pads)
    )


def _chunk(p: ConvProblem) -> int:
    """Images per chunk: as many as keep the column buffer within the budget."""
    _, _, _, f, o, _ = _sizes(p)
    per_image = p.c * f * o * p.dtype.itemsize
    return max(1, min(p.n, WORKSPACE_BUDGET // max(per_image, 1)))


def _accumulator_bytes(p: ConvProblem) -> int:
    if p.direction is Direction.BACKWARD_WEIGHTS and p.dtype is not DataType.FLOAT32:
        return p.w.element_count * 4
    return 0


def _col_bytes(p: ConvProblem) -> int:
    """Bytes of one chunk's column buffer, rounded up to 256 so that the float32 accumulator
    after it is aligned as the BLAS needs."""
    if _is_pointwise(p):
        return 0
    _, _, _, f, o, _ = _sizes(p)
    return -(-_chunk(p) * p.c * f * o * p.dtype.itemsize // 256) * 256


def _im2col_params(p: ConvProblem, n0: int, nb: int) -> bytes:
    import numpy as np

    def three(values: tuple[int, ...], fill: int) -> list[int]:
        return [fill] * (3 - len(values)) + list(values)

    tail = np.array(
        [
            *three(p.filter_spatial, 1),
            *three(p.out_spatial, 1),
            *three(p.conv.pads, 0),
            *three(p.conv.strides, 1),
            *three(p.conv.dilations, 1),
            n0,
            nb,
        ],
        dtype=np.int64,
    )
    return tensor5_bytes(p.x) + tail.tobytes()


#: Device time of the launches beyond their work (ms): the call's first, each BLAS call,
#: each im2col / col2im launch. Chosen on the sm90 database's times of this solver (H100,
#: held-out records): the median |log(measured / estimate)| went 1.06 -> 0.87 and the worst
#: from 8.9 (an estimate 7,500x too fast, a tiny backward weights of 256 images, one GEMM
#: each) to 4.5 (docs/tuning.md).
FIRST_LAUNCH_MS = 0.003
GEMM_CALL_MS = 0.001
KERNEL_LAUNCH_MS = 0.002


def launch_ms(p: ConvProblem) -> float:
    """The launches' time of :class:`_Invoker`'s run of ``p``: per chunk of images an
    im2col (col2im) launch unless pointwise and one BLAS call per group; backward weights
    one BLAS call per image and group, and a cast."""
    chunks = -(-p.n // _chunk(p))
    kernels = 0 if _is_pointwise(p) else chunks
    if p.direction is Direction.BACKWARD_WEIGHTS:
        gemms, kernels = p.n * p.groups, kernels + 1
    else:
        gemms = chunks * p.groups
    return FIRST_LAUNCH_MS + GEMM_CALL_MS * gemms + KERNEL_LAUNCH_MS * kernels


class GpuIm2colGemmSolver(Solver):
    """im2col / col2im + vendor BLAS, every direction, groups, dilation, strides, 2-D and 3-D."""

    name = "gemm.gpu_im2col"
    numerical_notes = frozenset()
    algorithm = Algorithm.GEMM
    backends = GPU_BACKENDS
    is_dynamic = True
    #: Whether the BLAS may round float32 inputs to TF32 (the ``gemm.gpu_im2col_tf32`` twin).
    tf32 = False

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Packed NCHW / NCDHW tensors (the GEMM views need them)."""
        logical = "NCHW" if problem.spatial_dims == 2 else "NCDHW"
        for name in ("x", "w", "y"):
            desc = getattr(problem, name)
            if desc.layout != logical or not desc.is_packed:
                return not_applicable(
                    f"{name} is {desc.layout}{'' if desc.is_packed else ' (strided)'}; the GPU "
                    f"GEMM solver needs packed {logical}"
                )
        _, cg, kg, f, o, _ = _sizes(problem)
        if max(cg * f, kg, o * max(_chunk(problem), 1)) >= 2**31:
            return not_applicable("a GEMM dimension exceeds 32-bit BLAS indexing")
        return APPLICABLE

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """The column buffer of one chunk, plus a float32 dW for half-type backward weights."""
        return _col_bytes(problem) + _accumulator_bytes(problem)

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """BLAS reaches much of the peak where each group's GEMM is wide enough
        (``gemm_fill``), minus the column buffer's extra traffic; plus the launches' own time
        (:func:`launch_ms`), which is all of a small problem's."""
        _, _, _, f, _, _ = _sizes(problem)
        base = 0.5 if _is_pointwise(problem) else max(0.1, 0.4 / math.sqrt(f))
        fraction = base * gemm_fill(problem)
        return ctx.wti(problem, ctx.ideal_ms(problem) / fraction + launch_ms(problem))

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The lowering kernels (compiled per element type) and a BLAS-driving invoker."""
        p = problem
        opts = (DTYPE_OPTIONS[p.dtype],)
        kernels = tuple(
            KernelInfo(source=SOURCE, kernel_name=name, options=opts, block=(_BLOCK,))
            for name in ("im2col", "col2im", "cast_from_f32")
        )
        workspace = self.workspace_size(ctx, p)

        def factory(compiled: Any) -> Any:
            im2col, col2im, cast = compiled
            backend = im2col.backend
            blas = backend.blas
            if blas is None:
                raise NotApplicableError(
                    getattr(backend.driver, "blas_error", "no BLAS on this backend"),
                    field="solver",
                    value=self.name,
                )
            return _Invoker(p, backend.device, blas, self.tf32, im2col, col2im, cast)

        return ConvSolution(
            solver=self.name, workspace_size=workspace, invoker_factory=factory, kernels=kernels
        )


class _Invoker:
    """Runs one problem: chunks of images, im2col/col2im launches and BLAS calls."""

    #: Each BLAS call costs several µs of host time through its binding: a prepared run keeps
    #: even a one-launch call (a 1x1 layer's single GEMM) as a graph to replay.
    replay_pays = True

    def __init__(
        self,
        p: ConvProblem,
        device: Any,
        blas: Any,
        tf32: bool,
        im2col: Any,
        col2im: Any,
        cast: Any,
    ) -> None:
        self.p = p
        # every product of this invoker in the same arithmetic: exact fp32, or TF32 allowed
        self.gemm = functools.partial(blas.gemm, tf32=tf32)
        self.im2col, self.col2im, self.cast = im2col, col2im, cast
        self.pointwise = _is_pointwise(p)
        self.nb = _chunk(p)
        g, cg, kg, f, o, i = _sizes(p)
        self.dims = (g, cg, kg, f, o, i)
        self.chunks = []
        for n0 in range(0, p.n, self.nb):
            nb = min(self.nb, p.n - n0)
            args = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", _im2col_params(p, n0, nb))])
            col_total = nb * p.c * f * o
            in_total = nb * p.c * i
            self.chunks.append(
                (
                    n0,
                    nb,
                    args,
                    grid_for(col_total, _BLOCK, device),
                    grid_for(in_total, _BLOCK, device),
                )
            )
        self.col_bytes = _col_bytes(p)
        count = p.w.element_count
        self.cast_args = KernelArgs([("ptr", 0), ("ptr", 0), ("i64", count)])
        self.cast_grid = grid_for(count, _BLOCK, device)

    def __call__(self, handle: Any, ip: InvokeParams) -> None:
        p = self.p
        direction = p.direction
        ws = ip.workspace.ptr if ip.workspace is not None else 0
        if direction is Direction.FORWARD:
            self._forward(ip.x.ptr, ip.w.ptr, ip.y.ptr, ws)
        elif direction is Direction.BACKWARD_DATA:
            self._backward_data(ip.x.ptr, ip.w.ptr, ip.y.ptr, ws)
        else:
            self._backward_weights(ip.x.ptr, ip.w.ptr, ip.y.ptr, ws)

    def _forward(self, x: int, w: int, y: int, col: int) -> None:
        p = self.p
        g, cg, kg, f, o, i = self.dims
        size = p.dtype.itemsize
        cf = cg * f
        for n0, nb, args, col_grid, _ in self.chunks:
            if self.pointwise:
                a, stride_a = x + n0 * p.c * i * size, p.c * i
            else:
                args.set_pointers(x, col)
                self.im2col.launch(args, grid=(col_grid,))
                a, stride_a = col, p.c * f * o
            for gi in range(g):
                self.gemm(
                    p.dtype,
                    False,
                    False,
                    o,
                    kg,
                    cf,
                    a + gi * cf * o * size,
                    o,
                    stride_a,
                    w + gi * kg * cf * size,
                    cf,
                    0,
                    y + (n0 * p.k + gi * kg) * o * size,
                    o,
                    p.k * o,
                    batch=nb,
                )

    def _backward_data(self, dx: int, w: int, dy: int, col: int) -> None:
        p = self.p
        g, cg, kg, f, o, i = self.dims
        size = p.dtype.itemsize
        cf = cg * f
        for n0, nb, args, _, in_grid in self.chunks:
            if self.pointwise:
                c_ptr, stride_c = dx + n0 * p.c * i * size, p.c * i
            else:
                c_ptr, stride_c = col, p.c * f * o
            for gi in range(g):
                self.gemm(
                    p.dtype,
                    False,
                    True,
                    o,
                    cf,
                    kg,
                    dy + (n0 * p.k + gi * kg) * o * size,
                    o,
                    p.k * o,
                    w + gi * kg * cf * size,
                    cf,
                    0,
                    c_ptr + gi * cf * o * size,
                    o,
                    stride_c,
                    batch=nb,
                )
            if not self.pointwise:
                args.set_pointers(col, dx)
                self.col2im.launch(args, grid=(in_grid,))

    def _backward_weights(self, x: int, dw: int, dy: int, ws: int) -> None:
        p = self.p
        g, cg, kg, f, o, i = self.dims
        size = p.dtype.itemsize
        cf = cg * f
        half = p.dtype is not DataType.FLOAT32
        target = ws + self.col_bytes if half else dw
        c_dtype = DataType.FLOAT32 if half else p.dtype
        c_size = c_dtype.itemsize
        first = True
        for n0, nb, args, col_grid, _ in self.chunks:
            if self.pointwise:
                base, per_image = x + n0 * p.c * i * size, p.c * i
            else:
                args.set_pointers(x, ws)
                self.im2col.launch(args, grid=(col_grid,))
                base, per_image = ws, p.c * f * o
            for n in range(nb):
                for gi in range(g):
                    self.gemm(
                        p.dtype,
                        True,
                        False,
                        cf,
                        kg,
                        o,
                        base + (n * per_image + gi * cf * o) * size,
                        o,
                        0,
                        dy + ((n0 + n) * p.k + gi * kg) * o * size,
                        o,
                        0,
                        target + gi * kg * cf * c_size,
                        cf,
                        0,
                        batch=1,
                        beta=0.0 if first else 1.0,
                        c_dtype=c_dtype,
                    )
                first = False
        if half:
            self.cast_args.set_pointers(target, dw)
            self.cast.launch(self.cast_args, grid=(self.cast_grid,))


class GpuIm2colGemmTf32Solver(Tf32Twin, GpuIm2colGemmSolver):
    """``gemm.gpu_im2col`` with the BLAS allowed to round float32 inputs to TF32 (see
    :class:`miocore_gemm.tf32.Tf32Twin`): NCHW's 1x1 layers as one TF32 GEMM per chunk of
    images, read and written in place, where the channels-last solvers copy the tensors
    first."""

    name = "gemm.gpu_im2col_tf32"
    exact_name = "gemm.gpu_im2col"
