"""The block copies the self-staging kernels of ``direct.grouped`` call
(:mod:`miocore_direct.grouped_fused`): one group's 16 channels of a caller's tensor into a
zero-padded per-thread block, and an output block back. Compiled numba code, kept out of
:mod:`miocore_direct.grouped_fused` so that planning a problem (immediate mode's listing, a
FindDb hit) never imports numba. A change here bumps ``grouped_fused.REVISION``.
"""

from __future__ import annotations

import numba

from miocore_direct.simd import ops, transpose_block

LANES = 16

_transpose = transpose_block(LANES)
_zero, _load, _store = ops(LANES).zero, ops(LANES).load, ops(LANES).store
_jit = numba.njit(cache=True, nogil=True)


@_jit
def stage(x, buf, at, n, c0, size, place, nchw):
    """``buf[at + (r*wp + c)*16 + i] = x[n, c0 + i, r - top, c - left]`` inside the image, zero
    elsewhere, for ``size = (h, w, chans)`` and ``place = (hp, wp, top, left)`` (the image
    inside the block: ``top + h <= hp``, ``left + w <= wp``). NCHW rows of 16 pixels or more
    are transposed in overlapping blocks; narrower ones as one 16-pixel run each, written past
    the row's end into the next rows (rewritten after it) or the margins (zeroed last)."""
    h, w, chans = size
    wp, top, left = place[1:]
    if nchw:
        plane = h * w
        base = (n * chans + c0) * plane
        for ih in range(h):
            d = at + ((ih + top) * wp + left) * 16
            s = base + ih * w
            if w < 16 and s + 15 * plane + 16 > x.size:  # a run past the row would leave x
                for c in range(16):
                    for q in range(w):
                        buf[d + q * 16 + c] = x[s + c * plane + q]
                continue
            q = 0
            while q < w:  # one call site: each inlined transpose costs seconds of compiling
                q = min(q, max(w - 16, 0))
                _transpose(x, s + q, plane, buf, d + q * 16, 16)
                q += 16
    else:
        for ih in range(h):
            d = at + ((ih + top) * wp + left) * 16
            s = (n * h + ih) * w * chans + c0
            for q in range(w):
                _store(buf, d + q * 16, _load(x, s + q * chans))
    _margins(buf, at, h, w, place)


@_jit
def _margins(buf, at, h, w, place):
    """Zero the pixels of a block outside its ``h x w`` image."""
    hp, wp, top, left = place
    z = _zero()
    for r in range(hp):
        if r < top or r >= top + h:
            for c in range(wp):
                _store(buf, at + (r * wp + c) * 16, z)
        else:
            for c in range(left):
                _store(buf, at + (r * wp + c) * 16, z)
            for c in range(left + w, wp):
                _store(buf, at + (r * wp + c) * 16, z)


@_jit
def stage_blocks(x, buf, at, step, n, c0, blocks, size, place, nchw):
    """:func:`stage` of the ``blocks`` 16-channel blocks from channel ``c0`` on, into blocks
    ``step`` floats apart from ``buf[at]`` (``miocore_direct.grouped_wide.REVISION`` follows
    this function). NHWC pixels are read as one run of all the blocks' channels: at a pixel
    pitch of 4 KiB one 64-byte block a pixel staged at half the speed."""
    if nchw:
        for b in range(blocks):
            stage(x, buf, at + b * step, n, c0 + b * 16, size, place, True)
        return
    h, w, chans = size
    wp, top, left = place[1:]
    for ih in range(h):
        for q in range(w):
            s = ((n * h + ih) * w + q) * chans + c0
            d = at + ((ih + top) * wp + left + q) * 16
            for b in range(blocks):
                _store(buf, d + b * step, _load(x, s + b * 16))
    for b in range(blocks):
        _margins(buf, at + b * step, h, w, place)


@_jit
def unstage(buf, ob, y, n, k0, plane, kout, nchw):
    """``y[n, k0 + i, p] = buf[ob + p*16 + i]`` for the ``plane`` output pixels ``p``."""
    if nchw:
        base = (n * kout + k0) * plane
        if plane >= 16:
            p = 0
            while p < plane:
                p = min(p, plane - 16)
                _transpose(buf, ob + p * 16, 16, y, base + p, plane)
                p += 16
        else:
            for p in range(plane):
                for c in range(16):
                    y[base + c * plane + p] = buf[ob + p * 16 + c]
    else:
        for p in range(plane):
            _store(y, (n * plane + p) * kout + k0, _load(buf, ob + p * 16))
