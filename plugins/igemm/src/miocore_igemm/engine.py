"""Implicit-GEMM convolution on the CPU: the two strategies that run a plan (``plans.py``).

Two ways to turn a convolution into GEMMs without materialising the whole im2col matrix:

``tap``
    One GEMM per filter tap, accumulated in place (BLAS ``beta=1``). The input is copied once
    into a zero-padded *grid*; with unit strides, output pixel ``o`` of tap ``t`` reads grid
    pixel ``o + offset(t)``, so every tap's operand is a contiguous window of the grid (no
    gather at all). Output is computed on the whole grid and the valid part is kept; the waste
    is ``grid / output`` pixels (1.07 for 3x3 pad 1 at 56x56). Unit strides only.
``block``
    im2col of a bounded block of output pixels (whole images or rows of one image) into a
    column buffer, one GEMM with the taps folded into the reduction. Any stride and dilation.

Both run natively on NCHW (GEMM ``(K/g, C/g) x (C/g, pixels)``) and NHWC (``(pixels, C/g) x
(C/g, K/g)``) memory: arrays are handled in memory order, never converted as whole tensors.
Every scratch array is a view of the caller's workspace; a :class:`Plan` lists them, so the
workspace size is exactly what the invoker carves out.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from miocore import Direction, WorkspaceError
from miocore.backends.cpu_gemm import gemm, matmul
from miocore_igemm.plans import (
    TAP,
    Geometry,
    Plan,
    block_aliases,
    pixel_blocks,
    round_up,
    tap_aliases,
)

_F32 = np.dtype(np.float32)

# ---------------------------------------------------------------------------------------------
# Small helpers.


def _carve(workspace: Any, plan: Plan) -> dict[str, np.ndarray]:
    """Float32 views of the caller's workspace, one per plan buffer."""
    need = plan.workspace_size
    if need == 0:
        return {}
    if not isinstance(workspace, np.ndarray) or not workspace.flags.c_contiguous:
        raise WorkspaceError(
            f"the solution needs a C-contiguous numpy workspace of {need} bytes",
            field="workspace",
            value=type(workspace).__name__,
        )
    raw = workspace.reshape(-1).view(np.uint8)
    if raw.nbytes < need:
        raise WorkspaceError(
            f"the solution needs {need} bytes, the workspace has {raw.nbytes}",
            field="workspace.nbytes",
            value=raw.nbytes,
        )
    if raw.ctypes.data % 4:
        raise WorkspaceError(
            "the workspace must be 4-byte aligned for float32 staging",
            field="workspace",
            value=hex(raw.ctypes.data),
        )
    out = {}
    pos = 0
    for name, shape in plan.buffers:
        nbytes = 4 * math.prod(shape)
        out[name] = raw[pos : pos + nbytes].view(_F32).reshape(shape)
        pos += round_up(nbytes)
    return out


