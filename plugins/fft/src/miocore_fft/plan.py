"""Geometry and workspace layout of one FFT convolution: FFT lengths, tiles, chunks, buffers.

Every direction is reduced to the same pipeline (see ``README.md``): a real *stage* buffer
holds the zero-extended operand, overlapping (or zero-padded) windows of it are transformed a
chunk of tiles at a time, the spectra are reduced over channels by a batched complex matmul per
frequency bin, and the product is transformed back a chunk at a time. :class:`FftPlan` is the
single source of truth for the sizes: the invoker takes its buffers from the workspace at the
offsets :attr:`FftPlan.regions` gives, and ``workspace_size`` is :attr:`FftPlan.workspace_bytes`.
"""

from __future__ import annotations

import math
from functools import cached_property

from miocore import ConvProblem, Direction
from miocore.values import frozen

#: Bytes of one real (float32) and one complex (complex64) element: all arithmetic is float32.
REAL = 4
COMPLEX = 8
#: Buffers start on 64-byte boundaries (a cache line; SIMD loads never straddle one).
ALIGN = 64
#: Target size of one chunk of real tiles: the FFT library's own temporaries are about this
#: size (its output), so they stay bounded whatever the problem (and the chunk stays in L2/L3).
CHUNK_BYTES = 4 << 20

#: Tiled FFT lengths a perf config may name (5-smooth, so pocketfft stays on its fast radices).
TILE_LENGTHS = (16, 24, 32, 48, 64, 96, 128, 192, 256)


