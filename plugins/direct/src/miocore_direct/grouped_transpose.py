"""The staging copies of the vector path of ``direct.grouped``
(:mod:`miocore_direct.grouped_vector`): NCHW <-> channels-last in 16x16 blocks transposed in
registers (:func:`miocore_direct.simd.transpose_block`), and channels-last into the padded,
pitched input buffer in 16-channel vectors.

numpy's transposing copy into the padded input and the scalar ``nhwc_to_nchw`` loop ran at
8-16 GB/s here, as long as the convolution itself on NCHW batches (256x28x28 batch 8: 0.8 ms
each way against 1.7 ms of kernel). Channel counts must be multiples of 16; the last pixels
of an image are copied by overlapping the last block with the one before (the same values
are written twice) or, in images under 16 pixels, one by one.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from miocore_direct.openmp import choose_wait_policy
from miocore_direct.simd import ops, transpose_block

#: The :data:`miocore_direct.simd.REVISION` these cached kernels were compiled with: edit
#: this file when that changes, so that numba compiles them again.
SIMD_REVISION = 1

choose_wait_policy()  # OpenMP reads it when the first kernel starts its threads

#: The block: channels per block and pixels per block.
BLOCK = 16

_transpose = transpose_block(BLOCK)
_load, _store = ops(BLOCK).load, ops(BLOCK).store
_jit = numba.njit(parallel=True, cache=True, nogil=True)


@_jit
def nchw_into_padded(src, dst, off_h, off_w):
    """``dst[n, off_h + h, off_w + w, c] = src[n, c, h, w]`` for a C-contiguous ``src``
    ``(N, C, H, W)`` (``C`` a multiple of 16) and a C-contiguous ``dst`` ``(N, Hp, Wp, P)``
    with ``P >= C`` that holds every placed pixel; the rest of ``dst`` is left alone. Each
    row of 16 pixels or more is copied in blocks straight into place; narrower rows take the
    image's pixels as one run, each block transposed into a scratch block, then its pixels
    stored where their rows put them."""
    n_img, chans, height, width = src.shape
    _, hp, wp, pitch = dst.shape
    fs = src.reshape(-1)
    fd = dst.reshape(-1)
    plane = height * width
    blocks = chans // 16
    for task in prange(n_img * blocks):
        n = task // blocks
        c0 = (task % blocks) * 16
        s = (n * chans + c0) * plane
        d = ((n * hp + off_h) * wp + off_w) * pitch + c0
        if width >= 16:  # whole rows of blocks: transposed straight into place
            for h in range(height):
                w = 0
                while w < width:
                    w = min(w, width - 16)
                    row = d + h * wp * pitch
                    _transpose(fs, s + h * width + w, plane, fd, row + w * pitch, pitch)
                    w += 16
        elif plane >= 16:
            scratch = np.empty(256, np.float32)
            p = 0
            while p < plane:
                p = min(p, plane - 16)  # the last block overlaps the one before
                _transpose(fs, s + p, plane, scratch, 0, 16)
                for q in range(16):
                    h = (p + q) // width
                    _store(fd, d + (h * wp + p + q - h * width) * pitch, _load(scratch, q * 16))
                p += 16
        else:
            for p in range(plane):
                h = p // width
                for c in range(16):
                    fd[d + (h * wp + p - h * width) * pitch + c] = fs[s + c * plane + p]


@_jit
def nhwc_into_nchw(src, dst):
    """``dst[n, c, h, w] = src[n, h, w, c]`` for a C-contiguous ``src`` ``(N, H, W, P)`` with
    ``P >= C`` and a C-contiguous ``dst`` ``(N, C, H, W)`` (``C`` a multiple of 16): each
    image's pixels as one run, so rows of any width take whole blocks."""
    n_img, chans, height, width = dst.shape
    pitch = src.shape[3]
    fs = src.reshape(-1)
    fd = dst.reshape(-1)
    plane = height * width
    blocks = chans // 16
    for task in prange(n_img * blocks):
        n = task // blocks
        c0 = (task % blocks) * 16
        s = n * plane * pitch + c0
        d = (n * chans + c0) * plane
        if plane >= 16:
            p = 0
            while p < plane:
                p = min(p, plane - 16)
                _transpose(fs, s + p * pitch, pitch, fd, d + p, plane)
                p += 16
        else:
            for p in range(plane):
                for c in range(16):
                    fd[d + c * plane + p] = fs[s + p * pitch + c]


