"""Strided backward data of channels-last depthwise convolutions (multiplier 1, no dilation)
as stride-1 phases on the all-taps tiles of :mod:`miocore_direct.depthwise_tiles`.

``dx[ih] = sum_fy dy[(ih + ph - fy) / sh] * w[fy]`` over the taps where the division is
exact. For the dx rows of one residue ``r = ih % sh`` the taps that contribute are exactly
``fy = f0, f0 + sh, ...`` with ``f0 = (r + ph) % sh``, and they read consecutive dy rows: so
the rows of phase ``r`` are a stride-1 correlation of dy with that sub-filter (reversed) and
its own padding. The same holds for columns, so a stride ``(sh, sw)`` backward data is
``sh * sw`` stride-1 forward passes, each writing one phase grid of dx (every ``sh``-th row,
every ``sw``-th column) through the tile kernel's strided-output variant. Every tap belongs
to exactly one phase, so no multiply-add is wasted and each dx pixel is stored once; dy is
read once per phase. The generic kernel gathered each dx pixel tap by tap, reloading the
accumulator per tap (0.34-0.60 of oneDNN on EfficientNet's 5x5 stride-2 layer).

A phase whose sub-filter is empty (a filter narrower than the stride) is zero-filled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from miocore_direct.depthwise_blocked import MAX_WIDTH

if TYPE_CHECKING:
    import numpy as np


#: Output pixels per all-taps tile of a phase; phases narrower than two tiles (dx of 14x14
#: and less at stride 2) take :data:`NARROW_TILE` (a wider tile would leave their columns to
#: the one-pixel edge loop).
PHASE_TILE = 8
NARROW_TILE = 4


@dataclass(frozen=True)
class Phase1D:
    """One residue ``r`` of dx along one axis: its taps (correlation order), padding and size.

    ``dx[r + sh*a] = sum_u dy[a - pad + u] * w[taps[u]]`` for ``a < count``."""

    residue: int
    taps: tuple[int, ...]
    pad: int
    count: int


def phases_1d(filt: int, stride: int, pad: int, size: int) -> list[Phase1D]:
    """The ``stride`` phases of a backward-data axis of filter extent ``filt`` (dilation 1),
    forward padding ``pad`` and dx extent ``size``."""
    out = []
    for r in range(stride):
        f0 = (r + pad) % stride
        taps = tuple(range(f0, filt, stride))
        shift = (r + pad - f0) // stride  # dy index of tap f0 for a = 0
        out.append(
            Phase1D(
                residue=r,
                taps=taps[::-1],  # correlation order: the last tap reads the first dy row
                pad=len(taps) - 1 - shift,
                count=len(range(r, size, stride)),
            )
        )
    return out


def applies(mult: int, filter_hw: tuple[int, int], strides: tuple[int, int],
            dilations: tuple[int, int]) -> bool:  # fmt: skip
    """Whether strided backward data takes the phase kernels (multiplier 1, no dilation,
    filters up to :data:`MAX_WIDTH` per side, a stride above 1)."""
    return (
        mult == 1
        and max(filter_hw) <= MAX_WIDTH
        and dilations == (1, 1)
        and strides != (1, 1)
        and min(strides) >= 1
    )


def _pairs(
    filt: tuple[int, int], strides: tuple[int, int], pads: tuple[int, int], size: tuple[int, int]
) -> list[tuple[Phase1D, Phase1D]]:
    """Every (row phase, column phase), rows outer."""
    rows = phases_1d(filt[0], strides[0], pads[0], size[0])
    cols = phases_1d(filt[1], strides[1], pads[1], size[1])
    return [(pr, pc) for pr in rows for pc in cols]


def _taps_slice(phase: Phase1D, stride: int) -> slice:
    """``phase.taps`` (descending by ``stride``) as a slice of the filter axis."""
    if not phase.taps:
        return slice(0, 0)
    last = phase.taps[-1] - stride
    return slice(phase.taps[0], last if last >= 0 else None, -stride)


def _kernel_key(pr: Phase1D, pc: Phase1D, chans: int, sw: int) -> tuple[int, ...] | None:
    """The :func:`~miocore_direct.depthwise_tiles.tile_kernel` arguments of one phase, or None
    where it runs no kernel (no dx pixels, or no taps: zero-filled)."""
    if pr.count == 0 or pc.count == 0 or not pr.taps or not pc.taps:
        return None
    from miocore_direct.depthwise_tile_shapes import edge_pad_for

    tile = PHASE_TILE if pc.count >= 2 * PHASE_TILE else NARROW_TILE
    edge = edge_pad_for(len(pc.taps), 1, 1, pc.pad)
    return (len(pr.taps), len(pc.taps), 1, 1, chans, sw, tile, edge)


class PhasePlan:
    """The phases of one strided backward-data problem, worked out once per plan: each
    phase's sub-filter slices, its place in the weights region, its kernel and arguments."""

    def __init__(
        self, filt: tuple[int, int], strides: tuple[int, int], pads: tuple[int, int],
        size: tuple[int, int], chans: int,
    ) -> None:  # fmt: skip
        self.filt, self.strides, self.size, self.chans = filt, strides, size, chans
        sh, sw = strides
        height, width = size
        self.phases = []
        start = 0
        for pr, pc in _pairs(filt, strides, pads, size):
            count = len(pr.taps) * len(pc.taps) * chans
            offset = pr.residue * width + pc.residue
            args = (1, pr.pad, 1, pc.pad, pr.count, pc.count, offset, height * width, sh * width)
            self.phases.append(
                (
                    pr,
                    pc,
                    (_taps_slice(pr, sh), _taps_slice(pc, sw)),
                    (start, start + count),
                    _kernel_key(pr, pc, chans, sw),
                    args,
                )
            )
            start += count
        self._kernels: list[Any] | None = None

    def specs(self) -> list[tuple[str, str]]:
        """The generated kernels (name prefix, source) :meth:`run` loads."""
        from miocore_direct.depthwise_tiles import tile_spec

        keys = {phase[4] for phase in self.phases if phase[4] is not None}
        return [tile_spec(*key) for key in sorted(keys)]

    def stage_weights(self, w: np.ndarray, region: np.ndarray) -> list[np.ndarray]:
        """Each phase's reversed sub-filter ``(rows, cols, K)`` in float32, one after another
        in ``region`` (together they hold each tap once)."""
        import numpy as np

        k = self.chans
        taps = w.reshape(k, *self.filt).transpose(1, 2, 0)  # (FY, FX, K) view
        subs = []
        for pr, pc, (rows, cols), (start, stop), _, _ in self.phases:
            sub = region[start:stop].reshape(len(pr.taps), len(pc.taps), k)
            if stop > start:
                np.copyto(sub, taps[rows, cols], casting="unsafe")
            subs.append(sub)
        return subs

    def run(self, dy: np.ndarray, subs: list[np.ndarray], dx: np.ndarray) -> None:
        """``dx`` (packed float32 ``(N, H, W, C)``) from ``dy`` (packed ``(N, OH, OW, C)``)
        and the sub-filters of :meth:`stage_weights`: one tile-kernel pass per phase."""
        from miocore_direct.depthwise_tiles import tile_kernel

        for array in (dy, dx):
            if not array.flags.c_contiguous:  # flat indexing needs packed arrays
                raise ValueError("phase kernel arrays must be C-contiguous")
        if self._kernels is None:
            self._kernels = [None if p[4] is None else tile_kernel(*p[4]) for p in self.phases]
        sh, sw = self.strides
        dyf, dxf = dy.reshape(-1), dx.reshape(-1)
        for phase, sub, kernel in zip(self.phases, subs, self._kernels, strict=True):
            pr, pc, _, _, _, args = phase
            if kernel is None:
                if pr.count and pc.count:  # a filter narrower than the stride: no taps here
                    dx[:, pr.residue :: sh, pc.residue :: sw, :] = 0.0
                continue
            kernel(dy, sub, dx, dyf, sub.reshape(-1), dxf, *args)
