"""The FFT convolution itself: runs an :class:`~miocore_fft.plan.FftPlan` on numpy arrays.

Conventions (one spatial axis shown; the others are the same, separably):

* forward: ``y[o] = sum_f xz[o + f] wd[f]`` (cross-correlation), ``xz`` = x zero-extended by
  the pad. Per tile: ``IFFT(FFT(window of xz) * conj(FFT(wd)))`` read from index 0.
* backward data: the correlation of dy with the flipped filter, i.e. the convolution
  ``dx[j] = sum_u dy[j + p - u] wd[u]``. Per tile: ``IFFT(FFT(window of dyz) * FFT(wd))``
  read from index ``Fd - 1``, with ``dyz`` = dy zero-extended by ``Fd - 1 - p``.
* backward weights: ``dw[f] = sum_{n,o} xz[o + f*d] dy[o]``. Per tile: the spectra
  ``conj(FFT(dy tile)) * FFT(window of xz)`` summed over images and tiles (a matmul), then one
  inverse transform, read at the dilated taps.

``wd`` is the dilated filter (a sparse filter of ``Fd = d (F - 1) + 1`` taps). A window is
``L`` long and a tile holds ``T = L - Fd + 1`` outputs, so no product wraps around the circular
transform (overlap-save). Conjugation is folded into the copy that puts a spectrum into its
matmul layout, so it costs no extra pass.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from miocore import Direction, InvokeParams, WorkspaceError
from miocore_fft.plan import FftPlan


def scipy_fft() -> Any:
    """``scipy.fft``, imported when an engine is first built (to run a solution), never when
    the solver is only asked about a problem: its import costs a new process about 0.2 s."""
    import scipy.fft

    return scipy.fft


def fft_workers() -> int:
    """Threads for pocketfft: the cores this process may run on (as BLAS uses them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _view(ws: np.ndarray, region: tuple[int, int], dtype: Any, shape: tuple[int, ...]) -> Any:
    offset, size = region
    count = int(np.prod(shape))
    nbytes = count * np.dtype(dtype).itemsize
    assert nbytes <= size, (shape, size)  # the plan and the engine must agree
    return ws[offset : offset + nbytes].view(dtype).reshape(shape)


def _fill_extended(dst: np.ndarray, src: np.ndarray, lo: tuple[int, ...]) -> None:
    """``dst[..., lo + i] = src[..., i]`` over the spatial axes, zero elsewhere (clipped).

    Only the margins are zeroed, so each element of ``dst`` is written once; the assignment
    converts float16/bfloat16 and any layout to the stage's packed float32.
    """
    nd = len(lo)
    inner_dst: list[slice] = []
    inner_src: list[slice] = []
    for axis, (low, size, span) in enumerate(
        zip(lo, src.shape[-nd:], dst.shape[-nd:], strict=True)
    ):
        a = min(max(low, 0), span)
        b = min(max(low + size, 0), span)
        b = max(a, b)
        lead = (slice(None),) * (2 + axis)
        if a > 0:
            dst[(*lead, slice(0, a))] = 0
        if b < span:
            dst[(*lead, slice(b, span))] = 0
        inner_dst.append(slice(a, b))
        inner_src.append(slice(a - low, b - low))
    if all(s.stop > s.start for s in inner_dst):
        dst[(..., *inner_dst)] = src[(..., *inner_src)]


def _put_corner(dst: np.ndarray, src: np.ndarray) -> None:
    """Copy ``src`` into the leading corner of ``dst`` (same rank) and zero the rest."""
    for axis, (size, span) in enumerate(zip(src.shape, dst.shape, strict=True)):
        if size < span:
            dst[(*(slice(None),) * axis, slice(size, span))] = 0
    dst[tuple(slice(0, size) for size in src.shape)] = src


def _windows(stage: np.ndarray, steps: tuple[int, ...], window: tuple[int, ...]) -> np.ndarray:
    """Read-only view ``(N, *tile counts, C, *window)`` of tiles starting every ``steps``."""
    nd = len(steps)
    n, c, *span = stage.shape
    counts = [(s - w) // t + 1 for s, w, t in zip(span, window, steps, strict=True)]
    st = stage.strides
    return np.lib.stride_tricks.as_strided(
        stage,
        shape=(n, *counts, c, *window),
        strides=(st[0], *(st[2 + i] * steps[i] for i in range(nd)), st[1], *st[2:]),
        writeable=False,
    )


def _segments(u0: int, u1: int, per_image: int) -> Iterator[tuple[int, int, int, int]]:
    """Split units ``[u0, u1)`` into ``(row offset, image, first tile, end tile)`` pieces."""
    u = u0
    while u < u1:
        n, t0 = divmod(u, per_image)
        t1 = min(per_image, t0 + (u1 - u))
        yield u - u0, n, t0, t1
        u += t1 - t0


class FftEngine:
    """Runs one plan. Stateless apart from the plan; safe to share between threads."""

    def __init__(self, plan: FftPlan) -> None:
        self.plan = plan
        self.axes = tuple(range(-plan.nd, 0))
        self.workers = fft_workers()
        self.fft = scipy_fft()

    # -- transforms -----------------------------------------------------------------------

    def _forward_tiles(
        self,
        ws: np.ndarray,
        source: np.ndarray,
        window: tuple[int, ...],
        channels: int,
        units_per_chunk: int,
        spec: np.ndarray,
        conj: bool,
        channel_major: bool = False,
    ) -> None:
        """Transform every tile of ``source`` (a windows view) into ``spec``.

        ``spec`` is ``(bins, rows, C)``, or ``(bins, C, rows)`` when ``channel_major`` (the
        layout in which the backward-weights matmul reads dy's spectra row-major).
        """
        plan = self.plan
        per_unit = plan.unit_rows
        counts_rest = plan.counts[1:]
        for u0 in range(0, plan.units, units_per_chunk):
            u1 = min(plan.units, u0 + units_per_chunk)
            rows = (u1 - u0) * per_unit
            buf = _view(ws, plan.regions["rchunk"], np.float32, (rows, channels, *plan.lengths))
            for off, n, t0, t1 in _segments(u0, u1, plan.counts[0]):
                part = buf[off * per_unit : (off + t1 - t0) * per_unit]
                part = part.reshape(t1 - t0, *counts_rest, channels, *plan.lengths)
                tiles = source[n, t0:t1]
                if window == plan.lengths:
                    part[...] = tiles
                else:
                    _put_corner(part, tiles)
            out = self.fft.rfftn(buf, axes=self.axes, workers=self.workers)
            r0 = u0 * per_unit
            if channel_major:
                src = out.reshape(rows, channels, plan.bins).transpose(2, 1, 0)
                dst = spec[:, :, r0 : r0 + rows]
            else:
                src = out.reshape(rows, channels, plan.bins).transpose(2, 0, 1)
                dst = spec[:, r0 : r0 + rows, :]
            if conj:
                np.conjugate(src, out=dst)
            else:
                np.copyto(dst, src)

    def _filter_spectra(
        self, ws: np.ndarray, w: np.ndarray, spec: np.ndarray, forward: bool
    ) -> None:
        """Transform the dilated filters into ``spec``, laid out as the matmul reads them.

        Forward: ``conj(FFT(w))`` as ``(bins, G, C/G, K/G)`` (the correlation's conjugate);
        backward data: ``FFT(w)`` as ``(bins, G, K/G, C/G)``. Every per-bin matrix is then
        C-contiguous, which keeps numpy's matmul on its BLAS path.
        """
        plan = self.plan
        p = plan.problem
        g = p.groups
        cg, kg = p.c // g, p.k // g
        taps = tuple(slice(0, f, d) for f, d in zip(plan.fd, p.conv.dilations, strict=True))
        for k0 in range(0, p.k, plan.filter_chunk):
            k1 = min(p.k, k0 + plan.filter_chunk)
            buf = _view(ws, plan.regions["rchunk"], np.float32, (k1 - k0, cg, *plan.lengths))
            buf[...] = 0  # the dilation holes and the padding up to L
            buf[(..., *taps)] = w[k0:k1]
            out = self.fft.rfftn(buf, axes=self.axes, workers=self.workers)
            src = out.reshape(k1 - k0, cg, plan.bins)
            k = k0
            while k < k1:  # one piece per group the chunk touches
                grp, kk0 = divmod(k, kg)
                kk1 = min(kg, kk0 + (k1 - k))
                piece = src[k - k0 : k - k0 + kk1 - kk0]
                if forward:
                    np.conjugate(piece.transpose(2, 1, 0), out=spec[:, grp, :, kk0:kk1])
                else:
                    np.copyto(spec[:, grp, kk0:kk1, :], piece.transpose(2, 0, 1))
                k += kk1 - kk0

    # -- run ------------------------------------------------------------------------------

    def __call__(self, params: InvokeParams) -> None:
        """Compute the direction's output in place from the other two tensors."""
        plan = self.plan
        ws = params.workspace
        if plan.workspace_bytes and (
            ws is None or not isinstance(ws, np.ndarray) or ws.nbytes < plan.workspace_bytes
        ):
            got = None if ws is None else getattr(ws, "nbytes", type(ws).__name__)
            raise WorkspaceError(
                f"the FFT solution needs {plan.workspace_bytes} bytes of workspace",
                field="workspace",
                value=got,
            )
        ws = ws.reshape(-1).view(np.uint8)
        if plan.direction is Direction.BACKWARD_WEIGHTS:
            self._backward_weights(ws, params)
        else:
            self._data(ws, params)

    def _data(self, ws: np.ndarray, params: InvokeParams) -> None:
        """Forward and backward data: tiled A, filter spectra, matmul, tiled output."""
        plan = self.plan
        p = plan.problem
        g = p.groups
        forward = plan.direction is Direction.FORWARD
        a, out_array = (params.x, params.y) if forward else (params.y, params.x)
        ca, cb = plan.a_channels, plan.out_channels
        regions = plan.regions

        stage = _view(ws, regions["stage"], np.float32, plan.x_stage_shape)
        _fill_extended(stage, a, plan.a_lo)
        a_spec = _view(ws, regions["a_spec"], np.complex64, (plan.bins, plan.rows, ca))
        self._forward_tiles(
            ws,
            _windows(stage, plan.tiles, plan.lengths),
            plan.lengths,
            ca,
            plan.a_chunk_units,
            a_spec,
            conj=False,
        )
        cg = p.c // g
        kg = p.k // g
        w_shape = (plan.bins, g, cg, kg) if forward else (plan.bins, g, kg, cg)
        w_spec = _view(ws, regions["b_spec"], np.complex64, w_shape)
        # forward correlates (conjugate filter spectrum); backward data convolves
        self._filter_spectra(ws, params.w, w_spec, forward)

        out_spec = _view(ws, regions["out_spec"], np.complex64, (plan.bins, plan.rows, cb))
        if p.is_depthwise:  # one channel per group: no reduction, a broadcast product
            np.multiply(a_spec, w_spec.reshape(plan.bins, 1, g), out=out_spec)
        else:
            # per group and bin: (rows, Cin/g) @ (Cin/g, Cout/g), rows = images x tiles
            a4 = a_spec.reshape(plan.bins, plan.rows, g, ca // g).transpose(2, 0, 1, 3)
            w4 = w_spec.transpose(1, 0, 2, 3)
            o4 = out_spec.reshape(plan.bins, plan.rows, g, cb // g).transpose(2, 0, 1, 3)
            np.matmul(a4, w4, out=o4)

        # back to space, a chunk of tiles at a time, into the output stage (aliases the input
        # stage, which is dead now)
        tstage = _view(ws, regions["stage"], np.float32, plan.tile_stage_shape)
        read = tuple(
            slice(0, t) if forward else slice(f - 1, f - 1 + t)
            for t, f in zip(plan.tiles, plan.fd, strict=True)
        )
        tiles_out = _tile_view(tstage, plan.tiles)
        per_unit = plan.unit_rows
        spec_shape = plan.spectrum_shape
        for u0 in range(0, plan.units, plan.out_chunk_units):
            u1 = min(plan.units, u0 + plan.out_chunk_units)
            rows = (u1 - u0) * per_unit
            cbuf = _view(ws, regions["cchunk"], np.complex64, (rows, cb, plan.bins))
            np.copyto(cbuf, out_spec[:, u0 * per_unit : u0 * per_unit + rows, :].transpose(1, 2, 0))
            real = self.fft.irfftn(
                cbuf.reshape(rows, cb, *spec_shape),
                s=plan.lengths,
                axes=self.axes,
                workers=self.workers,
            )
            real = real[(..., *read)]
            for off, n, t0, t1 in _segments(u0, u1, plan.counts[0]):
                piece = real[off * per_unit : (off + t1 - t0) * per_unit]
                tiles_out[n, t0:t1] = piece.reshape(t1 - t0, *plan.counts[1:], cb, *plan.tiles)
        crop = tuple(slice(0, e) for e in plan.extent)
        out_array[...] = tstage[(..., *crop)]
        _zero_dead(out_array, plan.dead)

    def _backward_weights(self, ws: np.ndarray, params: InvokeParams) -> None:
        """dW spectra = sum over images and tiles of conj(DY) X, then one inverse per filter."""
        plan = self.plan
        p = plan.problem
        g = p.groups
        cg, kg = p.c // g, p.k // g
        regions = plan.regions

        # dy first: its stage is dead once its spectra exist, and x's stage reuses the region
        dstage = _view(ws, regions["stage"], np.float32, plan.tile_stage_shape)
        _fill_extended(dstage, params.y, (0,) * plan.nd)
        dy_spec = _view(ws, regions["a_spec"], np.complex64, (plan.bins, p.k, plan.rows))
        self._forward_tiles(
            ws,
            _windows(dstage, plan.tiles, plan.tiles),
            plan.tiles,
            p.k,
            plan.a_chunk_units,
            dy_spec,
            conj=True,
            channel_major=True,
        )
        xstage = _view(ws, regions["stage"], np.float32, plan.x_stage_shape)
        _fill_extended(xstage, params.x, p.conv.pads)
        x_spec = _view(ws, regions["b_spec"], np.complex64, (plan.bins, plan.rows, p.c))
        self._forward_tiles(
            ws,
            _windows(xstage, plan.tiles, plan.lengths),
            plan.lengths,
            p.c,
            plan.x_chunk_units,
            x_spec,
            conj=False,
        )

        dw_spec = _view(ws, regions["out_spec"], np.complex64, (plan.bins, p.k, cg))
        if p.is_depthwise:
            np.einsum("bgr,brg->bg", dy_spec, x_spec, out=dw_spec[:, :, 0])
        else:
            # per group and bin: (K/g, rows) @ (rows, C/g)
            d4 = dy_spec.reshape(plan.bins, g, kg, plan.rows).transpose(1, 0, 2, 3)
            x4 = x_spec.reshape(plan.bins, plan.rows, g, cg).transpose(2, 0, 1, 3)
            o4 = dw_spec.reshape(plan.bins, g, kg, cg).transpose(1, 0, 2, 3)
            np.matmul(d4, x4, out=o4)

        taps = tuple(slice(0, f, d) for f, d in zip(plan.fd, p.conv.dilations, strict=True))
        for k0 in range(0, p.k, plan.filter_chunk):
            k1 = min(p.k, k0 + plan.filter_chunk)
            cbuf = _view(ws, regions["cchunk"], np.complex64, (k1 - k0, cg, plan.bins))
            np.copyto(cbuf, dw_spec[:, k0:k1, :].transpose(1, 2, 0))
            real = self.fft.irfftn(
                cbuf.reshape(k1 - k0, cg, *plan.spectrum_shape),
                s=plan.lengths,
                axes=self.axes,
                workers=self.workers,
            )
            params.w[k0:k1] = real[(..., *taps)]
        _zero_dead(params.w, plan.dead)


def _zero_dead(array: np.ndarray, dead: tuple[tuple[int, ...], ...]) -> None:
    """Write exact zeros at the outputs no tap links to the input (see ``FftPlan.dead``)."""
    for axis, positions in enumerate(dead):
        if positions:
            array[(slice(None), slice(None), *(slice(None),) * axis, list(positions))] = 0


def _tile_view(stage: np.ndarray, tiles: tuple[int, ...]) -> np.ndarray:
    """Writable view ``(N, *counts, C, *tiles)`` of a stage whose spatial sizes are multiples."""
    n, c, *span = stage.shape
    nd = len(tiles)
    counts = [s // t for s, t in zip(span, tiles, strict=True)]
    shaped = stage.reshape(n, c, *itertools.chain.from_iterable(zip(counts, tiles, strict=True)))
    order = (0, *(2 + 2 * i for i in range(nd)), 1, *(3 + 2 * i for i in range(nd)))
    return shaped.transpose(order)
