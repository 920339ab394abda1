"""``gemm.gpu_nhwc``: the GEMM lowering for channels-last tensors (NHWC / NDHWC) on the vendor
BLAS, every direction in one BLAS call per chunk of images.

With channels innermost, an output row ``m = (n, output position)`` and the column
``r = (g, tap, c)`` make every direction one row-major GEMM per group, batched over the groups
(cuBLAS/hipBLAS strided-batched, fp32 accumulation):

* forward:          Y[m, g*Kg + k]  = sum_r col[m, g, r] . W[g*Kg + k, r]
* backward data:    col[m, g, r]    = sum_k dY[m, g*Kg + k] . W[g*Kg + k, r], then col2im
* backward weights: dW[g*Kg + k, r] = sum_m dY[m, g*Kg + k] . col[m, g, r]

``col`` is x itself for 1x1 filters with stride 1 and no padding (no copy at all), else the
im2col_cl rows (``kernels/im2col_cl.cu``). Unlike the NCHW solver, backward weights reduces
over all the chunk's rows in one GEMM, so the BLAS picks its own split of the long reduction.
Images go in chunks whose row buffer fits
:data:`~miocore_gemm.gpu_nhwc_geometry.WORKSPACE_BUDGET` (one image at least).

Backward data with stride 1 runs as the forward convolution of dY with the flipped,
transposed filter (pad ``dilation * (F - 1) - pad``): im2col of dY and one GEMM writing dx,
instead of a GEMM into rows and a gathering col2im that reads every tap's rows back.

In half types a group's block of ``r`` is padded with zeros to a whole number of 16 bytes
where ``taps * Cg`` is not (ResNet's conv1: 7*7*3 = 147 becomes 152), and w / dW go through a
padded copy in the workspace: the BLAS's tensor-core kernels want 16-byte aligned leading
dimensions, and the rows are then built 16 bytes per thread.

Which of these paths a problem takes, and the sizes of its rows, chunks and workspace, are
worked out in :mod:`miocore_gemm.gpu_nhwc_geometry`; this module holds the solvers and the
invoker.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
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
)
from miocore_gemm.gpu_nhwc_geometry import (
    BLOCK,
    accumulator_bytes,
    block_count,
    copy_unit,
    dims,
    forward_twin,
    group_width,
    images_per_chunk,
    is_flipped_backward,
    is_padded,
    is_pointwise,
    is_strided_pointwise,
    needs_accumulator,
    pack_params,
    patch_bytes,
    row_bytes,
    rows_buffer_bytes,
    tile_width,
    weights_bytes,
)
from miocore_gemm.tf32 import Tf32Twin

KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "gemm/im2col_cl.cu"
#: A single image's row buffer beyond this is not worth it: other solvers serve the problem.
#: (The 3-D U-Net's 64^3 decoder layers need 2.7 GiB in fp16; below that only the naive
#: direct kernel applies to them, some 300 times slower.)
MAX_IMAGE_ROWS_BYTES = 8 << 30
_GRID_Y = 65535
_CHANNELS_LAST = {2: "NHWC", 3: "NDHWC"}


class GpuChannelsLastGemmSolver(Solver):
    """Channels-last im2col / col2im + vendor BLAS, every direction, groups, 2-D and 3-D."""

    name = "gemm.gpu_nhwc"
    numerical_notes = frozenset()
    algorithm = Algorithm.GEMM
    backends = GPU_BACKENDS
    is_dynamic = True
    #: Whether the BLAS may round float32 inputs to TF32 (the ``gemm.gpu_nhwc_tf32`` twin).
    tf32 = False

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Packed channels-last x, w and y (NHWC / NDHWC), BLAS-sized dimensions."""
        p = problem
        want = _CHANNELS_LAST.get(p.spatial_dims)
        if want is None:
            return not_applicable(f"{p.spatial_dims}-D problem: 2-D and 3-D only")
        for name in ("x", "w", "y"):
            desc = getattr(p, name)
            if desc.layout != want or not desc.is_packed:
                return not_applicable(
                    f"{name} is {desc.layout}{'' if desc.is_packed else ' (strided)'}; this "
                    f"solver needs packed {want} (gemm.gpu_im2col serves NCHW)"
                )
        p = forward_twin(p)  # the GEMM's geometry
        g, cg, kg, f, o = dims(p)
        if row_bytes(p) > MAX_IMAGE_ROWS_BYTES:
            return not_applicable(
                f"one image's im2col rows take {row_bytes(p) >> 20} MiB (over "
                f"{MAX_IMAGE_ROWS_BYTES >> 20} MiB)"
            )
        rows = o * images_per_chunk(p)
        if max(g * f * cg, kg, rows, p.k) >= 2**31:
            return not_applicable("a GEMM dimension exceeds 32-bit BLAS indexing")
        return APPLICABLE

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """One chunk's rows, then the GEMM's copy of w / dW (padded or flipped), or a float32
        dW for half-type backward weights over several chunks."""
        p = problem
        return rows_buffer_bytes(forward_twin(p)) + weights_bytes(p) + accumulator_bytes(p)

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The BLAS runs near its peak where each group's GEMM is wide enough
        (``gemm_fill``); the row buffer costs traffic that grows with the taps."""
        _, _, _, f, _ = dims(problem)
        base = 0.6 if is_pointwise(problem) else max(0.1, 0.45 / math.sqrt(f))
        return base * gemm_fill(problem)

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The row kernels, each in the copy unit for this problem and in the element size
        (the fallback for unaligned pointers), the padded-row kernels, and a BLAS-driving
        invoker."""
        p = problem
        dtype_opt = DTYPE_OPTIONS[p.dtype]
        unit = copy_unit(p)
        wide = (dtype_opt, f"-DMIO_UNIT={unit}")
        scalar = (dtype_opt, f"-DMIO_UNIT={p.dtype.itemsize}")

        def kernel(name: str, options: tuple[str, ...]) -> KernelInfo:
            return KernelInfo(source=SOURCE, kernel_name=name, options=options, block=(BLOCK,))

        # One source, two option sets: at most two modules to compile.
        kernels = (
            kernel("im2col_cl", wide),
            kernel("im2col_cl", scalar),
            kernel("im2col_cl_tiles", wide),
            kernel("col2im_cl", wide),
            kernel("col2im_cl", scalar),
            kernel("copy_rows", wide),
            kernel("copy_rows_from_f32", wide),
            kernel("flip_filter", wide),
        )
        workspace = self.workspace_size(ctx, p)

        def factory(compiled: Any) -> Any:
            backend = compiled[0].backend
            blas = backend.blas
            if blas is None:
                raise NotApplicableError(
                    getattr(backend.driver, "blas_error", "no BLAS on this backend"),
                    field="solver",
                    value=self.name,
                )
            return _Invoker(p, backend, blas, unit, self.tf32, *compiled)

        return ConvSolution(
            solver=self.name, workspace_size=workspace, invoker_factory=factory, kernels=kernels
        )


