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
Images go in chunks whose row buffer fits :data:`WORKSPACE_BUDGET` (one image at least).

Backward data with stride 1 runs as the forward convolution of dY with the flipped,
transposed filter (pad ``dilation * (F - 1) - pad``): im2col of dY and one GEMM writing dx,
instead of a GEMM into rows and a gathering col2im that reads every tap's rows back.

In half types a group's block of ``r`` is padded with zeros to a whole number of 16 bytes
where ``taps * Cg`` is not (ResNet's conv1: 7*7*3 = 147 becomes 152), and w / dW go through a
padded copy in the workspace: the BLAS's tensor-core kernels want 16-byte aligned leading
dimensions, and the rows are then built 16 bytes per thread.
"""

from __future__ import annotations

import functools
import math
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
    InvokeParams,
    KernelInfo,
    NotApplicableError,
    PerfConfig,
    Solver,
    not_applicable,
)
from miocore.backends.gpu_kernels import DTYPE_OPTIONS, GPU_BACKENDS, KernelArgs, grid_for

KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "gemm/im2col_cl.cu"
#: Largest row buffer a chunk of images may use (bytes); one image may exceed it.
WORKSPACE_BUDGET = 256 << 20
#: A single image's row buffer beyond this is not worth it: other solvers serve the problem.
#: (The 3-D U-Net's 64^3 decoder layers need 2.7 GiB in fp16; below that only the naive
#: direct kernel applies to them, some 300 times slower.)
MAX_IMAGE_ROWS_BYTES = 8 << 30
#: Shared memory the padded-row kernel aims to stay within (bytes), and its hard limit.
PATCH_BUDGET = 32 << 10
PATCH_LIMIT = 48 << 10
#: Largest filter, as a share of the rows, for which stride-1 backward data runs as the
#: flipped forward convolution (see :func:`is_flipped_backward`).
FLIP_MAX_FILTER_SHARE = 1 / 16
#: Narrowest output row for which 1x1 strided forward and backward data run as
#: strided-batched GEMM blocks in place (see :func:`is_strided_pointwise`).
STRIDED_MIN_WIDTH = 28
_BLOCK = 256
_GRID_Y = 65535
_CHANNELS_LAST = {2: "NHWC", 3: "NDHWC"}


def _dims(p: ConvProblem) -> tuple[int, int, int, int, int]:
    """(groups, Cg, Kg, filter taps F, output positions O)."""
    g = p.groups
    return g, p.c // g, p.k // g, math.prod(p.filter_spatial), math.prod(p.out_spatial)


def is_pointwise(p: ConvProblem) -> bool:
    """1x1 filter, stride 1, no padding: the rows are x itself."""
    return (
        all(s == 1 for s in p.filter_spatial)
        and all(s == 1 for s in p.conv.strides)
        and not any(p.conv.pads)
    )


def is_strided_pointwise(p: ConvProblem) -> bool:
    """A 2-D 1x1 filter with stride > 1, no padding, one group, and the input exactly stride
    times the output (ResNet's downsampling layers). Forward and backward data then need no
    rows: output rows ``(n, oh)`` sit at a constant distance in x, so one strided-batched BLAS
    call over ``N * Ho`` blocks of ``Wo`` rows reads x (writes dx) in place, with a leading
    dimension of ``stride * C``.

    The blocks are small GEMMs of ``Wo`` rows, so they only pay from
    :data:`STRIDED_MIN_WIDTH` on; narrower layers take one dense GEMM and the row kernel. On
    an H200 (ResNet-50, batch 32), blocks against rows: forward fp16 0.025 / 0.035 / 0.073
    ms against 0.040 / 0.027 / 0.022 at Wo 28 / 14 / 7; backward data fp16 0.039 / 0.042 /
    0.081 against 0.067 / 0.042 / 0.029, fp32 0.24 / 0.41 / 0.92 against 0.25 / 0.21 /
    0.19 (the run-of-channels col2im)."""
    return (
        p.spatial_dims == 2
        and p.groups == 1
        and p.direction is not Direction.BACKWARD_WEIGHTS
        and p.out_spatial[-1] >= STRIDED_MIN_WIDTH
        and all(s == 1 for s in p.filter_spatial)
        and not any(p.conv.pads)
        and any(s > 1 for s in p.conv.strides)
        and all(
            i == s * o for i, s, o in zip(p.in_spatial, p.conv.strides, p.out_spatial, strict=True)
        )
    )


def is_flipped_backward(p: ConvProblem) -> bool:
    """Backward data with stride 1 that is not a plain 1x1 (whose rows are dY itself), whose
    forward twin has no negative padding, and whose filter is small beside the rows: dx is
    then the forward convolution of dY with the flipped filter, see :func:`forward_twin`.

    Flipping transposes the filter per group (scattered reads), so it only pays where the
    filter is at most :data:`FLIP_MAX_FILTER_SHARE` of the rows it saves a round trip of: on
    an H200 (ResNet-50, batch 32, fp16) l2.3x3 0.046 ms flipped against 0.061 through
    col2im (filter 1/200 of the rows), l3.3x3 0.036 against 0.034 (1/24), l4.3x3 0.042
    against 0.024 (1/3)."""
    rows = p.n * math.prod(p.in_spatial) * math.prod(p.filter_spatial) * p.k
    return (
        p.direction is Direction.BACKWARD_DATA
        and all(s == 1 for s in p.conv.strides)
        and not is_pointwise(p)
        and p.w.element_count <= rows * FLIP_MAX_FILTER_SHARE
        and all(
            pad <= d * (f - 1)
            for pad, d, f in zip(p.conv.pads, p.conv.dilations, p.filter_spatial, strict=True)
        )
    )


def forward_twin(p: ConvProblem) -> ConvProblem:
    """The problem whose forward run computes this one: for a stride-1 backward data, dY
    (K channels) convolved into dx (C channels) with w flipped in every spatial axis and
    transposed per group, padding ``dilation * (F - 1) - pad``; other problems are their
    own twin."""
    if not is_flipped_backward(p):
        return p
    pads = tuple(
        d * (f - 1) - pad
        for pad, d, f in zip(p.conv.pads, p.conv.dilations, p.filter_spatial, strict=True)
    )
    return ConvProblem.from_sizes(
        "forward", n=p.n, c=p.k, k=p.c, in_spatial=p.out_spatial,
        filter_spatial=p.filter_spatial, pads=pads, dilations=p.conv.dilations,
        groups=p.groups, dtype=p.dtype, layout=p.x.layout,
    )  # fmt: skip


def _patch_bytes(p: ConvProblem, tile: int) -> int:
    """Shared memory of im2col_cl_tiles for ``tile`` output pixels: the offset table (one
    int per element of a group's block, 16-byte aligned), then every tap row of the input
    patch they read, all channels."""
    *outer, fx = _three(p.filter_spatial, 1)
    stride, dil = p.conv.strides[-1], p.conv.dilations[-1]
    width = (tile - 1) * stride + dil * (fx - 1) + 1
    _, cg, _, f, _ = _dims(p)
    per_chunk = 16 // p.dtype.itemsize
    table = -(-f * cg // per_chunk) * per_chunk * 4
    return -(-table // 16) * 16 + math.prod(outer) * width * p.c * p.dtype.itemsize


def tile_width(p: ConvProblem) -> int:
    """Output pixels per block of the padded-row kernel: up to 64 while the patch stays
    within :data:`PATCH_BUDGET`; 0 where not even one pixel's patch fits."""
    tile = 64
    while tile > 1 and _patch_bytes(p, tile) > PATCH_BUDGET:
        tile //= 2
    return tile if _patch_bytes(p, tile) <= PATCH_LIMIT else 0


def group_width(p: ConvProblem) -> int:
    """Elements of one group's block in a row: ``taps * Cg``, rounded up to 16 bytes in half
    types where it is not a whole number of them (where rows are built at all, and the
    padded-row kernel's patch fits in shared memory)."""
    _, cg, _, f, _ = _dims(p)
    width = f * cg
    per_chunk = 16 // p.dtype.itemsize
    if (
        p.dtype is DataType.FLOAT32
        or width % per_chunk == 0
        or is_pointwise(p)
        or is_strided_pointwise(p)
        or not tile_width(p)
    ):
        return width
    return -(-width // per_chunk) * per_chunk


def is_padded(p: ConvProblem) -> bool:
    """Whether the rows, w and dW go through zero-padded blocks (see :func:`group_width`)."""
    _, cg, _, f, _ = _dims(p)
    return group_width(p) != f * cg


def row_bytes(p: ConvProblem) -> int:
    """Bytes of one image's rows (0 when no row buffer is needed)."""
    if is_pointwise(p) or is_strided_pointwise(p):
        return 0
    g, _, _, _, o = _dims(p)
    return o * g * group_width(p) * p.dtype.itemsize


def images_per_chunk(p: ConvProblem) -> int:
    """As many images as keep the row buffer within the budget, at least one."""
    per_image = row_bytes(p)
    if per_image == 0:
        return p.n
    return max(1, min(p.n, WORKSPACE_BUDGET // per_image))


def copy_unit(p: ConvProblem) -> int:
    """Bytes im2col_cl moves at once: the largest of 16/8/4/2 that divides the group's channel
    run and every x stride (in bytes), and at least the element size."""
    size = p.dtype.itemsize
    _, cg, *_ = _dims(p)
    strides = [p.x.strides[0], *p.x.strides[2:]]
    for unit in (16, 8, 4, 2):
        if (
            unit >= size
            and (cg * size) % unit == 0
            and all((s * size) % unit == 0 for s in strides)
        ):
            return unit
    return size


def _aligned(nbytes: int) -> int:
    # Workspace regions start on 256 bytes, as the BLAS likes its operands.
    return -(-nbytes // 256) * 256


def _rows_buffer_bytes(p: ConvProblem) -> int:
    return _aligned(images_per_chunk(p) * row_bytes(p))


def _weights_bytes(p: ConvProblem) -> int:
    """The GEMM's own copy of the filter: the padded w (forward, backward data), the padded
    dW (backward weights, when it is not accumulated in float32), or the flipped w of a
    stride-1 backward data (for ``p`` its :func:`forward_twin`): K rows of the group width."""
    if not (is_padded(p) or is_flipped_backward(p)) or _needs_accumulator(p):
        return 0
    twin = forward_twin(p)
    return _aligned(twin.k * group_width(twin) * p.dtype.itemsize)


def _needs_accumulator(p: ConvProblem) -> bool:
    """Half-type backward weights over several chunks sums them in a float32 dW; with one
    chunk the BLAS rounds its fp32 result straight into dw."""
    return (
        p.direction is Direction.BACKWARD_WEIGHTS
        and p.dtype is not DataType.FLOAT32
        and images_per_chunk(p) < p.n
    )


def _accumulator_bytes(p: ConvProblem) -> int:
    return p.k * group_width(p) * 4 if _needs_accumulator(p) else 0


def _blocks(items: int) -> int:
    return max(1, -(-items // _BLOCK))


def _three(values: tuple[int, ...], fill: int) -> list[int]:
    return [fill] * (3 - len(values)) + list(values)


def pack_params(p: ConvProblem, n0: int, nb: int) -> bytes:
    """``MioClParams`` (kernels/im2col_cl.cu) by value, every field an int64."""
    xs = list(p.x.strides)
    # Logical order (N, C, [D,] H, W): N, then the spatial strides; 2-D gets D stride 0.
    spatial = xs[2:] if p.spatial_dims == 3 else [0, *xs[2:]]
    g, cg, *_ = _dims(p)
    fields = [
        *_three(p.in_spatial, 1),
        *_three(p.out_spatial, 1),
        *_three(p.filter_spatial, 1),
        *_three(p.conv.pads, 0),
        *_three(p.conv.strides, 1),
        *_three(p.conv.dilations, 1),
        xs[0],
        *spatial,
        p.c,
        g,
        cg,
        n0,
        nb,
        group_width(p),
        tile_width(p),
    ]
    return np.array(fields, dtype=np.int64).tobytes()


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
        g, cg, kg, f, o = _dims(p)
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
        return _rows_buffer_bytes(forward_twin(p)) + _weights_bytes(p) + _accumulator_bytes(p)

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The BLAS runs near its peak; the row buffer costs traffic that grows with the taps."""
        _, _, _, f, _ = _dims(problem)
        return 0.6 if is_pointwise(problem) else max(0.1, 0.45 / math.sqrt(f))

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
            return KernelInfo(source=SOURCE, kernel_name=name, options=options, block=(_BLOCK,))

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
        self.accumulate = _needs_accumulator(p)
        self.pointwise = is_pointwise(p)
        self.strided_pointwise = is_strided_pointwise(p)
        self.strided = self._strided_geometry() if self.strided_pointwise else None
        p = self.geometry
        self.padded = is_padded(p)
        g, cg, _, f, _ = _dims(p)
        self.gw = group_width(p)
        self.tile = tile_width(p)
        self.patch_bytes = _patch_bytes(p, self.tile) if self.padded else 0
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
                "im2col": (_blocks(out_width * g * cg * size // unit), out_rows),
                "im2col_scalar": (_blocks(out_width * g * cg), out_rows),
                "tiles": (min(-(-out_width // max(self.tile, 1)), _GRID_Y), out_rows),
                "col2im": (_blocks(in_width * p.c * size // unit), in_rows),
                "col2im_scalar": (_blocks(in_width * p.c), in_rows),
            }
            self.chunks.append((n0, count, args, grids))
        self.rows_bytes = _rows_buffer_bytes(p)
        fc = f * cg
        # Padded w (forward, backward data) and the dW block copies (backward weights).
        self.pad_args = KernelArgs(
            [("ptr", 0), ("ptr", 0)] + [("i64", v) for v in (p.k, fc, self.gw, fc, self.gw)]
        )
        self.unpad_args = KernelArgs(
            [("ptr", 0), ("ptr", 0)] + [("i64", v) for v in (p.k, fc, fc, self.gw, fc)]
        )
        self.pad_grid = (grid_for(p.k * self.gw, _BLOCK, backend.device),)
        self.unpad_grid = (grid_for(p.k * fc, _BLOCK, backend.device),)
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
        g, _, kg, _, o = _dims(p)
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
        g, _, kg, _, o = _dims(p)
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
        g, _, kg, _, o = _dims(p)
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


class GpuChannelsLastGemmTf32Solver(GpuChannelsLastGemmSolver):
    """``gemm.gpu_nhwc`` with the BLAS allowed to round float32 inputs to TF32 (cuBLAS
    ``CUBLAS_COMPUTE_32F_FAST_TF32``; hipBLAS keeps exact fp32). Only in the ``"tf32"`` math
    mode, so an exact-fp32 caller never gets its 10-bit mantissa products."""

    name = "gemm.gpu_nhwc_tf32"
    numerical_notes = frozenset({"tf32"})
    tf32 = True

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """float32 problems in the ``"tf32"`` math mode, then as ``gemm.gpu_nhwc``."""
        mode = getattr(ctx, "math_mode", "exact")
        if mode != "tf32":
            return not_applicable(
                f"math mode is {mode!r}: TF32 rounds fp32 inputs to 10 mantissa bits; pass "
                "Handle(..., math_mode='tf32') to allow it (gemm.gpu_nhwc is the exact twin)"
            )
        if problem.dtype is not DataType.FLOAT32:
            return not_applicable(f"{problem.dtype.value} problem: TF32 applies to float32 only")
        return super().is_applicable(ctx, problem)

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The exact twin's, with the BLAS at the TF32 tensor rate (half the device's fp16
        ceiling) instead of the fp32 one, at most 1. On the H200 this twin measured 0.77 of
        cuDNN's TF32 time over ResNet-50 where the exact one measured 0.28."""
        gflops = ctx.device.ceilings.gflops
        speedup = gflops[DataType.FLOAT16] / 2 / gflops[DataType.FLOAT32]
        return min(1.0, super().wti(ctx, problem) * max(1.0, speedup))
