"""Running a :class:`~miocore_gemm._plan.GemmPlan`: im2col, BLAS matmul, col2im, and the invoker
that runs a plan on the caller's arrays (imported when a solution is built, never to describe one).

Every tensor is handled through a *canonical view* with a fixed index order, built with
``as_strided`` from the caller's own strides (never a hidden copy):

* activations ``(B, G, Cg|Kg, *S)``; the column matrix ``(B, G, Cg, *F, *S)``;
* weights ``(G, Kg, Cg, *F)``.

Workspace buffers are allocated in the memory order the GEMM wants and exposed in the same
canonical order, so im2col/col2im are written once and the GEMM operands are *folds* of the
canonical views (a transpose plus merging of adjacent dims, checked, never copied).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from miocore import (
    Direction,
    InvalidArgumentError,
    InvokeParams,
    TensorDescriptor,
    WorkspaceError,
)
from miocore.backends.cpu_gemm import matmul
from miocore.values import evolve
from miocore_gemm._plan import F32, GemmPlan, merged_stride

_as_strided = np.lib.stride_tricks.as_strided
Box = tuple[tuple[int, int], ...]


def fold(view: np.ndarray, perm: Sequence[int], groups: Sequence[int]) -> np.ndarray:
    """Transpose ``view`` by ``perm``, then merge consecutive dims ``groups[i]`` at a time.

    Merged dims of size 1 get the stride a contiguous array would have, so that numpy sees a
    BLAS-compatible matrix even when one of its sides is 1.
    """
    t = view.transpose(perm)
    shape: list[int] = []
    strides: list[int] = []
    i = 0
    for count in groups:
        dims = list(zip(t.shape[i : i + count], t.strides[i : i + count], strict=True))
        i += count
        stride = merged_stride(dims)
        if stride is None:  # the plan only folds what merges; reaching this is a plan bug
            raise AssertionError(f"cannot fold dims {dims} of a view")
        shape.append(math.prod(n for n, _ in dims))
        strides.append(stride)
    for j in reversed(range(len(shape))):
        if shape[j] == 1:
            strides[j] = shape[j + 1] * strides[j + 1] if j + 1 < len(shape) else t.itemsize
    return _as_strided(t, shape=tuple(shape), strides=tuple(strides))


def _split_channels(array: np.ndarray, b0: int, b1: int, groups: int) -> np.ndarray:
    """Canonical ``(B, G, C/G, *S)`` view of images ``b0:b1`` of an (N, C, *S) array."""
    part = array[b0:b1]
    n, c, *spatial = part.shape
    sn, sc, *ss = part.strides
    return _as_strided(
        part, shape=(n, groups, c // groups, *spatial), strides=(sn, sc * (c // groups), sc, *ss)
    )


def _weights_view(w: np.ndarray, groups: int) -> np.ndarray:
    """Canonical ``(G, Kg, Cg, *F)`` view of (K, Cg, *F) weights."""
    k, cg, *filt = w.shape
    sk, sc, *sf = w.strides
    return _as_strided(
        w, shape=(groups, k // groups, cg, *filt), strides=(sk * (k // groups), sk, sc, *sf)
    )


class _Layout:
    """Permutations and merge groups that turn canonical views into GEMM operands."""

    def __init__(self, plan: GemmPlan) -> None:
        d = len(plan.out_spatial)
        f_axes = list(range(3, 3 + d))  # taps in the column view
        s_col = list(range(3 + d, 3 + 2 * d))  # pixels in the column view
        s_act = list(range(3, 3 + d))  # pixels in an activation view
        r_axes = [*f_axes, 2] if plan.filter_major else [2, *f_axes]
        self.w_perm, self.w_groups = [0, 1, *r_axes], [1, 1, 1 + d]
        self.col_memory: list[int] | None = None  # memory order of the column buffer
        wrw = plan.direction is Direction.BACKWARD_WEIGHTS
        if plan.channels_last:  # rows are (b, pixel): operands (B*P, G, X)
            self.col_perm, self.col_groups = [0, *s_col, 1, *r_axes], [1 + d, 1, 1 + d]
            if plan.col_pixel_major:  # same operand, stored (G, R, B*P): F-ordered for BLAS
                self.col_memory = [1, *r_axes, 0, *s_col]
            self.act_perm, self.act_groups = [0, *s_act, 1, 2], [1 + d, 1, 1]
        elif wrw:  # reduction over (b, pixel): operands (G, X, B*P)
            self.col_perm, self.col_groups = [1, *r_axes, 0, *s_col], [1, 1 + d, 1 + d]
            self.act_perm, self.act_groups = [1, 2, 0, *s_act], [1, 1, 1 + d]
        else:  # per image: operands (B, G, X, P)
            self.col_perm, self.col_groups = [0, 1, *r_axes, *s_col], [1, 1, 1 + d, d]
            self.act_perm, self.act_groups = [0, 1, 2, *s_act], [1, 1, 1, d]


def _staged(buffer: np.ndarray, perm: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """A float32 canonical view of ``shape`` over ``buffer``, laid out in memory by ``perm``."""
    count = math.prod(shape)
    memory = buffer[:count].reshape([shape[i] for i in perm])
    return memory.transpose(np.argsort(perm))


def _carve(plan: GemmPlan, workspace: Any) -> dict[str, np.ndarray]:
    need = plan.workspace
    if need == 0:
        return {}
    if workspace is None:
        raise WorkspaceError(
            f"the GEMM solution needs {need} bytes of workspace", field="workspace", value=None
        )
    if not isinstance(workspace, np.ndarray) or not workspace.flags.c_contiguous:
        raise WorkspaceError(
            "expected a C-contiguous numpy array", field="workspace", value=type(workspace).__name__
        )
    if workspace.nbytes < need:
        raise WorkspaceError(
            f"the GEMM solution needs {need} bytes, the workspace has {workspace.nbytes}",
            field="workspace.nbytes",
            value=workspace.nbytes,
        )
    raw = workspace.reshape(-1).view(np.uint8)
    out, offset = {}, 0
    for name, size in plan.buffers:
        out[name] = raw[offset : offset + size].view(np.float32)
        offset += size
    return out


def _tap_ranges(plan: GemmPlan, tap: Sequence[int], box: Box) -> list[tuple[int, int, int]] | None:
    """Per dim ``(lo, hi, first_input)``: box-relative outputs this tap reads in-bounds."""
    ranges = []
    for j, (o0, o1) in enumerate(box):
        s, p, size = plan.strides[j], plan.pads[j], plan.in_spatial[j]
        shift = tap[j] * plan.dilations[j] - p
        lo = max(o0, -(shift // s) if shift < 0 else 0)  # first o with o*s + shift >= 0
        hi = min(o1, (size - 1 - shift) // s + 1) if size - 1 - shift >= 0 else o0
        if hi <= lo:
            return None
        ranges.append((lo - o0, hi - o0, lo * s + shift))
    return ranges


def _in_slices(plan: GemmPlan, ranges: list[tuple[int, int, int]]) -> tuple[slice, ...]:
    return tuple(
        slice(first, first + (hi - lo - 1) * s + 1, s)
        for (lo, hi, first), s in zip(ranges, plan.strides, strict=True)
    )


def _im2col(plan: GemmPlan, col: np.ndarray, x: np.ndarray, box: Box) -> None:
    """Fill the canonical column view ``col`` (B, G, Cg, *F, *box) from ``x`` (B, G, Cg, *S)."""
    lead = (slice(None),) * 3
    for tap in np.ndindex(*plan.filter_spatial):
        dst = col[(*lead, *tap)]
        ranges = _tap_ranges(plan, tap, box)
        if ranges is None:
            dst[...] = 0
            continue
        inner = tuple(slice(lo, hi) for lo, hi, _ in ranges)
        np.copyto(dst[(*lead, *inner)], x[(*lead, *_in_slices(plan, ranges))], casting="unsafe")
        for j, (lo, hi, _) in enumerate(ranges):  # zero what the tap reads from padding
            pre = (*lead, *(slice(None),) * j)
            if lo > 0:
                dst[(*pre, slice(0, lo))] = 0
            if hi < box[j][1] - box[j][0]:
                dst[(*pre, slice(hi, None))] = 0


def _col2im(plan: GemmPlan, acc: np.ndarray, col: np.ndarray, box: Box, add: bool) -> None:
    """Scatter the canonical column view ``col`` into ``acc`` (B, G, Cg, *S), one tap at a time."""
    lead = (slice(None),) * 3
    for tap in np.ndindex(*plan.filter_spatial):
        ranges = _tap_ranges(plan, tap, box)
        if ranges is None:
            continue
        inner = tuple(slice(lo, hi) for lo, hi, _ in ranges)
        src = col[(*lead, *tap, *inner)]
        dst = acc[(*lead, *_in_slices(plan, ranges))]
        if add:
            np.add(dst, src, out=dst)
        else:
            np.copyto(dst, src, casting="unsafe")


def _box_slices(box: Box) -> tuple[slice, ...]:
    return (slice(None),) * 3 + tuple(slice(a, b) for a, b in box)


def run_plan(plan: GemmPlan, params: InvokeParams) -> None:
    """Execute ``plan`` on the caller's arrays; writes the direction's output in place."""
    bufs = _carve(plan, params.workspace)
    lay = _Layout(plan)
    g, d = plan.groups, len(plan.out_spatial)
    cg, kg = plan.c // g, plan.k // g
    direction = plan.direction
    x, w, y = params.x, params.w, params.y
    w_view = _weights_view(w, g)

    if plan.w_direct:
        w_canon = w_view
    else:
        w_canon = _staged(bufs["w"], lay.w_perm, w_view.shape)
        if direction is not Direction.BACKWARD_WEIGHTS:
            np.copyto(w_canon, w_view, casting="unsafe")
    w_mat = fold(w_canon, lay.w_perm, lay.w_groups)  # (G, Kg, R)

    first_tile = True
    for b0, b1, boxes in plan.image_groups():
        x_img = _split_channels(x, b0, b1, g)
        y_img = _split_channels(y, b0, b1, g)
        nb = b1 - b0
        acc = None
        if direction is Direction.BACKWARD_DATA and not plan.direct_col:
            acc = _staged(bufs["dx"], lay.act_perm, x_img.shape) if plan.dx_staged else x_img
            if plan.accumulate_dx or any(s > 1 for s in plan.strides):
                acc[...] = 0
        for box in boxes:
            sizes = tuple(b - a for a, b in box)
            y_box = y_img[_box_slices(box)]
            if plan.y_direct:
                y_canon = y_box
            else:
                y_canon = _staged(bufs["y"], lay.act_perm, (nb, g, kg, *sizes))
                if direction is not Direction.FORWARD:
                    np.copyto(y_canon, y_box, casting="unsafe")
            y_mat = fold(y_canon, lay.act_perm, lay.act_groups)
            if plan.direct_col:
                x_box = x_img[_box_slices(box)]
                col_canon = np.expand_dims(x_box, tuple(range(3, 3 + d)))
            else:
                col_canon = _staged(
                    bufs["col"],
                    lay.col_memory or lay.col_perm,
                    (nb, g, cg, *plan.filter_spatial, *sizes),
                )
                if direction is not Direction.BACKWARD_DATA:
                    _im2col(plan, col_canon, x_img, box)
            col_mat = fold(col_canon, lay.col_perm, lay.col_groups)

            if direction is Direction.FORWARD:
                _gemm_forward(plan, w_mat, col_mat, y_mat)
                if not plan.y_direct:
                    np.copyto(y_box, y_canon, casting="unsafe")
            elif direction is Direction.BACKWARD_DATA:
                _gemm_backward_data(plan, w_mat, y_mat, col_mat)
                if acc is not None:
                    _col2im(plan, acc, col_canon, box, add=plan.accumulate_dx)
            elif plan.wrw_transposed:  # dW^T of the tile, transposed into (G, Kg, R)
                dwt = bufs["dwt"][: w_mat.size].reshape(g, w_mat.shape[2], kg)
                _gemm_backward_weights_t(plan, y_mat, col_mat, dwt)
                if first_tile:
                    np.copyto(w_mat, dwt.swapaxes(1, 2))
                else:
                    np.add(w_mat, dwt.swapaxes(1, 2), out=w_mat)
            elif first_tile:
                _gemm_backward_weights(plan, y_mat, col_mat, w_mat)
            else:
                partial = bufs["dwt"][: w_mat.size].reshape(w_mat.shape)
                _gemm_backward_weights(plan, y_mat, col_mat, partial)
                np.add(w_mat, partial, out=w_mat)
            first_tile = False
        if plan.dx_staged:
            np.copyto(x_img, acc, casting="unsafe")
    if direction is Direction.BACKWARD_WEIGHTS and not plan.w_direct:
        np.copyto(w_view, w_canon, casting="unsafe")


def _gemm_forward(plan: GemmPlan, w: np.ndarray, col: np.ndarray, y: np.ndarray) -> None:
    if plan.channels_last:  # y(G, BP, Kg) = col(G, BP, R) @ w^T(G, R, Kg)
        matmul(col.swapaxes(0, 1), w.swapaxes(1, 2), y.swapaxes(0, 1))
    else:  # y(B, G, Kg, P) = w(G, Kg, R) @ col(B, G, R, P)
        matmul(w, col, y)


def _gemm_backward_data(plan: GemmPlan, w: np.ndarray, dy: np.ndarray, dcol: np.ndarray) -> None:
    if plan.channels_last:  # dcol(G, BP, R) = dy(G, BP, Kg) @ w(G, Kg, R)
        matmul(dy.swapaxes(0, 1), w, dcol.swapaxes(0, 1))
    else:  # dcol(B, G, R, P) = w^T(G, R, Kg) @ dy(B, G, Kg, P)
        matmul(w.swapaxes(1, 2), dy, dcol)


def _gemm_backward_weights(plan: GemmPlan, dy: np.ndarray, col: np.ndarray, dw: np.ndarray) -> None:
    if plan.channels_last:  # dw(G, Kg, R) = dy^T(G, Kg, BP) @ col(G, BP, R)
        matmul(dy.transpose(1, 2, 0), col.swapaxes(0, 1), dw)
    else:  # dw(G, Kg, R) = dy(G, Kg, BP) @ col^T(G, BP, R)
        matmul(dy, col.swapaxes(1, 2), dw)


def _gemm_backward_weights_t(
    plan: GemmPlan, dy: np.ndarray, col: np.ndarray, dwt: np.ndarray
) -> None:
    """dW^T (G, R, Kg), C-contiguous: with a long (b, pixel) reduction OpenBLAS runs this 2 to
    10 times faster than dW = dy @ col^T (interleaved measurements, ResNet-50 shapes)."""
    if plan.channels_last:  # dwt(G, R, Kg) = col^T(G, R, BP) @ dy(G, BP, Kg)
        matmul(col.transpose(1, 2, 0), dy.swapaxes(0, 1), dwt)
    else:  # dwt(G, R, Kg) = col(G, R, BP) @ dy^T(G, BP, Kg)
        matmul(col, dy.swapaxes(1, 2), dwt)


class PlanInvoker:
    """Runs one plan: ``invoker(handle, params)``."""

    def __init__(self, plan: GemmPlan) -> None:
        self.plan = plan

    def __call__(self, handle: object, params: InvokeParams) -> None:
        problem = params.problem
        arrays = {name: getattr(params, name) for name in ("x", "w", "y")}
        conformed = {name: conform(getattr(problem, name), array) for name, array in arrays.items()}
        run_plan(self.plan, evolve(params, **conformed))
        out = problem.direction.output_tensor
        if conformed[out] is not arrays[out]:
            np.copyto(arrays[out], conformed[out])


def conform(desc: TensorDescriptor, array: Any) -> Any:
    """``array``, or a copy laid out as ``desc`` says when its strides do not follow it.

    Callers through a handle always pass arrays with the descriptor's strides (the handle
    checks them); direct callers may not (``miocore.testing.run_solver`` copies inputs in C
    order), and the plan's in-place views assume the descriptor's strides.
    """
    if not isinstance(array, np.ndarray) or array.shape != desc.lengths:
        raise InvalidArgumentError(
            f"expected a numpy array of shape {desc.lengths}",
            field="array",
            value=getattr(array, "shape", type(array).__name__),
        )
    item = array.itemsize
    if all(
        n == 1 or (s % item == 0 and s // item == want)
        for n, s, want in zip(array.shape, array.strides, desc.strides, strict=True)
    ):
        return array
    flat = np.empty(desc.element_space, dtype=array.dtype)
    laid_out = np.lib.stride_tricks.as_strided(
        flat, shape=desc.lengths, strides=tuple(s * item for s in desc.strides)
    )
    np.copyto(laid_out, array)
    return laid_out


__all__ = ["F32", "PlanInvoker", "conform", "fold", "run_plan"]
