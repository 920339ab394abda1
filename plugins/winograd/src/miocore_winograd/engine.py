"""The Winograd engine: plans (shapes, sub-problems, workspace layout) and their execution.

Every problem is reduced to stride-1 correlations with filters of at most ``R_MAX`` taps per
axis, computed as ``F(m x m, r x r)`` Winograd runs on a zero-padded NHWC float32 copy of the
input:

* **Filter splitting** (RxS): a filter axis longer than ``R_MAX`` is cut into pieces of
  ``R_MAX`` taps, the last zero-padded; piece ``c`` reads the input shifted by ``R_MAX * c``.
* **Stride phases**: with stride ``s``, tap ``k = s*q + ph`` reads ``x[s*(o + q) + ph]``, so a
  strided convolution is the sum over phases ``ph`` of stride-1 correlations of the phase
  sub-image ``x[ph::s]`` with the phase sub-filter ``w[ph::s]``.

Pieces and phases of the contraction side become extra *virtual channels*: the GEMM stage runs
once over ``C * pieces * phases`` channels, so they cost no extra passes. Backward data is a
full correlation of ``dy`` with the flipped, channel-transposed filter, one run per output phase
of ``dx`` (stride phases of the output are disjoint). Backward weights uses ``F(r, m)`` with
``dy`` tiles in the role of the filter: both ``x`` and ``dy`` tiles are transformed, products
are summed over batch and tiles by a GEMM, and ``A^T`` of ``F(r, m)`` maps the sum back to the
``r x r`` filter taps.

Each run processes tiles in chunks (perf config ``block``) so that the transform buffers stay
in cache: per chunk one strided gather per virtual channel, one GEMM for the input transform
(Kronecker form), one batched GEMM ``(alpha^2 * G, P, C) x (alpha^2 * G, C, K)`` and one GEMM for
the output transform, then a scatter into the caller's tensor.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from miocore import Direction, WorkspaceError
from miocore.backends.cpu_gemm import matmul
from miocore_winograd.plans import (
    TRANSFORM_COLUMNS,
    AxisRun,
    Chunk,
    Run,
    Term,
    chunks,
    fused_block,
)
from miocore_winograd.plans import Plan as Plan
from miocore_winograd.plans import forward_axis as forward_axis
from miocore_winograd.plans import make_plan as make_plan
from miocore_winograd.transforms import axis_transforms, kron_transforms

# -- execution ------------------------------------------------------------------------------


def _split(a: np.ndarray, axis: int, parts: tuple[int, int]) -> np.ndarray:
    """View axis ``axis`` of ``a`` as two axes ``parts`` (always possible without a copy)."""
    shape = list(a.shape)
    strides = list(a.strides)
    outer, inner = parts
    shape[axis : axis + 1] = [outer, inner]
    strides[axis : axis + 1] = [strides[axis] * inner, strides[axis]]
    return as_strided(a, shape=shape, strides=strides)


def _fill_padded(dst: np.ndarray, src: np.ndarray, top: int, left: int) -> None:
    """Copy ``src`` (N, H, W, G, C) into ``dst`` at ``(top, left)``, clipped; zero the margins."""
    rows = max(0, min(src.shape[1], dst.shape[1] - top))
    cols = max(0, min(src.shape[2], dst.shape[2] - left))
    dst[:, :top] = 0
    dst[:, top + rows :] = 0
    dst[:, top : top + rows, :left] = 0
    dst[:, top : top + rows, left + cols :] = 0
    np.copyto(dst[:, top : top + rows, left : left + cols], src[:, :rows, :cols], casting="unsafe")


def _gather(
    dst: np.ndarray, src: np.ndarray, run: Run, chunk: Chunk, tiles_x: int, size: tuple[int, int]
) -> None:
    """Copy the tiles of every virtual channel of ``chunk`` into ``dst``.

    ``dst`` is ``(size_y, size_x, G, nb, tyb, Tx, V, C)``; a tile of virtual channel ``(ty, tx)``
    starts at source row ``offset + step * m * tile`` and samples every ``step`` rows.
    """
    sn, sh, sw, sg, sc = src.strides
    y, x = run.y, run.x
    _, _, g, nb, tyb, _, _, c = dst.shape
    v = 0
    for ty in y.terms:
        for tx in x.terms:
            base = src[chunk.n0 :, ty.offset + y.step * y.m * chunk.ty0 :, tx.offset :]
            view = as_strided(
                base,
                shape=(size[0], size[1], g, nb, tyb, tiles_x, c),
                strides=(
                    y.step * sh,
                    x.step * sw,
                    sg,
                    sn,
                    y.step * y.m * sh,
                    x.step * x.m * sw,
                    sc,
                ),
            )
            np.copyto(dst[:, :, :, :, :, :, v, :], view)
            v += 1


def _scatter(out: np.ndarray, tiles: np.ndarray, run: Run, chunk: Chunk) -> None:
    """Write output tiles ``(my, mx, G, nb, tyb, Tx, K)`` into ``out`` ``(N, Ho, Wo, G, K)``
    (the run's own output grid, already offset and strided), cropping partial tiles."""
    my, mx = run.y.m, run.x.m
    nsl = slice(chunk.n0, chunk.n0 + chunk.nb)
    for i in range(my):
        first = my * chunk.ty0 + i
        cy = max(0, min(chunk.tyb, -(-(run.y.count - first) // my)))
        if not cy:
            continue
        for j in range(mx):
            cx = max(0, -(-(run.x.count - j) // mx))
            if not cx:
                continue
            target = out[
                nsl, first : first + my * (cy - 1) + 1 : my, j : j + mx * (cx - 1) + 1 : mx
            ]
            np.copyto(
                target, tiles[i, j, :, :, :cy, :cx].transpose(1, 2, 3, 0, 4), casting="unsafe"
            )


def _filter_pieces(dst: np.ndarray, weights: np.ndarray, run: Run) -> None:
    """Fill ``dst`` ``(ry, rx, G, Kout, V, Cin)`` with the filter taps of every virtual channel
    (zero taps where a piece is padded). ``weights`` is ``(G, Kout, Cin, R, S)``; keeping its
    ``(Kout, Cin)`` order avoids a transposing copy (the GEMM reads U transposed instead)."""
    dst[...] = 0
    v = 0
    for ty in run.y.terms:
        for tx in run.x.terms:
            for a, ky in enumerate(ty.taps):
                if ky < 0:
                    continue
                for b, kx in enumerate(tx.taps):
                    if kx >= 0:
                        np.copyto(dst[a, b, :, :, v], weights[:, :, :, ky, kx])
            v += 1


def _output_grid(out5: np.ndarray, run: Run) -> np.ndarray:
    """The part of ``out5`` ``(N, H, W, G, K)`` a run writes (phase positions for backward data)."""
    y, x = run.y, run.x
    ys = slice(y.out_start, y.out_start + y.out_step * (y.count - 1) + 1, y.out_step)
    xs = slice(x.out_start, x.out_start + x.out_step * (x.count - 1) + 1, x.out_step)
    return out5[:, ys, xs]


def _separable(
    left_y: np.ndarray, left_x: np.ndarray, src: np.ndarray, tmp: np.ndarray, out: np.ndarray
) -> None:
    """``out[a, b, :] = sum_ij left_y[a, i] left_x[b, j] src[i, j, :]`` as two GEMMs.

    ``src`` is ``(i, j, rest)``; the x stage is one small GEMM per ``i`` (broadcast matmul) into
    ``tmp`` ``(i, b, rest)``, the y stage one GEMM over ``(b, rest)``. Two passes with a
    contraction of ``alpha`` each cost about a third of the flops of the Kronecker form.
    """
    ni = src.shape[0]
    matmul(left_x, src, tmp)
    matmul(left_y, tmp.reshape(ni, -1), out.reshape(left_y.shape[0], -1))


def _run_correlation(
    plan: Plan, run: Run, src: np.ndarray, weights: np.ndarray, out: np.ndarray, ws: np.ndarray
) -> None:
    """Forward-style run: ``out (N, Ho, Wo, G, Kout) = sum_v corr(src_v, w_v)``."""
    y, x = run.y, run.x
    g, kout, cin = weights.shape[:3]
    _, g_mat, _ = kron_transforms(y.m, y.r, x.m, x.r)
    at_y, _, bt_y = axis_transforms(y.m, y.r)
    at_x, _, bt_x = axis_transforms(x.m, x.r)
    ay, ax = y.alpha, x.alpha
    a2, r2 = ay * ax, y.r * x.r
    v = run.virtual
    vc = v * cin
    lay = plan.layout
    pieces = lay.view(ws, "pieces", (y.r, x.r, g, kout, v, cin))
    _filter_pieces(pieces, weights, run)
    u = lay.view(ws, "u", (a2, g, kout, vc))
    matmul(g_mat, pieces.reshape(r2, -1), u.reshape(a2, -1))
    for chunk in chunks(plan.n, y.tiles, x.tiles, plan.block):
        pc = chunk.nb * chunk.tyb * x.tiles
        rest_c, rest_k = g * pc * vc, g * pc * kout
        d = lay.view(ws, "a", (ay, ax, rest_c))
        _gather(
            d.reshape(ay, ax, g, chunk.nb, chunk.tyb, x.tiles, v, cin),
            src,
            run,
            chunk,
            x.tiles,
            (ay, ax),
        )
        vt = lay.view(ws, "a", (ay, ax, rest_c))  # B^T d B, in place of d after the x stage
        _separable(bt_y, bt_x, d, lay.view(ws, "b", (ay, ax, rest_c)), vt)
        mm = lay.view(ws, "b", (a2, g, pc, kout))
        matmul(vt.reshape(a2, g, pc, vc), u.transpose(0, 1, 3, 2), mm)
        yt = lay.view(ws, "b", (y.m, x.m, rest_k))
        _separable(at_y, at_x, mm.reshape(ay, ax, rest_k), lay.view(ws, "a", (ay, x.m, rest_k)), yt)
        _scatter(out, yt.reshape(y.m, x.m, g, chunk.nb, chunk.tyb, x.tiles, kout), run, chunk)


#: Columns of the filter transform per GEMM: ``(alpha^2 x r^2) @ (r^2 x cols)`` with its output
#: block in L1/L2 (one GEMM over all ``K * C`` columns runs at half the speed).
FILTER_COLUMNS = 1024


def _sub_block(tiles: int, channels: int) -> int:
    """Channels per transform block of a chunk of ``tiles`` tiles."""
    return max(1, min(channels, TRANSFORM_COLUMNS // max(1, tiles)))


def _filter_transform(g_mat: np.ndarray, pieces: np.ndarray, u: np.ndarray) -> None:
    """``u = g_mat @ pieces`` (``(a2, cols) = (a2, r2) @ (r2, cols)``) in column blocks."""
    cols = pieces.shape[1]
    for c0 in range(0, cols, FILTER_COLUMNS):
        c1 = min(cols, c0 + FILTER_COLUMNS)
        matmul(g_mat, pieces[:, c0:c1], u[:, c0:c1])


def _tap_slice(taps: tuple[int, ...]) -> slice | None:
    """The slice selecting ``taps`` (consecutive, ascending or descending), else None."""
    if min(taps) < 0:
        return None
    if all(b - a == 1 for a, b in itertools.pairwise(taps)):
        return slice(taps[0], taps[-1] + 1)
    if all(a - b == 1 for a, b in itertools.pairwise(taps)):
        return slice(taps[0], taps[-1] - 1 if taps[-1] else None, -1)
    return None


def _filter_matrix(weights: np.ndarray, run: Run, buf: np.ndarray) -> np.ndarray:
    """The run's filter taps as a ``(Kout * Cin, ry * rx)`` matrix (taps innermost).

    ``weights`` is ``(Kout, Cin, R, S)``. A contiguous filter read in order (forward) is used in
    place (no copy: the transform GEMM reads it transposed); otherwise the taps are copied into
    ``buf`` ``(Kout, Cin, ry, rx)`` (one copy for a flipped filter, per tap for split pieces).
    """
    kout, cin, ry, rx = buf.shape
    ys, xs = _tap_slice(run.y.terms[0].taps), _tap_slice(run.x.terms[0].taps)
    if ys is not None and xs is not None:
        view = weights[:, :, ys, xs]
        item = view.itemsize
        if view.dtype == np.float32 and view.strides == (
            cin * ry * rx * item,
            ry * rx * item,
            rx * item,
            item,
        ):
            return view.reshape(kout * cin, ry * rx)
        np.copyto(buf, view, casting="unsafe")
    else:
        piece = buf.transpose(2, 3, 0, 1)[:, :, None, :, None, :]  # (ry, rx, 1, Kout, 1, Cin)
        _filter_pieces(piece, weights[None], run)
    return buf.reshape(kout * cin, ry * rx)


def _run_channel_major(
    plan: Plan, run: Run, src: np.ndarray, weights: np.ndarray, out: np.ndarray, ws: np.ndarray
) -> None:
    """NCHW-native stride-1 run (one virtual channel, one group).

    ``src`` is the padded ``(N, C, Hp, Wp)`` float32 source, ``weights`` ``(1, K, C, R, S)``,
    ``out`` the run's ``(N, Ho, Wo, 1, K)`` output grid. Per chunk of ``P`` tiles: one strided
    gather into ``d (alpha^2, C, P)``; the input transform as ONE GEMM with the Kronecker matrix
    ``(B^T (x) B^T) (alpha^2 x alpha^2)``; the batched GEMM ``(alpha^2, K, C) x (alpha^2, C, P)``
    with ``U`` from one blocked GEMM ``(G (x) G) (alpha^2 x r^2) @ w (r^2, K*C)``; the output
    transform as ONE GEMM ``(A^T (x) A^T) (m^2 x alpha^2)``; one strided copy into ``out``
    (per output position of the tile only where tiles are cropped).
    """
    y, x = run.y, run.x
    _, kout, cin = weights.shape[:3]
    _, g_mat, b_mat = kron_transforms(y.m, y.r, x.m, x.r)
    at_y, at_x = axis_transforms(y.m, y.r)[0], axis_transforms(x.m, x.r)[0]
    ay, ax = y.alpha, x.alpha
    a2 = ay * ax
    lay = plan.layout
    flat = _filter_matrix(weights[0], run, lay.view(ws, "pieces", (kout, cin, y.r, x.r))).T
    todo = list(chunks(plan.n, y.tiles, x.tiles, plan.block))
    # One chunk: transform the filter per block of output channels right before its GEMM, so
    # that U's block is still in cache (U is alpha^2/r^2 times the filter: for small images
    # writing and re-reading the whole of it costs more than the GEMM).
    kb = fused_block(kout, cin, todo, x.tiles)
    if kb == kout:
        u = lay.view(ws, "u", (a2, kout, cin))
        _filter_transform(g_mat, flat, u.reshape(a2, -1))
    sn, sc, sh, sw = src.strides
    oy, ox = y.terms[0].offset, x.terms[0].offset
    out4 = out[:, :, :, 0, :]
    for chunk in todo:
        nb, tyb, tx = chunk.nb, chunk.tyb, x.tiles
        pc = nb * tyb * tx
        base = src[chunk.n0 :, :, oy + y.m * chunk.ty0 :, ox:]
        vt = lay.view(ws, "b", (a2, cin, pc))
        cs = _sub_block(pc, cin)
        tiles = as_strided(
            base, shape=(ay, ax, cin, nb, tyb, tx), strides=(sh, sw, sc, sn, y.m * sh, x.m * sw)
        )
        for c0 in range(0, cin, cs):  # gather + input transform per L2-sized channel block
            c1 = min(cin, c0 + cs)
            d = lay.view(ws, "t", (ay, ax, c1 - c0, nb, tyb, tx))
            np.copyto(d, tiles[:, :, c0:c1])
            matmul(b_mat, d.reshape(a2, -1), vt[:, c0:c1].reshape(a2, -1))
        mm = lay.view(ws, "a", (a2, kout, pc))
        if kb == kout:
            matmul(u, vt, mm)
        else:
            for k0 in range(0, kout, kb):
                k1 = min(kout, k0 + kb)
                ub = lay.view(ws, "u", (a2, k1 - k0, cin))
                _filter_transform(g_mat, flat[:, k0 * cin : k1 * cin], ub.reshape(a2, -1))
                matmul(ub, vt, mm[:, k0:k1])
        ks = _sub_block(pc, kout)
        for k0 in range(0, kout, ks):  # output transform + scatter per channel block
            k1 = min(kout, k0 + ks)
            cols = (k1 - k0) * pc
            # x stage transposed, (ay, cols, ax) @ A_x -> (ay, cols, mx), so that the y stage
            # leaves (my, K, n, ty, tx, mx): (tx, mx) is a contiguous output row.
            t1 = lay.view(ws, "t", (ay, cols, x.m))
            matmul(mm[:, k0:k1].reshape(ay, ax, cols).transpose(0, 2, 1), at_x.T, t1)
            yt = lay.view(ws, "t2", (y.m, k1 - k0, nb, tyb, tx * x.m))
            matmul(at_y, t1.reshape(ay, -1), yt.reshape(y.m, -1))
            for i in range(y.m):
                first = y.m * chunk.ty0 + i
                cy = max(0, min(tyb, -(-(y.count - first) // y.m)))
                if cy:
                    target = out4[
                        chunk.n0 : chunk.n0 + nb,
                        first : first + y.m * (cy - 1) + 1 : y.m,
                        :,
                        k0:k1,
                    ]
                    src_i = yt[i, :, :, :cy, : x.count].transpose(1, 2, 3, 0)
                    np.copyto(target, src_i, casting="unsafe")


def _run_weights(
    plan: Plan, run: Run, src: np.ndarray, dy: np.ndarray, dw5: np.ndarray, ws: np.ndarray
) -> None:
    """Backward-weights run with ``F(r, m)``: dy tiles play the filter, x tiles the input."""
    y, x = run.y, run.x
    g, cin, kout = plan.groups, plan.cg, plan.kg
    # F(r, m): r outputs (filter taps) from m-tap "filters" (dy tiles), alpha = m + r - 1.
    a_t, _, _ = kron_transforms(y.r, y.m, x.r, x.m)
    _, g_y, bt_y = axis_transforms(y.r, y.m)
    _, g_x, bt_x = axis_transforms(x.r, x.m)
    ay, ax = y.alpha, x.alpha
    a2, r2 = ay * ax, y.r * x.r
    v = run.virtual
    vc = v * cin
    lay = plan.layout
    macc = lay.view(ws, "macc", (a2, g, vc, kout))
    dy_run = Run(
        AxisRun(y.m, 1, 1, y.count, (Term(0, (0,)),)),
        AxisRun(x.m, 1, 1, x.count, (Term(0, (0,)),)),
    )
    first = True
    for chunk in chunks(plan.n, y.tiles, x.tiles, plan.block):
        pc = chunk.nb * chunk.tyb * x.tiles
        rest_c, rest_k = g * pc * vc, g * pc * kout
        d = lay.view(ws, "a", (ay, ax, rest_c))
        _gather(
            d.reshape(ay, ax, g, chunk.nb, chunk.tyb, x.tiles, v, cin),
            src,
            run,
            chunk,
            x.tiles,
            (ay, ax),
        )
        vx = lay.view(ws, "a", (a2, g, pc, vc))
        _separable(bt_y, bt_x, d, lay.view(ws, "b", (ay, ax, rest_c)), vx)
        dyt = lay.view(ws, "dyt", (y.m, x.m, rest_k))
        _gather(
            dyt.reshape(y.m, x.m, g, chunk.nb, chunk.tyb, x.tiles, 1, kout),
            dy,
            dy_run,
            chunk,
            x.tiles,
            (y.m, x.m),
        )
        vdy = lay.view(ws, "vdy", (a2, g, pc, kout))
        _separable(g_y, g_x, dyt, lay.view(ws, "b", (y.m, ax, rest_k)), vdy)
        if first:
            matmul(vx.transpose(0, 1, 3, 2), vdy, macc)
            first = False
        else:
            tmp = lay.view(ws, "mtmp", (a2, g, vc, kout))
            matmul(vx.transpose(0, 1, 3, 2), vdy, tmp)
            np.add(macc, tmp, out=macc)
    taps = lay.view(ws, "taps", (y.r, x.r, g, v, cin, kout))
    matmul(a_t, macc.reshape(a2, -1), taps.reshape(r2, -1))
    vi = 0
    for ty in y.terms:
        for tx in x.terms:
            for a, ky in enumerate(ty.taps):
                if ky < 0:
                    continue
                for b, kx in enumerate(tx.taps):
                    if kx >= 0:
                        np.copyto(
                            dw5[:, :, :, ky, kx],
                            taps[a, b, :, vi].transpose(0, 2, 1),
                            casting="unsafe",
                        )
            vi += 1


def execute(
    plan: Plan, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace: np.ndarray | None
) -> None:
    """Run ``plan`` on logical-order arrays; writes the direction's output in place."""
    need = plan.layout.total
    if workspace is None or workspace.nbytes < need:
        got = None if workspace is None else workspace.nbytes
        raise WorkspaceError(
            f"the Winograd solution needs {need} bytes of workspace", field="workspace", value=got
        )
    ws = workspace.reshape(-1).view(np.uint8)
    g, cg, kg = plan.groups, plan.cg, plan.kg
    src = plan.layout.view(ws, "src", plan.src_shape)
    w5 = _split(w, 0, (g, kg))  # (G, Kg, Cg, R, S)
    x5 = _split(x.transpose(0, 2, 3, 1), 3, (g, cg))  # (N, H, W, G, Cg)
    y5 = _split(y.transpose(0, 2, 3, 1), 3, (g, kg))  # (N, Ho, Wo, G, Kg)
    fill, correlate = src, _run_correlation
    if plan.channel_major:  # src is (N, C, Hp, Wp); fill it through an (N, Hp, Wp, 1, C) view
        fill, correlate = src.transpose(0, 2, 3, 1)[:, :, :, None, :], _run_channel_major
    if plan.direction is Direction.FORWARD:
        _fill_padded(fill, x5, *plan.src_pad)
        correlate(plan, plan.runs[0], src, w5, y5, ws)
    elif plan.direction is Direction.BACKWARD_DATA:
        _fill_padded(fill, y5, *plan.src_pad)
        wt = w5.transpose(0, 2, 1, 3, 4)  # (G, Cg, Kg, R, S): dx channels are the outputs
        for run in plan.runs:
            grid = _output_grid(x5, run)
            if run.empty:
                grid[...] = 0
            else:
                correlate(plan, run, src, wt, grid, ws)
    else:
        _fill_padded(src, x5, *plan.src_pad)
        dy = plan.layout.view(ws, "dy", plan.dy_shape)
        _fill_padded(dy, y5, 0, 0)
        _run_weights(plan, plan.runs[0], src, dy, w5, ws)