@_jit
def nhwc_into_padded(src, dst, off_h, off_w):
    """``dst[n, off_h + h, off_w + w, c] = src[n, h, w, c]`` for C-contiguous arrays (``C`` a
    multiple of 16, ``dst``'s pitch ``P >= C``): vector copies of 16 channels, one image row
    per task (numpy's copy into the pitched rows: 1.05 against 0.81 ms for 128x56x56, batch 8;
    the same on smaller layers)."""
    n_img, height, width, chans = src.shape
    _, hp, wp, pitch = dst.shape
    fs = src.reshape(-1)
    fd = dst.reshape(-1)
    for task in prange(n_img * height):
        n = task // height
        h = task % height
        s = task * width * chans
        d = ((n * hp + off_h + h) * wp + off_w) * pitch
        for w in range(width):
            for c in range(0, chans, 16):
                _store(fd, d + w * pitch + c, _load(fs, s + w * chans + c))


_plain_jit = numba.njit(cache=True, nogil=True)  # weights: too small to wake the pool for


@_plain_jit
def _row_of(c, taps, width, kyxc):
    """The ``(t, i)`` offset in a block of ``dst`` of source column ``c``: ``c = i*T + t``, or
    ``t*W + i`` for channels-last (``(K, FY, FX, W)``) weights."""
    if kyxc:
        return c
    return (c % taps) * width + c // taps


@_plain_jit
def rows_into_lanes(src, dst, kyxc):
    """``dst[kb, t, i, l] = src[kb*16 + l, i*T + t]`` (``t*W + i`` where ``kyxc``) for a
    C-contiguous ``src`` ``(K, W*T)`` (the weights of ``W``-wide groups, ``W`` 16 or 32,
    ``T = FY*FX``) and ``dst`` ``(K/16, T, W, 16)``: 16x16 blocks transposed into a scratch
    block, whose rows (one source column each) are stored where their ``(t, i)`` puts them
    (numpy's strided copy: 0.022 against 0.008 ms for 512 channels, 3x3)."""
    k, cols = src.shape
    taps, width = dst.shape[1], dst.shape[2]
    fs = src.reshape(-1)
    fd = dst.reshape(-1)
    scratch = np.empty(256, np.float32)
    for kb in range(k // 16):
        for cb in range(cols // 16):
            _transpose(fs, (kb * 16) * cols + cb * 16, cols, scratch, 0, 16)
            for q in range(16):
                row = _row_of(cb * 16 + q, taps, width, kyxc)
                _store(fd, (kb * taps * width + row) * 16, _load(scratch, q * 16))


@_plain_jit
def lanes_into_rows(src, dst, kyxc):
    """The inverse of :func:`rows_into_lanes`: ``dst[kb*16 + l, i*T + t] = src[kb, t, i, l]``
    (backward weights into the caller's layout; numpy's copies: 0.11 against 0.01 ms)."""
    k, cols = dst.shape
    taps, width = src.shape[1], src.shape[2]
    fs = src.reshape(-1)
    fd = dst.reshape(-1)
    scratch = np.empty(256, np.float32)
    for kb in range(k // 16):
        for cb in range(cols // 16):
            for q in range(16):
                row = _row_of(cb * 16 + q, taps, width, kyxc)
                _store(scratch, q * 16, _load(fs, (kb * taps * width + row) * 16))
            _transpose(scratch, 0, 16, fd, (kb * 16) * cols + cb * 16, cols)


@_plain_jit
def flipped_into_lanes(src, dst, kyxc):
    """``dst[kb, T-1-t, j, l] = src[g*W + j, (h*16 + l)*T + t]`` (``t*W + h*16 + l`` where
    ``kyxc``) for lane block ``kb = g*W/16 + h``: the backward-data arrangement
    (:func:`miocore_direct.grouped_arrange.arranged_weights`) of the ``(K, W*T)`` rows of
    :func:`rows_into_lanes`, ``T <= 16``. Channels-last rows hold each vector whole; a KCYX
    row's ``16 x T`` matrix of one lane block is copied into a scratch run, which one
    transpose of a 16x16 block (its rows ``T`` apart, overlapping) turns into ``T`` vectors."""
    k, cols = src.shape
    taps, width = dst.shape[1], dst.shape[2]
    parts = width // 16
    fs = src.reshape(-1)
    fd = dst.reshape(-1)
    run = np.zeros(16 * taps + 16, np.float32)  # the last block row reads past the matrix
    block = np.empty(256, np.float32)
    for row in range(k):
        j = row % width
        for h in range(parts):
            kb = row // width * parts + h
            if kyxc:
                for t in range(taps):
                    d = ((kb * taps + taps - 1 - t) * width + j) * 16
                    _store(fd, d, _load(fs, row * cols + t * width + h * 16))
                continue
            for v in range(taps):
                _store(run, v * 16, _load(fs, row * cols + (h * taps + v) * 16))
            _transpose(run, 0, taps, block, 0, 16)  # block[t*16 + l] = run[l*T + t]
            for t in range(taps):
                _store(fd, ((kb * taps + taps - 1 - t) * width + j) * 16, _load(block, t * 16))