class _Invoker:
    """Chunks of images: the row kernel, then one group-batched BLAS call per chunk."""

    #: Each BLAS call costs several µs of host time through its binding: a prepared run keeps
    #: even a one-launch call (a 1x1 layer's single GEMM) as a graph to replay.
    replay_pays = True

    def __init__(
        self, p: ConvProblem, backend: Any, blas: Any, unit: int, tf32: bool, *kernels: Any
    ) -> None:
        self.p, self.backend, self.unit = p, backend, unit
        # Every product of this invoker in the same arithmetic: exact fp32, or TF32 allowed.
        self.gemm = functools.partial(blas.gemm, tf32=tf32)
        (
            self.im2col,
            self.im2col_scalar,
            self.im2col_tiles,
            self.col2im,
            self.col2im_scalar,
            self.copy_rows,
            self.copy_rows_from_f32,
            self.flip_filter,
        ) = kernels
        # Fixed per problem: worked out once here, not on every run. The GEMM's geometry is
        # the problem's forward twin (itself, except stride-1 backward data).
        self.flipped = is_flipped_backward(p)
        self.geometry = forward_twin(p)
        self.accumulate = needs_accumulator(p)
        self.pointwise = is_pointwise(p)
        self.strided_pointwise = is_strided_pointwise(p)
        self.strided = self._strided_geometry() if self.strided_pointwise else None
        p = self.geometry
        self.padded = is_padded(p)
        g, cg, _, f, _ = dims(p)
        self.gw = group_width(p)
        self.tile = tile_width(p)
        self.patch_bytes = patch_bytes(p, self.tile) if self.padded else 0
        size = p.dtype.itemsize
        nb = images_per_chunk(p)
        self.chunks = []
        for n0 in range(0, p.n, nb):
            count = min(nb, p.n - n0)
            args = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", pack_params(p, n0, count))])
            # Two-dimensional grids: x covers one row's items, y the rows (see the kernels).
            out_rows = min(count * math.prod(p.out_spatial[:-1]), _GRID_Y)
            in_rows = min(count * math.prod(p.in_spatial[:-1]), _GRID_Y)
            out_width, in_width = p.out_spatial[-1], p.in_spatial[-1]
            grids = {
                "im2col": (block_count(out_width * g * cg * size // unit), out_rows),
                "im2col_scalar": (block_count(out_width * g * cg), out_rows),
                "tiles": (min(-(-out_width // max(self.tile, 1)), _GRID_Y), out_rows),
                "col2im": (block_count(in_width * p.c * size // unit), in_rows),
                "col2im_scalar": (block_count(in_width * p.c), in_rows),
            }
            self.chunks.append((n0, count, args, grids))
        self.rows_bytes = rows_buffer_bytes(p)
        fc = f * cg
        # Padded w (forward, backward data) and the dW block copies (backward weights).
        self.pad_args = KernelArgs(
            [("ptr", 0), ("ptr", 0)] + [("i64", v) for v in (p.k, fc, self.gw, fc, self.gw)]
        )
        self.unpad_args = KernelArgs(
            [("ptr", 0), ("ptr", 0)] + [("i64", v) for v in (p.k, fc, fc, self.gw, fc)]
        )
        self.pad_grid = (grid_for(p.k * self.gw, BLOCK, backend.device),)
        self.unpad_grid = (grid_for(p.k * fc, BLOCK, backend.device),)
        # Flipped filter: rows of the twin's K (= C), each F * Kg wide, padded to gw.
        self.flip_args = KernelArgs(
            [("ptr", 0), ("ptr", 0)] + [("i64", v) for v in (p.k, self.gw, f, p.c // g, p.k // g)]
        )

    def __call__(self, handle: Any, ip: InvokeParams) -> None:
        ws = ip.workspace.ptr if ip.workspace is not None else 0
        direction = self.p.direction
        if direction is Direction.FORWARD:
            self._forward(ip.x.ptr, ip.w.ptr, ip.y.ptr, ws)
        elif direction is Direction.BACKWARD_DATA:
            self._backward_data(ip.x.ptr, ip.w.ptr, ip.y.ptr, ws)
        else:
            self._backward_weights(ip.x.ptr, ip.w.ptr, ip.y.ptr, ws)

    def _rows(self, x: int, ws: int, args: Any, grids: dict) -> None:
        args.set_pointers(x, ws)
        if self.padded:  # reads x element by element: any alignment
            self.im2col_tiles.launch(args, grid=grids["tiles"], shared=self.patch_bytes)
        elif x % self.unit == 0:
            self.im2col.launch(args, grid=grids["im2col"])
        else:
            self.im2col_scalar.launch(args, grid=grids["im2col_scalar"])

    def _weights(self, w: int, ws: int) -> int:
        """w as the GEMM reads it: itself, or its flipped or padded copy after the rows."""
        if not (self.padded or self.flipped):
            return w
        copy = ws + self.rows_bytes
        if self.flipped:
            self.flip_args.set_pointers(w, copy)
            self.flip_filter.launch(self.flip_args, grid=self.pad_grid)
        else:
            self.pad_args.set_pointers(w, copy)
            self.copy_rows.launch(self.pad_args, grid=self.pad_grid)
        return copy

    def _strided_geometry(self) -> tuple[int, int, int, int, int]:
        """(blocks N*Ho, rows per block Wo, x leading dimension, x block stride, C)."""
        p = self.p
        (_, width), (sh, sw) = p.in_spatial, p.conv.strides
        ho, wo = p.out_spatial
        return p.n * ho, wo, sw * p.c, sh * width * p.c, p.c

    def _forward(self, x: int, w: int, y: int, ws: int) -> None:
        p = self.geometry
        g, _, kg, _, o = dims(p)
        size = p.dtype.itemsize
        gw = self.gw
        if self.strided_pointwise:
            blocks, wo, ld, block_stride, c = self.strided
            # Column-major, per block of Wo rows: Y^T (K x Wo) = W (C x K)^T . x rows (C x Wo).
            self.gemm(
                p.dtype, True, False, p.k, wo, c, w, c, 0, x, ld, block_stride, y, p.k,
                wo * p.k, batch=blocks,
            )  # fmt: skip
            return
        weights = self._weights(w, ws)
        for n0, count, args, grids in self.chunks:
            if self.pointwise:
                rows = x + n0 * o * p.c * size
            else:
                self._rows(x, ws, args, grids)
                rows = ws
            # Column-major: Y^T (Kg x rows, ld K) = W_g (stored GW x Kg, transposed) . rows^T.
            self.gemm(
                p.dtype, True, False, kg, count * o, gw, weights, gw, kg * gw, rows, g * gw, gw,
                y + n0 * o * p.k * size, p.k, kg, batch=g,
            )  # fmt: skip

    def _backward_data(self, dx: int, w: int, dy: int, ws: int) -> None:
        p = self.p
        g, _, kg, _, o = dims(p)
        size = p.dtype.itemsize
        gw = self.gw
        if self.flipped:  # dx = the forward convolution of dY with the flipped filter
            self._forward(dy, w, dx, ws)
            return
        if self.strided_pointwise:
            # dx is zero where no output pixel lands; the BLAS fills the pixels that one does.
            backend = self.backend
            backend.driver.memset(dx, p.x.element_count * size, backend.stream_object)
            blocks, wo, ld, block_stride, c = self.strided
            # Column-major, per block: dx rows (C x Wo, ld stride*C) = W (C x K) . dY^T (K x Wo).
            self.gemm(
                p.dtype, False, False, c, wo, p.k, w, c, 0, dy, p.k, wo * p.k, dx, ld,
                block_stride, batch=blocks,
            )  # fmt: skip
            return
        weights = self._weights(w, ws)
        aligned = dx % self.unit == 0
        for n0, count, args, grids in self.chunks:
            out = dx + n0 * o * p.c * size if self.pointwise else ws
            # Column-major: rows^T (GW x rows, ld G*GW) = W_g (GW x Kg) . dY_g^T (Kg x rows).
            self.gemm(
                p.dtype, False, False, gw, count * o, kg, weights, gw, kg * gw,
                dy + n0 * o * p.k * size, p.k, kg, out, g * gw, gw, batch=g,
            )  # fmt: skip
            if not self.pointwise:
                args.set_pointers(ws, dx)
                if aligned:
                    self.col2im.launch(args, grid=grids["col2im"])
                else:
                    self.col2im_scalar.launch(args, grid=grids["col2im_scalar"])

    def _backward_weights(self, x: int, dw: int, dy: int, ws: int) -> None:
        p = self.p
        g, _, kg, _, o = dims(p)
        size = p.dtype.itemsize
        gw = self.gw
        accumulate = self.accumulate
        # dW lands in dw itself, or (float32 accumulator, padded blocks) after the rows.
        target = ws + self.rows_bytes if accumulate or self.padded else dw
        c_dtype = DataType.FLOAT32 if accumulate else p.dtype
        for index, (n0, count, args, grids) in enumerate(self.chunks):
            if self.pointwise:
                rows = x + n0 * o * p.c * size
            else:
                self._rows(x, ws, args, grids)
                rows = ws
            # Column-major: dW_g^T (GW x Kg, ld GW) = rows^T (GW x rows) . dY_g (rows x Kg).
            self.gemm(
                p.dtype, False, True, gw, kg, count * o, rows, g * gw, gw,
                dy + n0 * o * p.k * size, p.k, kg, target, gw, kg * gw, batch=g,
                beta=0.0 if index == 0 else 1.0, c_dtype=c_dtype,
            )  # fmt: skip
        if target != dw:
            self.unpad_args.set_pointers(target, dw)
            copy = self.copy_rows_from_f32 if accumulate else self.copy_rows
            copy.launch(self.unpad_args, grid=self.unpad_grid)


class GpuChannelsLastGemmTf32Solver(Tf32Twin, GpuChannelsLastGemmSolver):
    """``gemm.gpu_nhwc`` with the BLAS allowed to round float32 inputs to TF32 (see
    :class:`miocore_gemm.tf32.Tf32Twin`)."""

    name = "gemm.gpu_nhwc_tf32"
    exact_name = "gemm.gpu_nhwc"