def _view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Reshape that must not copy (a copy would be scratch outside the workspace)."""
    return np.reshape(a, shape, copy=False)


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    # float32 <-> float16/bfloat16 conversions are the point of staging, so cast freely.
    np.copyto(dst, src, casting="unsafe")


def _mem(a: np.ndarray, channels_last: bool) -> np.ndarray:
    """A logical-order (N, C, *S) array viewed in memory order ((N, *S, C) for NHWC)."""
    return np.moveaxis(a, 1, -1) if channels_last else a


def _windows(mem: np.ndarray, geo: Geometry, writeable: bool) -> np.ndarray:
    """Zero-copy im2col view of a (padded) input in memory order.

    NHWC: ``(N, *O, *F, G, Cg)``; NCHW: ``(N, G, Cg, *F, *O)``. Element ``(o, t)`` is input
    pixel ``o * stride + t * dilation``. Each tap's slice is free of self-overlap, so the
    backward-data scatter may add into it tap by tap.
    """
    g, cg = geo.g, geo.cg
    if geo.channels_last:
        sn, sp, sc = mem.strides[0], mem.strides[1:-1], mem.strides[-1]
        shape = (geo.n, *geo.out_sp, *geo.filt, g, cg)
        strides = (
            sn,
            *(s * st for s, st in zip(geo.strides, sp, strict=True)),
            *(d * st for d, st in zip(geo.dils, sp, strict=True)),
            cg * sc,
            sc,
        )
    else:
        sn, sc, sp = mem.strides[0], mem.strides[1], mem.strides[2:]
        shape = (geo.n, g, cg, *geo.filt, *geo.out_sp)
        strides = (
            sn,
            cg * sc,
            sc,
            *(d * st for d, st in zip(geo.dils, sp, strict=True)),
            *(s * st for s, st in zip(geo.strides, sp, strict=True)),
        )
    return as_strided(mem, shape=shape, strides=strides, writeable=writeable)


def _interior(padded: np.ndarray, geo: Geometry, lead: int) -> np.ndarray:
    """The unpadded part of a padded array whose spatial axes start at axis ``lead``."""
    idx: list[Any] = [slice(None)] * padded.ndim
    for i, (q, s) in enumerate(zip(geo.pads, geo.in_sp, strict=True)):
        idx[lead + i] = slice(q, q + s)
    return padded[tuple(idx)]


def _load_padded(dst: np.ndarray, x_mem: np.ndarray, geo: Geometry) -> None:
    """Zero-padded float32 copy of the whole input (memory order) for the block strategy."""
    dst.fill(0.0)
    _copy(_interior(dst, geo, 1 if geo.channels_last else 2), x_mem)


# ---------------------------------------------------------------------------------------------
# Tap strategy.


def _grid_region(geo: Geometry, images: int, sizes: tuple[int, ...], lead: tuple[int, ...]):
    """Index into a grid reshaped as (..., images, *padded, ...) selecting a region."""
    return tuple(slice(q, q + s) for q, s in zip(lead, sizes, strict=True))


def _grid_nhwc(grid: np.ndarray, geo: Geometry, images: int, chans: int) -> np.ndarray:
    # (G, nb*P [+slack], ch) -> (G, nb, *padded, ch)
    nbp = images * geo.grid
    return _view(grid[:, :nbp], (geo.g, images, *geo.padded, chans))


def _grid_nchw(grid: np.ndarray, geo: Geometry, images: int, chans: int) -> np.ndarray:
    # (G, ch, nb*P) or flat (G*ch*nb*P [+slack]) -> (G*ch, nb, *padded)
    nbp = images * geo.grid
    return _view(grid.reshape(-1)[: geo.g * chans * nbp], (geo.g * chans, images, *geo.padded))


def _to_grid(
    grid: np.ndarray,
    src_mem: np.ndarray,
    geo: Geometry,
    images: int,
    chans: int,
    sizes: tuple[int, ...],
    lead: tuple[int, ...],
    zero: bool,
) -> None:
    """Copy ``images`` images (memory order) into a grid at offset ``lead``; zero the rest."""
    if zero:
        grid.fill(0.0)
    region = _grid_region(geo, images, sizes, lead)
    if geo.channels_last:
        dst = _grid_nhwc(grid, geo, images, chans)[(slice(None), slice(None), *region)]
        src = np.moveaxis(_view(src_mem, (*src_mem.shape[:-1], geo.g, chans)), -2, 0)
    else:
        dst = _grid_nchw(grid, geo, images, chans)[(slice(None), slice(None), *region)]
        src = np.swapaxes(src_mem, 0, 1)
    _copy(dst, src)


def _from_grid(
    dst_mem: np.ndarray,
    grid: np.ndarray,
    geo: Geometry,
    images: int,
    chans: int,
    sizes: tuple[int, ...],
    lead: tuple[int, ...],
) -> None:
    """Copy a region of a grid back out to ``images`` images in memory order (cast)."""
    region = _grid_region(geo, images, sizes, lead)
    if geo.channels_last:
        src = _grid_nhwc(grid, geo, images, chans)[(slice(None), slice(None), *region)]
        dst = np.moveaxis(_view(dst_mem, (*dst_mem.shape[:-1], geo.g, chans)), -2, 0)
    else:
        src = _grid_nchw(grid, geo, images, chans)[(slice(None), slice(None), *region)]
        dst = np.swapaxes(dst_mem, 0, 1)
    _copy(dst, src)


def _tap_weights(buf: np.ndarray | None, w: np.ndarray, geo: Geometry) -> np.ndarray:
    """Weights as ``(G, T, Kg, Cg)`` float32: staged, or w itself for packed float32 1x1."""
    g, kg, cg, t = geo.g, geo.kg, geo.cg, geo.taps
    if buf is None:  # 1x1 float32 packed: (K, Cg) in either layout
        return _view(np.moveaxis(w, 1, -1) if geo.channels_last else w, (g, t, kg, cg))
    lw = w.reshape(g, kg, cg, *geo.filt)  # splits axis 0 only: always a view
    dst = _view(buf, (g, *geo.filt, kg, cg))
    _copy(dst, np.moveaxis(np.moveaxis(lw, 1, -1), 1, -1))
    return buf


def _untap_weights(w: np.ndarray, dw: np.ndarray, geo: Geometry) -> None:
    """Write staged ``(G, T, Kg, Cg)`` weight gradients to w (logical order, cast)."""
    lw = w.reshape(geo.g, geo.kg, geo.cg, *geo.filt)
    src = _view(dw, (geo.g, *geo.filt, geo.kg, geo.cg))
    _copy(np.moveaxis(np.moveaxis(lw, 1, -1), 1, -1), src)


def _in_window(grid: np.ndarray, geo: Geometry, g: int, off: int, nbp: int) -> np.ndarray:
    """The input-grid operand of tap offset ``off`` for group ``g`` (contiguous)."""
    if geo.channels_last:
        return grid[g, off : off + nbp]
    cg = geo.cg
    flat = grid.reshape(-1)
    start = g * cg * nbp + off
    return _view(flat[start : start + cg * nbp], (cg, nbp))


def run_tap(plan: Plan, geo: Geometry, x: np.ndarray, w: np.ndarray, y: np.ndarray, ws: Any):
    """Run the tap strategy: one accumulated GEMM per (group, tap), chunks of images."""
    bufs = _carve(ws, plan)
    nb = plan.block
    alias = tap_aliases(geo, nb)
    cl = geo.channels_last
    xm, ym = _mem(x, cl), _mem(y, cl)
    g, cg, kg = geo.g, geo.cg, geo.kg
    offs = geo.offsets
    zero_lead = (0,) * len(geo.out_sp)
    wt = (
        _tap_weights(bufs.get("w"), w, geo)
        if geo.direction is not Direction.BACKWARD_WEIGHTS
        else None
    )
    d = geo.direction
    if d is Direction.BACKWARD_WEIGHTS:
        dw = bufs["w"] if "w" in bufs else _tap_weights(None, w, geo)
    for chunk, n0 in enumerate(range(0, geo.n, nb)):
        n1 = min(n0 + nb, geo.n)
        images = n1 - n0
        nbp = images * geo.grid
        # The input grid (forward / weights) or output-gradient grid, staged or aliased.
        if d is not Direction.BACKWARD_DATA:
            if alias["x"]:
                xs = _view(xm[n0:n1], (1, nbp, geo.c)) if cl else xm[n0]
            else:
                xs = bufs["x"]
                _to_grid(xs, xm[n0:n1], geo, images, cg, geo.in_sp, geo.pads, zero=not geo.unpadded)
                if not geo.unpadded or geo.max_offset:
                    # slack past the last image: read only by rows that are discarded (forward)
                    # or multiplied by zero gradients (weights), which must not meet NaN
                    (xs[:, nbp:] if cl else xs.reshape(-1)[g * cg * nbp :]).fill(0.0)
        if d is not Direction.FORWARD:
            if alias["y"]:
                dyg = _view(ym[n0:n1], (1, nbp, geo.k)) if cl else _view(ym[n0], (g, kg, nbp))
            else:
                dyg = (
                    bufs["y"] if cl else _view(bufs["y"].reshape(-1)[: g * kg * nbp], (g, kg, nbp))
                )
                # rows off the output must be zero: they meet real input pixels in the GEMMs
                zero = geo.out_pix != geo.grid
                _to_grid(dyg, ym[n0:n1], geo, images, kg, geo.out_sp, zero_lead, zero=zero)
        if d is Direction.FORWARD:
            if alias["y"]:
                acc = _view(ym[n0:n1], (1, nbp, geo.k)) if cl else _view(ym[n0], (g, kg, nbp))
            elif cl:
                acc = bufs["y"]
            else:
                acc = _view(bufs["y"].reshape(-1)[: g * kg * nbp], (g, kg, nbp))
            for gi in range(g):
                for t, off in enumerate(offs):
                    win = _in_window(xs, geo, gi, off, nbp)
                    if cl:
                        gemm(win, wt[gi, t].T, acc[gi, :nbp], 0.0 if t == 0 else 1.0)
                    else:
                        gemm(wt[gi, t], win, acc[gi], 0.0 if t == 0 else 1.0)
            if not alias["y"]:
                _from_grid(ym[n0:n1], acc, geo, images, kg, geo.out_sp, zero_lead)
        elif d is Direction.BACKWARD_DATA:
            dxg = (_view(xm[n0:n1], (1, nbp, geo.c)) if cl else xm[n0]) if alias["x"] else bufs["x"]
            for gi in range(g):
                for t, off in enumerate(offs):
                    # tap 0 has offset 0 and covers the whole grid: it initialises it
                    win = _in_window(dxg, geo, gi, off, nbp)
                    if cl:
                        gemm(dyg[gi, :nbp], wt[gi, t], win, 0.0 if t == 0 else 1.0)
                    else:
                        gemm(wt[gi, t].T, dyg[gi], win, 0.0 if t == 0 else 1.0)
            if not alias["x"]:
                _from_grid(xm[n0:n1], dxg, geo, images, cg, geo.in_sp, geo.pads)
        else:
            beta = 0.0 if chunk == 0 else 1.0
            for gi in range(g):
                for t, off in enumerate(offs):
                    win = _in_window(xs, geo, gi, off, nbp)
                    if cl:
                        gemm(dyg[gi, :nbp].T, win, dw[gi, t], beta)
                    else:
                        gemm(dyg[gi], win.T, dw[gi, t], beta)
    if d is Direction.BACKWARD_WEIGHTS and "w" in bufs:
        _untap_weights(w, dw, geo)


# ---------------------------------------------------------------------------------------------
# Block strategy.


def _block_weights(buf: np.ndarray | None, w: np.ndarray, geo: Geometry) -> np.ndarray:
    """Weights as ``(G, Kg, T*Cg)`` ((t, c) order, NHWC) or ``(G, Kg, Cg*T)`` (NCHW)."""
    g, kg = geo.g, geo.kg
    wm = _mem(w, geo.channels_last)  # (K, *F, Cg) or (K, Cg, *F)
    if buf is None:
        return _view(wm, (g, kg, -1))
    _copy(_view(buf, (g, kg, *wm.shape[1:])), wm.reshape(g, kg, *wm.shape[1:]))
    return buf


def _gather(col: np.ndarray, view: np.ndarray, geo: Geometry, blk: tuple[int, int, int, int]):
    """im2col of one block into ``col`` (flat); returns the GEMM matrix per group."""
    n0, n1, r0, r1 = blk
    nb, r = n1 - n0, r1 - r0
    tail = geo.out_sp[1:]
    b = nb * r * math.prod(tail)
    t, g, cg = geo.taps, geo.g, geo.cg
    size = g * b * t * cg
    if geo.channels_last:
        src = np.moveaxis(view[n0:n1, r0:r1], -2, 0)  # (G, nb, R, *O1, *F, Cg)
        _copy(_view(col[:size], src.shape), src)
        return _view(col[:size], (g, b, t * cg))
    part = view[n0:n1][(slice(None),) * (3 + len(geo.filt)) + (slice(r0, r1),)]
    src = np.moveaxis(part, 0, 2 + len(geo.filt))  # (G, Cg, *F, nb, R, *O1)
    _copy(_view(col[:size], src.shape), src)
    return _view(col[:size], (g, cg * t, b))


def _out_block(ym: np.ndarray, geo: Geometry, blk: tuple[int, int, int, int]) -> np.ndarray:
    """The y (or dy) block in GEMM order: (G, nb, R, *O1, Kg) or (G, Kg, nb, R, *O1)."""
    n0, n1, r0, r1 = blk
    g, kg = geo.g, geo.kg
    if geo.channels_last:
        part = ym[n0:n1, r0:r1]
        return np.moveaxis(_view(part, (*part.shape[:-1], g, kg)), -2, 0)
    part = ym[n0:n1, :, r0:r1]
    split = _view(part, (part.shape[0], g, kg, *part.shape[2:]))
    return np.moveaxis(split, 0, 2)


def _block_matrix(block: np.ndarray, geo: Geometry) -> np.ndarray:
    """A y block in GEMM order as a (G, B, Kg) or (G, Kg, B) matrix view (must not copy)."""
    g, kg = geo.g, geo.kg
    if geo.channels_last:
        return _view(block, (g, -1, kg))
    return _view(block, (g, kg, -1))


def run_block(plan: Plan, geo: Geometry, x: np.ndarray, w: np.ndarray, y: np.ndarray, ws: Any):
    """Run the block strategy: im2col of bounded output blocks, one GEMM per block."""
    bufs = _carve(ws, plan)
    blocks, _ = pixel_blocks(geo, plan.block)
    alias = block_aliases(geo, plan.block)
    cl = geo.channels_last
    xm, ym = _mem(x, cl), _mem(y, cl)
    g, kg = geo.g, geo.kg
    d = geo.direction
    if d is Direction.BACKWARD_WEIGHTS:
        wmat = bufs["dw"] if "dw" in bufs else _block_weights(None, w, geo)
    else:
        wmat = _block_weights(bufs.get("w"), w, geo)
    if d is not Direction.BACKWARD_DATA:
        src = xm
        if "xp" in bufs:
            src = bufs["xp"]
            _load_padded(src, xm, geo)
        view = _windows(src, geo, writeable=False)
    else:
        dxp = bufs.get("xp", xm)
        dxp.fill(0.0)
        view = _windows(dxp, geo, writeable=True)
    for i, blk in enumerate(blocks):
        yblk = _out_block(ym, geo, blk)
        b = math.prod(yblk.shape[1:-1]) if cl else math.prod(yblk.shape[2:])
        if d is Direction.FORWARD:
            col = _gather(bufs["col"], view, geo, blk)
            if alias["y"]:
                yb = _block_matrix(yblk, geo)
                matmul(col, wmat.mT, yb) if cl else matmul(wmat, col, yb)
                continue
            shape = (g, b, kg) if cl else (g, kg, b)
            out = _view(bufs["out"][: g * b * kg], shape)
            if cl:
                matmul(col, wmat.mT, out)
            else:
                matmul(wmat, col, out)
            _copy(yblk, _view(out, yblk.shape))
            continue
        # the output gradient of this block as a float32 matrix
        if alias["y"]:
            dyb = _block_matrix(yblk, geo)
        else:
            dyb = _view(bufs["dy"][: g * b * kg], yblk.shape)
            _copy(dyb, yblk)
            dyb = _block_matrix(dyb, geo)
        if d is Direction.BACKWARD_DATA:
            _scatter(bufs["col"], dyb, wmat, view, geo, blk, b)
            continue
        col = _gather(bufs["col"], view, geo, blk)
        beta = 0.0 if i == 0 else 1.0
        if g == 1:
            if cl:
                gemm(dyb[0].T, col[0], wmat[0], beta)
            else:
                gemm(dyb[0], col[0].T, wmat[0], beta)
        elif i == 0:
            matmul(dyb.mT, col, wmat) if cl else matmul(dyb, col.mT, wmat)
        else:
            tmp = bufs["tmp"]
            matmul(dyb.mT, col, tmp) if cl else matmul(dyb, col.mT, tmp)
            np.add(wmat, tmp, out=wmat)
    if d is Direction.BACKWARD_DATA and "xp" in bufs:
        _copy(xm, _interior(bufs["xp"], geo, 1 if cl else 2))
    if d is Direction.BACKWARD_WEIGHTS and "dw" in bufs:
        wm = _mem(w, cl)
        _copy(wm, _view(wmat, (geo.k, *wm.shape[1:])))


def _scatter(colbuf, dyb, wmat, view, geo: Geometry, blk, b: int) -> None:
    """Backward data of one block: column gradients by GEMM, then col2im tap by tap."""
    n0, n1, r0, r1 = blk
    nb, r = n1 - n0, r1 - r0
    g, cg, t = geo.g, geo.cg, geo.taps
    size = g * b * t * cg
    tail = geo.out_sp[1:]
    if geo.channels_last:
        cgrad = _view(colbuf[:size], (g, b, t * cg))
        matmul(dyb, wmat, cgrad)
        parts = _view(cgrad, (g, nb, r, *tail, *geo.filt, cg))
        target = view[n0:n1, r0:r1]  # (nb, R, *O1, *F, G, Cg)
        for tap in itertools.product(*(range(f) for f in geo.filt)):
            pre = (slice(None),) * (2 + len(tail))
            dst = np.moveaxis(target[(*pre, *tap)], -2, 0)  # (G, nb, R, *O1, Cg)
            src = parts[(slice(None), *pre, *tap)]
            np.add(dst, src, out=dst)
        return
    cgrad = _view(colbuf[:size], (g, cg * t, b))
    matmul(wmat.mT, dyb, cgrad)
    parts = _view(cgrad, (g, cg, *geo.filt, nb, r, *tail))
    for tap in itertools.product(*(range(f) for f in geo.filt)):
        sel = view[n0:n1][(slice(None), slice(None), slice(None), *tap, slice(r0, r1))]
        dst = np.moveaxis(sel, 0, 2)  # (G, Cg, nb, R, *O1)
        src = parts[(slice(None), slice(None), *tap)]
        np.add(dst, src, out=dst)


def run(plan: Plan, geo: Geometry, x: Any, w: Any, y: Any, workspace: Any) -> None:
    """Run ``plan`` on the caller's arrays (logical order); writes the direction's output."""
    if plan.strategy == TAP:
        run_tap(plan, geo, x, w, y, workspace)
    else:
        run_block(plan, geo, x, w, y, workspace)
