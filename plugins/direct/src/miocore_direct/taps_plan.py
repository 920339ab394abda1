"""Geometry, workspace layout and copies of ``direct.taps`` (one BLAS call per filter tap).

The input is copied once, in float32, into a *phase-split, padded, channels-last* buffer ``P``:
for stride ``s`` the padded input is split into the ``s`` residues of each spatial index that
some tap actually reads (a 1x1 stride-2 layer keeps one phase: the decimated input), and each
phase is a stride-1 image of ``grid = out + ((filter - 1) * dilation) // stride`` positions per
dimension, laid out ``(group, phase, n, *grid, C/groups)``. The output lives on the same grid in
``Q``: ``(group, n, *grid, K/groups)``, of which the first ``out`` positions per dimension are
real. With both flattened to rows, tap ``t`` of the filter is *one contiguous row window* of
``P``: output row ``j`` reads input row ``j + offset(t)`` of phase ``phase(t)``. So

* forward: ``Q[0:L] += P[phase][off:off+L] @ W[t]^T`` for every tap (BLAS sgemm, beta=1);
* backward data: ``P[phase][off:off+L] += dY[0:L] @ W[t]`` (then the interior of ``P`` is dx);
* backward weights: ``dW[t] = dY[0:L]^T @ P[phase][off:off+L]``;

where ``L = (n-1) * prod(grid) + sum((out_i - 1) * rowstride_i) + 1`` rows cover every real
output. The rows that fall between real outputs (the ``grid - out`` margin) are computed and
thrown away; in backward directions they hold zeros so they contribute nothing.

Depthwise-like layers (``C/groups * K/groups <= 4``, groups > 1) skip BLAS: each tap is a
vectorised multiply-add over (groups, rows), so there are no tiny per-group GEMMs.

The ``block`` perf config splits the rows into blocks so that the output block stays in cache
while all taps accumulate into it (0 = no blocking).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from miocore import ConvProblem, DataType, Direction, ExecutionContext
from miocore.backends.cpu import workspace_view

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    import numpy as np

#: Groups with at most this many (input channel, output channel) pairs use the elementwise path.
ELEMENTWISE_PAIRS = 4
_WEIGHT_CHUNK = 1 << 15  # float32 elements of w staged per chunk
_ALIGN = 16  # float32 elements (64 bytes) between workspace regions

# Cost model, measured on the 2-core development machine (see README): BLAS reaches about this
# share of the calibrated sgemm ceiling on per-tap GEMMs, which shrinks with narrow channels;
# the elementwise path streams about this many bytes per multiply-add at copy bandwidth.
_GEMM_EFFICIENCY = 0.7
_ELEMENTWISE_BYTES_PER_MAC = 12.0
_CALL_MS = 0.004


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _channels_last_packed(desc: Any) -> bool:
    """Whether an array for ``desc`` is a packed channels-last buffer (NHWC / NDHWC)."""
    return desc.is_packed and desc.layout in ("NHWC", "NDHWC")


class TapsPlan:
    """Geometry, workspace layout and tap schedule of one problem (see the module docstring)."""

    def __init__(self, p: ConvProblem, block: int) -> None:
        self.direction = p.direction
        self.n, self.g = p.n, p.groups
        self.cg, self.kg = p.c // p.groups, p.k // p.groups
        self.ins, self.outs, self.filt = p.in_spatial, p.out_spatial, p.filter_spatial
        self.pads, self.strides, self.dils = p.conv.pads, p.conv.strides, p.conv.dilations
        rank = len(self.ins)
        self.phases = tuple(
            tuple(sorted({(t * d) % s for t in range(f)}))
            for f, d, s in zip(self.filt, self.dils, self.strides, strict=True)
        )
        self.grid = tuple(
            o + ((f - 1) * d) // s
            for o, f, d, s in zip(self.outs, self.filt, self.dils, self.strides, strict=True)
        )
        self.image = math.prod(self.grid)
        self.rows = self.n * self.image
        rowstride = [math.prod(self.grid[i + 1 :]) for i in range(rank)]
        self.length = (self.n - 1) * self.image + 1
        self.length += sum((o - 1) * rs for o, rs in zip(self.outs, rowstride, strict=True))
        self.nphase = math.prod(len(ph) for ph in self.phases)
        # (tap index, phase index, row offset) of every tap, in the weights' tap order.
        self.taps: list[tuple[int, int, int]] = []
        for index, tap in enumerate(itertools.product(*(range(f) for f in self.filt))):
            phase, offset = 0, 0
            for i, t in enumerate(tap):
                shift = t * self.dils[i]
                phase = phase * len(self.phases[i]) + self.phases[i].index(shift % self.strides[i])
                offset += (shift // self.strides[i]) * rowstride[i]
            self.taps.append((index, phase, offset))
        self.ntaps = len(self.taps)
        self.elementwise = self.g > 1 and self.cg * self.kg <= ELEMENTWISE_PAIRS
        self.block = self.length if block <= 0 else min(block, self.length)

        # P may be the caller's x itself (float32 NHWC, one group, no padding, unit stride), and
        # Q the caller's y (float32 NHWC, one group, the grid equal to the output).
        single = self.g == 1
        self.p_alias = (
            single
            and p.x.dtype is DataType.FLOAT32
            and _channels_last_packed(p.x)
            and all(s == 1 for s in self.strides)
            and not any(self.pads)
        )
        self.q_alias = (
            single
            and p.y.dtype is DataType.FLOAT32
            and _channels_last_packed(p.y)
            and self.grid == tuple(self.outs)
        )
        # Workspace regions, in float32 elements.
        self.w_elems = self.g * self.ntaps * self.cg * self.kg
        self.p_elems = 0 if self.p_alias else self.g * self.nphase * self.rows * self.cg
        self.q_elems = 0 if self.q_alias else self.g * self.rows * self.kg
        needs_tmp = self.elementwise and self.direction is not Direction.BACKWARD_WEIGHTS
        self.tmp_elems = self.g * self.block if needs_tmp else 0
        self.offsets = []
        total = 0
        for size in (self.w_elems, self.p_elems, self.q_elems, self.tmp_elems):
            self.offsets.append(total)
            total += _align(size)
        self.workspace_bytes = 4 * total

    # -- cost model --------------------------------------------------------------------------

    def predicted_ms(self, ctx: ExecutionContext, dtype: DataType) -> float:
        """Roofline estimate of this plan: the GEMMs (or multiply-adds) plus the copies."""
        macs = self.g * self.ntaps * self.length * self.cg * self.kg
        staged = self.p_elems + 2 * self.q_elems  # written once, read back once
        copies = ctx.roofline_ms(0.0, 4.0 * (self.p_elems + self.q_elems + staged), dtype)
        calls = self.ntaps * math.ceil(self.length / self.block)
        if self.elementwise:
            work = ctx.roofline_ms(0.0, _ELEMENTWISE_BYTES_PER_MAC * macs, dtype)
            calls *= self.cg * self.kg
        else:
            narrow = min(self.cg, self.kg)
            efficiency = _GEMM_EFFICIENCY * min(1.0, narrow / 64.0) ** 0.5
            work = ctx.roofline_ms(2.0 * macs, 0.0, dtype, max(efficiency, 0.02))
            calls *= self.g
        return work + copies + _CALL_MS * calls

    # -- workspace views ---------------------------------------------------------------------

    def views(self, workspace: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """Float32 views of the weight staging, P, Q and the elementwise scratch."""
        import numpy as np

        ws = workspace_view(workspace, self.workspace_bytes)
        flat = (
            ws[: self.workspace_bytes].view(np.float32)
            if ws is not None
            else np.empty(0, np.float32)
        )
        sizes = (self.w_elems, self.p_elems, self.q_elems, self.tmp_elems)
        parts = [flat[o : o + s] for o, s in zip(self.offsets, sizes, strict=True)]
        wst = parts[0].reshape(self.g, self.ntaps, self.kg, self.cg)
        pbuf = parts[1].reshape(self.g, self.nphase, self.rows, self.cg) if self.p_elems else None
        qbuf = parts[2].reshape(self.g, self.rows, self.kg) if self.q_elems else None
        tmp = parts[3].reshape(self.g, self.block) if self.tmp_elems else None
        return wst, pbuf, qbuf, tmp

    def p_from_x(self, x: np.ndarray) -> np.ndarray:
        """P as a view of the caller's x (only when :attr:`p_alias`)."""
        import numpy as np

        return np.moveaxis(x, 1, -1).reshape(1, 1, self.rows, self.cg)

    def q_from_y(self, y: np.ndarray) -> np.ndarray:
        """Q as a view of the caller's y (only when :attr:`q_alias`)."""
        import numpy as np

        return np.moveaxis(y, 1, -1).reshape(1, self.rows, self.kg)

    # -- copies between the caller's tensors and P / Q --------------------------------------

    def _grouped_x(self, x: np.ndarray) -> np.ndarray:
        """x as (G, N, *spatial, C/g): a view, channels last."""
        import numpy as np

        xr = x.reshape(self.n, self.g, self.cg, *self.ins)
        return np.moveaxis(np.moveaxis(xr, 1, 0), 2, -1)

    def _grouped_y(self, y: np.ndarray) -> np.ndarray:
        import numpy as np

        yr = y.reshape(self.n, self.g, self.kg, *self.outs)
        return np.moveaxis(np.moveaxis(yr, 1, 0), 2, -1)

    def _phase_image(self, pbuf: np.ndarray, phase: int) -> np.ndarray:
        return pbuf[:, phase].reshape(self.g, self.n, *self.grid, self.cg)

    def fill_p(self, pbuf: np.ndarray, x: np.ndarray) -> None:
        """Copy x into P (float32, padded with zeros, phase-split)."""
        import numpy as np

        xg = self._grouped_x(x)
        for phase, combo in enumerate(itertools.product(*self.phases)):
            image = self._phase_image(pbuf, phase)
            src, dst = [], []
            for i, residue in enumerate(combo):
                s, pad = self.strides[i], self.pads[i]
                first = max(0, -((residue - pad) // s))
                last = min(self.grid[i], (self.ins[i] - 1 + pad - residue) // s + 1)
                if first >= last:
                    image.fill(0)
                    break
                u0 = first * s + residue - pad
                src.append(slice(u0, u0 + (last - first - 1) * s + 1, s))
                dst.append((first, last))
            else:
                lead = (slice(None), slice(None))
                for i, (first, last) in enumerate(dst):  # zero the margins, dimension by dim
                    before = (slice(None),) * i
                    if first:
                        image[(*lead, *before, slice(0, first))] = 0
                    if last < self.grid[i]:
                        image[(*lead, *before, slice(last, None))] = 0
                inner = tuple(slice(a, b) for a, b in dst)
                np.copyto(image[(*lead, *inner)], xg[(*lead, *src)], casting="unsafe")

    def fill_q(self, qbuf: np.ndarray, dy: np.ndarray) -> None:
        """Copy dy into Q (float32), zeros on the grid margin."""
        import numpy as np

        image = qbuf.reshape(self.g, self.n, *self.grid, self.kg)
        lead = (slice(None), slice(None))
        for i, o in enumerate(self.outs):
            if o < self.grid[i]:
                image[(*lead, *(slice(None),) * i, slice(o, None))] = 0
        inner = tuple(slice(0, o) for o in self.outs)
        np.copyto(image[(*lead, *inner)], self._grouped_y(dy), casting="unsafe")

    def store_q(self, qbuf: np.ndarray, y: np.ndarray) -> None:
        """Write the real outputs of Q to y (cast to y's dtype)."""
        import numpy as np

        image = qbuf.reshape(self.g, self.n, *self.grid, self.kg)
        inner = tuple(slice(0, o) for o in self.outs)
        np.copyto(self._grouped_y(y), image[(slice(None), slice(None), *inner)], casting="unsafe")

    def store_p(self, pbuf: np.ndarray, dx: np.ndarray) -> None:
        """Write the interior of P to dx; inputs that no tap reaches get zeros."""
        import numpy as np

        per_dim: list[list[tuple[slice, tuple[int, slice] | None]]] = []
        for i in range(len(self.ins)):
            s, pad, size, grid = self.strides[i], self.pads[i], self.ins[i], self.grid[i]
            pieces: list[tuple[slice, tuple[int, slice] | None]] = []
            for residue in range(s):
                u0 = (residue - pad) % s  # first input index of this residue
                if u0 >= size:
                    continue
                count = (size - 1 - u0) // s + 1
                q0 = (u0 + pad) // s
                valid = min(count, max(0, grid - q0)) if residue in self.phases[i] else 0
                if valid:
                    phase = self.phases[i].index(residue)
                    span = slice(u0, u0 + (valid - 1) * s + 1, s)
                    pieces.append((span, (phase, slice(q0, q0 + valid))))
                if valid < count:
                    start = u0 + valid * s
                    pieces.append((slice(start, start + (count - valid - 1) * s + 1, s), None))
            per_dim.append(pieces)
        xg = self._grouped_x(dx)
        lead = (slice(None), slice(None))
        for combo in itertools.product(*per_dim):
            target = xg[(*lead, *(span for span, _ in combo))]
            if any(src is None for _, src in combo):
                target[...] = 0
                continue
            phase = 0
            for i, (_, src) in enumerate(combo):
                phase = phase * len(self.phases[i]) + src[0]  # type: ignore[index]
            image = self._phase_image(pbuf, phase)
            inner = tuple(src[1] for _, src in combo)  # type: ignore[index]
            np.copyto(target, image[(*lead, *inner)], casting="unsafe")

    def stage_weights(self, wst: np.ndarray, w: np.ndarray) -> None:
        """W[g, tap, k, c] = w[g*K/g + k, c, *tap] in float32.

        Keeping (k, c) in w's own order makes this a gentle gather (inner stride = taps)
        rather than a full transpose, which costs tens of ns per element on large filters.
        """
        import numpy as np

        wr = w.reshape(self.g, self.kg, self.cg, *self.filt)
        rank = len(self.filt)
        target = wst.reshape(self.g, *self.filt, self.kg, self.cg)
        source = wr.transpose(0, *range(3, 3 + rank), 1, 2)
        # A few output channels at a time, so the strided reads of one chunk stay in cache.
        chunk = max(1, _WEIGHT_CHUNK // (self.cg * self.ntaps))
        for k0 in range(0, self.kg, chunk):
            inner = (Ellipsis, slice(k0, k0 + chunk), slice(None))
            np.copyto(target[inner], source[inner], casting="unsafe")

    def store_weights(self, wst: np.ndarray, w: np.ndarray) -> None:
        """w[g*K/g + k, c, *tap] = dW[g, tap, k, c]: the inverse of :meth:`stage_weights`."""
        import numpy as np

        wr = w.reshape(self.g, self.kg, self.cg, *self.filt)
        rank = len(self.filt)
        source = wst.reshape(self.g, *self.filt, self.kg, self.cg)
        order = (0, 1 + rank, 2 + rank, *range(1, 1 + rank))
        np.copyto(wr, source.transpose(order), casting="unsafe")

    # -- the per-tap passes ------------------------------------------------------------------

    def blocks(self) -> Iterator[tuple[int, int]]:
        """Row blocks [j0, j1) covering [0, L)."""
        for j0 in range(0, self.length, self.block):
            yield j0, min(self.length, j0 + self.block)