def _align(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def full_length(extent: int, filt: int, *, last: bool) -> int:
    """FFT length that covers ``extent`` outputs of a ``filt``-tap filter in one tile."""
    return next_fast_len(extent + filt - 1, real=last)


#: Radices pocketfft transforms fastest: real transforms, and complex ones.
_REAL_RADICES = (2, 3, 5)
_COMPLEX_RADICES = (2, 3, 5, 7, 11)


def next_fast_len(target: int, *, real: bool) -> int:
    """The smallest length >= ``target`` whose prime factors are all radices pocketfft is fast
    on: 2, 3, 5 for a real transform, 2, 3, 5, 7, 11 for a complex one.

    What ``scipy.fft.next_fast_len(target, real)`` answers (pocketfft's ``good_size``), without
    importing ``scipy.fft``: that import (SciPy's special functions come with it) costs a
    FindDb hit in a new process about 0.2 s, and a hit only needs the plan's sizes.
    """
    if target < 1:
        raise ValueError(f"FFT length target must be a positive integer, got {target}")
    radices = _REAL_RADICES if real else _COMPLEX_RADICES
    best = 2 * target  # a power of two in [target, 2 target) always exists
    # Every product of the odd radices below ``best``, raised to >= target by powers of two.
    odd: list[int] = [1]
    for radix in radices[1:]:
        odd = [m * radix**e for m in odd for e in range(_max_exponent(radix, best // m) + 1)]
    for m in odd:
        length = m
        while length < target:
            length *= 2
        best = min(best, length)
    return best


def _max_exponent(radix: int, limit: int) -> int:
    """The largest ``e`` with ``radix ** e <= limit`` (0 when ``limit`` < ``radix``)."""
    e, power = 0, radix
    while power <= limit:
        e, power = e + 1, power * radix
    return e


@frozen(kw_only=True)
class FftPlan:
    """Sizes of one FFT convolution for a canonical stride-1 problem and an FFT length.

    ``fft_len`` 0 means no tiling (one tile covers each spatial dimension); otherwise every
    dimension whose untiled FFT would be longer than ``fft_len`` is cut into tiles of
    ``fft_len - dilated_filter + 1`` outputs (overlap-save: input windows overlap, output
    tiles do not, so nothing is accumulated across tiles).
    """

    problem: ConvProblem
    fft_len: int

    # -- per-dimension geometry ----------------------------------------------------------

    @cached_property
    def direction(self) -> Direction:
        """Direction of the problem."""
        return self.problem.direction

    @cached_property
    def nd(self) -> int:
        """Number of spatial dimensions (2 or 3)."""
        return self.problem.spatial_dims

    @cached_property
    def fd(self) -> tuple[int, ...]:
        """Dilated filter extents: a dilated filter is a sparse filter of this size."""
        p = self.problem
        return tuple(
            d * (f - 1) + 1 for f, d in zip(p.filter_spatial, p.conv.dilations, strict=True)
        )

    @cached_property
    def extent(self) -> tuple[int, ...]:
        """Lengths the tiles cover: the output (forward), dx (backward data), dy (weights)."""
        p = self.problem
        return p.in_spatial if self.direction is Direction.BACKWARD_DATA else p.out_spatial

    @cached_property
    def lengths(self) -> tuple[int, ...]:
        """FFT length per spatial dimension."""
        out = []
        for i, (e, f) in enumerate(zip(self.extent, self.fd, strict=True)):
            full = full_length(e, f, last=i == self.nd - 1)
            out.append(full if self.fft_len == 0 or self.fft_len >= full else self.fft_len)
        return tuple(out)

    @cached_property
    def tiles(self) -> tuple[int, ...]:
        """Outputs per tile and dimension (``L - Fd + 1``, at most the extent)."""
        return tuple(
            min(e, length - f + 1)
            for e, length, f in zip(self.extent, self.lengths, self.fd, strict=True)
        )

    @cached_property
    def counts(self) -> tuple[int, ...]:
        """Tiles per dimension."""
        return tuple(-(-e // t) for e, t in zip(self.extent, self.tiles, strict=True))

    @cached_property
    def is_valid(self) -> bool:
        """Every tile holds at least one output."""
        return all(t >= 1 for t in self.tiles)

    @cached_property
    def dead(self) -> tuple[tuple[int, ...], ...]:
        """Per spatial dimension, the output positions no filter tap links to the input.

        Such an output is exactly zero: every tap of it lands in the padding (an even filter
        dilated across a size-1 input, say). The transforms would leave rounding noise there
        (about 1e-7), which is an unbounded relative error when the whole output is zero, so
        the engine writes exact zeros at these positions. Output means y (forward), dx
        (backward data) and the dilated taps of dw (backward weights).
        """
        p = self.problem
        out: list[tuple[int, ...]] = []
        for size_in, size_out, f, d, q in zip(
            p.in_spatial,
            p.out_spatial,
            p.filter_spatial,
            p.conv.dilations,
            p.conv.pads,
            strict=True,
        ):
            if self.direction is Direction.FORWARD:
                live = [
                    any(0 <= o + j * d - q < size_in for j in range(f)) for o in range(size_out)
                ]
            elif self.direction is Direction.BACKWARD_DATA:
                live = [
                    any(0 <= i + q - j * d < size_out for j in range(f)) for i in range(size_in)
                ]
            else:
                live = [
                    any(0 <= o + j * d - q < size_in for o in range(size_out)) for j in range(f)
                ]
            out.append(tuple(i for i, alive in enumerate(live) if not alive))
        return tuple(out)

    @cached_property
    def bins(self) -> int:
        """Frequency bins of one real transform (the last axis is halved by rfft)."""
        return math.prod(self.lengths[:-1]) * (self.lengths[-1] // 2 + 1)

    @cached_property
    def spectrum_shape(self) -> tuple[int, ...]:
        """Shape of one rfftn spectrum."""
        return (*self.lengths[:-1], self.lengths[-1] // 2 + 1)

    @cached_property
    def tile_elems(self) -> int:
        """Real elements of one transform."""
        return math.prod(self.lengths)

    @cached_property
    def rows(self) -> int:
        """Matmul rows: one per (image, tile)."""
        return self.problem.n * math.prod(self.counts)

    @cached_property
    def units(self) -> int:
        """Chunking units: (image, first-axis tile) pairs, each :attr:`unit_rows` rows."""
        return self.problem.n * self.counts[0]

    @cached_property
    def unit_rows(self) -> int:
        """Rows per chunking unit (all tiles of the remaining axes)."""
        return math.prod(self.counts[1:])

    # -- operands -------------------------------------------------------------------------

    @cached_property
    def a_channels(self) -> int:
        """Channels of the tiled operand A (x forward, dy backward data and weights)."""
        p = self.problem
        return p.c if self.direction is Direction.FORWARD else p.k

    @cached_property
    def out_channels(self) -> int:
        """Channels of the tiled output (forward y, backward data dx)."""
        p = self.problem
        return p.k if self.direction is Direction.FORWARD else p.c

    @cached_property
    def a_lo(self) -> tuple[int, ...]:
        """Where A's element 0 sits in its stage buffer (its zero extension on the left)."""
        p = self.problem
        if self.direction is Direction.BACKWARD_DATA:
            return tuple(f - 1 - q for f, q in zip(self.fd, p.conv.pads, strict=True))
        if self.direction is Direction.FORWARD:
            return p.conv.pads
        return (0,) * self.nd

    @cached_property
    def a_window(self) -> tuple[int, ...]:
        """Samples of A per tile: overlapping windows of L, or (weights) T then zeros."""
        return self.tiles if self.direction is Direction.BACKWARD_WEIGHTS else self.lengths

    @cached_property
    def x_stage_shape(self) -> tuple[int, ...]:
        """Stage of the overlapping-window operand: x (forward, weights) or dy (backward data)."""
        ch = self.problem.c if self.direction is Direction.BACKWARD_WEIGHTS else self.a_channels
        span = tuple(
            (n - 1) * t + length
            for n, t, length in zip(self.counts, self.tiles, self.lengths, strict=True)
        )
        return (self.problem.n, ch, *span)

    @cached_property
    def tile_stage_shape(self) -> tuple[int, ...]:
        """Stage of a disjoint-tile tensor: the output (forward, backward data) or dy (weights)."""
        ch = self.a_channels if self.direction is Direction.BACKWARD_WEIGHTS else self.out_channels
        span = tuple(n * t for n, t in zip(self.counts, self.tiles, strict=True))
        return (self.problem.n, ch, *span)

    def units_per_chunk(self, channels: int) -> int:
        """Units of ``channels``-channel tiles per chunk of about :data:`CHUNK_BYTES`."""
        per_unit = self.unit_rows * channels * self.tile_elems * REAL
        return max(1, min(self.units, CHUNK_BYTES // per_unit))

    def filters_per_chunk(self, channels: int) -> int:
        """Output channels (filters) of ``channels`` inputs per chunk of about CHUNK_BYTES."""
        per = channels * self.tile_elems * REAL
        return max(1, min(self.problem.k, CHUNK_BYTES // per))

    @cached_property
    def a_chunk_units(self) -> int:
        """Units per chunk when A is transformed."""
        return self.units_per_chunk(self.a_channels)

    @cached_property
    def x_chunk_units(self) -> int:
        """Units per chunk when x is transformed (backward weights)."""
        return self.units_per_chunk(self.problem.c)

    @cached_property
    def out_chunk_units(self) -> int:
        """Units per chunk when the output is transformed back (forward, backward data)."""
        return self.units_per_chunk(self.out_channels)

    @cached_property
    def filter_chunk(self) -> int:
        """Filters per chunk: w transformed (forward, backward data) or dw transformed back."""
        return self.filters_per_chunk(self.problem.c // self.problem.groups)

    # -- workspace ------------------------------------------------------------------------

    @cached_property
    def regions(self) -> dict[str, tuple[int, int]]:
        """Named workspace buffers: ``name -> (byte offset, byte size)``.

        ``stage``: the real zero-extended operand(s), and later the output tiles (the two are
        never live together); ``a_spec``/``b_spec``/``out_spec``: the complex64 spectra in
        matmul layout (bin-major); ``rchunk``: one chunk of real tiles to transform;
        ``cchunk``: one chunk of spectra to transform back.
        """
        p = self.problem
        g = p.groups
        cg = p.c // g
        wrw = self.direction is Direction.BACKWARD_WEIGHTS
        stage = max(math.prod(self.x_stage_shape), math.prod(self.tile_stage_shape)) * REAL
        a_spec = self.bins * self.rows * self.a_channels * COMPLEX
        if wrw:  # B is x's spectra; the product is dW's spectra
            b_spec = self.bins * self.rows * p.c * COMPLEX
            out_spec = self.bins * p.k * cg * COMPLEX
            rchunk_rows = max(self.a_chunk_units * self.a_channels, self.x_chunk_units * p.c)
            rchunk = rchunk_rows * self.unit_rows * self.tile_elems * REAL
            cchunk = self.filter_chunk * cg * self.bins * COMPLEX
        else:  # B is the filters' spectra
            b_spec = self.bins * p.k * cg * COMPLEX
            out_spec = self.bins * self.rows * self.out_channels * COMPLEX
            rchunk = max(
                self.a_chunk_units * self.unit_rows * self.a_channels,
                self.filter_chunk * cg,
            ) * (self.tile_elems * REAL)
            cchunk = self.out_chunk_units * self.unit_rows * self.out_channels * self.bins * COMPLEX
        out: dict[str, tuple[int, int]] = {}
        offset = 0
        for name, size in (
            ("stage", stage),
            ("a_spec", a_spec),
            ("b_spec", b_spec),
            ("out_spec", out_spec),
            ("rchunk", rchunk),
            ("cchunk", cchunk),
        ):
            out[name] = (offset, size)
            offset += _align(size)
        return out

    @cached_property
    def workspace_bytes(self) -> int:
        """Total workspace: the end of the last region."""
        offset, size = self.regions["cchunk"]
        return offset + size

    # -- cost model -----------------------------------------------------------------------

    @cached_property
    def transforms(self) -> int:
        """Real transforms of length :attr:`tile_elems` one run performs (forward + inverse)."""
        p = self.problem
        cg = p.c // p.groups
        if self.direction is Direction.BACKWARD_WEIGHTS:
            return self.rows * (p.k + p.c) + p.k * cg
        return self.rows * (self.a_channels + self.out_channels) + p.k * cg

    @cached_property
    def fft_flops(self) -> float:
        """About 5 N log2 N flops per complex transform; a real one costs half."""
        n = self.tile_elems
        return self.transforms * 2.5 * n * math.log2(max(n, 2))

    @cached_property
    def gemm_flops(self) -> float:
        """Complex multiply-adds (8 real flops each) of the per-bin channel reduction."""
        p = self.problem
        g = p.groups
        return 8.0 * self.bins * g * self.rows * (p.c // g) * (p.k // g)

    @cached_property
    def traffic_bytes(self) -> float:
        """Bytes the spectra and stages move: each written once and read once or twice."""
        regions = self.regions
        spectra = sum(regions[name][1] for name in ("a_spec", "b_spec", "out_spec"))
        return 3.0 * spectra + 3.0 * regions["stage"][1]
