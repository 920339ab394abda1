"""The explicit-vector path of ``direct.grouped`` (:mod:`miocore_direct.grouped_simd`): plan
and invoker for groups as wide in as out of 2, 4, 8, 16 or 32 channels.

Channels are padded to a multiple of the kernels' vector width (whole zero groups, with zero
weights), so any group count runs; where that padding is empty and the caller's tensor is
packed float32 NHWC, the kernels write it directly. The input (x, or dy for backward data) is
staged zero-padded (:mod:`miocore_direct.grouped_arrange`; one image at a time where a whole
batch would leave the caches), the weights rearranged per block of ``V`` output lanes. A
strided backward-data pass runs one kernel call per stride phase (the dx pixels ``(r + a*sh,
c + b*sw)`` of one ``(r, c)``) with that phase's taps only, instead of the zero-inserted dy of
the shifted-diagonal path (``sh*sw`` times the multiply-adds).

16-wide groups whose column taps, stride and dilation have a sliding-window kernel
(:mod:`miocore_direct.grouped_slide`) run that one; with packed float32 NCHW tensors (or
NHWC at a stride, forward and backward weights) its self-staging form
(:mod:`miocore_direct.grouped_fused`), which stages each group's block itself instead of the
passes over the whole tensors above, and for NCHW strided backward data every phase in one
self-staging kernel (:mod:`miocore_direct.grouped_phases`; 8-wide groups too, and their NCHW
backward weights self-staged). 32-wide groups run the sliding-window kernels of
:mod:`miocore_direct.grouped_wide`, self-staged for packed float32 tensors.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from miocore import ConvProblem, DataType, Direction, InvokeParams
from miocore_direct.grouped_arrange import (
    arranged_weights,
    fast_nchw,
    kyxc_weights,
    pad,
    weight_rows,
)
from miocore_direct.grouped_fused import (
    SLACK,
    FusedPass,
    fused_generated,
    fused_pass,
    run_forward,
    run_weights,
)
from miocore_direct.grouped_phases import Phase, _margins, _phase, _phases, _progression
from miocore_direct.grouped_wide import WIDTH as WIDE
from miocore_direct.grouped_wide import pass_shape
from miocore_direct.pool_choice import PooledInvoker
from miocore_direct.regions import Float32Regions

if TYPE_CHECKING:
    import numpy as np

#: Group widths (in == out) the vector kernels take: those that divide or fill a vector.
WIDTHS = (2, 4, 8, 16)
#: Wider groups the vector kernels take (16 output lanes a vector, the group's W input channels
#: broadcast in turn; backward weights a slice of 16 of them a job): ResNeXt-50's 1024-channel
#: layers.
WIDE_WIDTHS = (32,)
#: Bytes of input and dy rows per backward-weights call: each (tap, lane block) reads a chunk
#: again, so it should stay in cache (batch 8, one thread: 128x56x56 9.3 ms in one call, 3.6-3.9
#: ms in chunks of 3-12 rows; 512x14x14 2.0 ms in one call, 1.3 ms in chunks of 12 rows, 1.6
#: in chunks of 3).
CHUNK_BYTES = 1536 * 1024
#: The same for the sliding-window backward-weights kernel, of one group's 16 channels: its
#: jobs of a group run in turn, each call costs ~20 µs (512x28x28 stride 2, batch 8: 1.8 ms
#: in chunks of 14 rows, 2.1 in 7, 4.4 in 1; 2.6 in 28; 512x14x14: 0.97 ms in 28, 1.04 in 3).
SLIDE_CHUNK_BYTES = 64 * 1024
# Measured 2026-11-27 on the kernels alone, one thread (AMD EPYC dev VM, AVX-512): 75-104
# multiply-adds per ns forward, 80-90 backward weights (a register-only loop of broadcast
# multiply-adds: 133); staging copies as the shifted-diagonal path's.
_MACS_PER_NS = 70.0
#: Float32 lanes between pixels of the staged input beyond its channels: one cache line, so
#: that a pixel stride of a power of two (512 channels: 2 KiB) does not map a tile's pixels
#: onto the same L1 sets (512x14x14 batch 8: 1.48 against 1.80 ms).
PITCH_EXTRA = 16
#: Bytes of staged input (x, or dy for backward data) above which a forward or backward-data
#: pass stages and runs one image at a time: a whole batch's staged copy leaves the caches
#: before the kernel reads it (batch 8, NHWC forward, one thread: 256x56x56 stride 2 5.3 ->
#: 3.5 ms, 256x28x28 3.1-3.6 -> 2.4-2.6, 128x56x56 2.6 -> 2.25; 512x14x14, 4.3 MB staged,
#: 1.04-1.10 either way).
PER_IMAGE_BYTES = 6 << 20
#: Group widths whose NCHW strided backward data runs the self-staging phase kernel.
PHASED_WIDTHS = (8, 16)
#: Group widths (under 16) and (column taps, stride, dilation) whose NCHW backward weights
#: run self-staged (:func:`miocore_direct.grouped_fused.lane_weights_source`).
LANE_WRW_WIDTHS = (8,)
LANE_WRW_SHAPES = {(3, 2, 1), (3, 1, 1)}
_STAGE_GBPS = 12.0
_CALL_MS = 0.03


def vector_applies(p: ConvProblem) -> bool:
    """Whether ``p`` (already a ``direct.grouped`` problem) takes the explicit-vector path."""
    width = p.c // p.groups
    if width != p.k // p.groups:
        return False
    return width in WIDTHS or width in WIDE_WIDTHS


def _direct_nhwc(desc: Any, channels: int, padded: int) -> bool:
    """Whether a caller tensor can be the kernels' float32 channels-last array itself."""
    return (
        channels == padded
        and desc.dtype is DataType.FLOAT32
        and desc.is_packed
        and desc.layout == "NHWC"
    )


class VectorPlan:
    """Geometry and workspace: weights ``(Kp / V, taps, W, V)``, the padded input (x, or dy
    for backward data) of ``Kp`` channels plus :data:`PITCH_EXTRA` zero lanes per pixel,
    unless the caller's tensor is used directly the other tensor (y, dx or dy) with ``Kp``
    channels, and for a strided backward-data pass the weights of every phase."""

    def __init__(self, p: ConvProblem) -> None:
        from miocore_direct.grouped_simd import lanes_for

        self.direction = p.direction
        self.width = p.c // p.groups
        self.chans = p.c
        self.padded = -(-p.c // lanes_for(self.width)) * lanes_for(self.width)
        self.filt = fy, fx = p.filter_spatial
        (sh, sw), (ph, pw), (dh, dw) = p.conv.strides, p.conv.pads, p.conv.dilations
        (h, w), (oh, ow) = p.in_spatial, p.out_spatial
        self.phases: list[Phase] = []
        if self.direction is Direction.BACKWARD_DATA:  # one pass per phase, dy not zero-inserted
            row_phases = [_phase(h, fy, sh, ph, dh, r) for r in range(min(sh, h))]
            col_phases = [_phase(w, fx, sw, pw, dw, r) for r in range(min(sw, w))]
            top, rows = _margins(row_phases, oh)
            left, cols = _margins(col_phases, ow)
            self.offsets = (top, left, 0)
            out, other_desc = (h, w), p.x
            strides = (1, 1)
        else:
            rows, cols = (oh - 1) * sh + (fy - 1) * dh + 1, (ow - 1) * sw + (fx - 1) * dw + 1
            self.offsets = (ph, pw, 0)
            out, other_desc = (oh, ow), p.y
            strides = (sh, sw)
        self.direct = _direct_nhwc(other_desc, self.chans, self.padded)
        other = (p.n, *out, self.padded)
        pitch = self.padded + PITCH_EXTRA
        self.dims = (p.n, rows, cols, pitch, *out, self.padded, fy, fx, *strides, dh, dw)
        self.place = (0, 0, math.prod(out) * self.padded, out[1] * self.padded, self.padded)
        self.lanes = lanes_for(self.width)
        #: The sliding-window kernels' shape (forward, backward weights), None for the plain
        #: kernels.
        self.shape = None
        if self.direction is not Direction.BACKWARD_DATA:  # its phases have their own
            self.shape = pass_shape(self.width, fx, sw, dw, ow)
        #: Whether the passes need their own weights (else one pass of every tap: stride 1).
        self.split = False
        if self.direction is Direction.BACKWARD_DATA:
            self.phases = _phases(self, (row_phases, col_phases), (top, left), w, (sh, sw))
            every_tap = [(len(ph.rows), len(ph.cols)) for ph in self.phases] == [(fy, fx)]
            self.split = not every_tap
        #: The self-staging kernels' pass (:mod:`miocore_direct.grouped_fused`), or None.
        self.fused: FusedPass | None = None
        wide = self.width == WIDE
        if self.direction is not Direction.BACKWARD_DATA:
            shape = self.shape or _lane_shape(p, self.width)
            self.fused = fused_pass(p, shape, (h, w), (rows, cols), (ph, pw), (oh, ow), self.width)
        elif self.direction is Direction.BACKWARD_DATA and not self.split:
            (r0, c0), one = (row_phases[0][1], col_phases[0][1]), self.phases[0]
            extents = ((h - 1) + (fy - 1) * one.dims[11] + 1, (w - 1) + (fx - 1) * one.dims[12] + 1)
            self.fused = fused_pass(p, one.shape, (oh, ow), extents, (-r0, -c0), (h, w), self.width)
        #: The self-staging kernel's table of phases (:mod:`miocore_direct.grouped_phases`)
        #: of a strided backward-data pass, or None.
        self.table = None
        if self.split and _phased(p):
            from miocore_direct.grouped_phases import phase_table

            self.table = phase_table(self.phases, pitch, cols, w, self.padded)
            self.phase_dims = (p.n, oh, ow, p.k, h, w, p.c, sh, sw, rows, cols, top, left)
        if not self.fused and self.shape and self.shape[1] > 1 and not wide:
            self.shape = None  # strided ones run self-staged only: fewer kernels to compile
        if not self.fused and wide and self.direction is Direction.BACKWARD_WEIGHTS:
            self.shape = None  # 32-wide sliding backward weights run self-staged only
        self.shapes = (  # weights per lane block: a block's taps in one run, not 2 KiB apart
            (self.padded // self.lanes, fy * fx, self.width, self.lanes),
            (p.n, rows, cols, pitch),
            other if not self.direct else (0,),
            (fy * fx * self.width * self.padded if self.split else 0,),
        )
        if self.fused:  # a block per thread instead of the staged tensors
            self.shapes = (self.shapes[0], (_threads(), self.fused.block), (0,), (0,))
        if self.table is not None:  # blocks of dy and of dx per thread
            block = (rows * cols + h * w) * self.lanes + 2 * SLACK
            self.shapes = (self.shapes[0], (_threads(), block), (0,), self.shapes[3])
        self.other = other
        row_bytes = 4 * (pitch * cols * dh * fy + self.padded * out[1])
        if self.shape:  # a group's jobs run in turn: its rows of x and dy should stay in cache
            row_bytes = 4 * self.lanes * (cols * sh + out[1])
        self.chunk_rows = max(1, (SLIDE_CHUNK_BYTES if self.shape else CHUNK_BYTES) // row_bytes)
        #: Whether a forward or backward-data pass stages and runs one image at a time (its
        #: staged input then stays in cache for the kernel).
        self.per_image = (
            p.n > 1
            and self.direction is not Direction.BACKWARD_WEIGHTS
            and not self.fused
            and self.table is None
            and 4 * math.prod(self.shapes[1]) > PER_IMAGE_BYTES
        )
        if self.per_image:
            self.shapes = (self.shapes[0], (1, *self.shapes[1][1:]), *self.shapes[2:])
        self.regions = Float32Regions(self.shapes)
        self.workspace_bytes = self.regions.nbytes
        self.macs = p.n * self.padded * math.prod(p.out_spatial) * fy * fx * self.width
        staged = math.prod(self.shapes[1]) * (p.n if self.per_image else 1)
        self.staged_bytes = 8 * (staged + math.prod(self.shapes[2]))

    def generated(self) -> list[tuple[str, str]]:
        """The generated kernel (name prefix, source) the invoker loads."""
        from miocore_direct import grouped_simd as kernels
        from miocore_direct import grouped_slide

        if self.fused:
            return [fused_generated(self.fused, self.direction)]
        if self.table is not None:
            from miocore_direct.grouped_phases import phases_spec

            return [phases_spec(self.width)]
        if self.direction is Direction.BACKWARD_WEIGHTS:
            if self.shape:
                return [grouped_slide.weights_spec(self.shape)]
            return [kernels.weights_spec(self.width)]
        shapes = [ph.shape for ph in self.phases] if self.phases else [self.shape]
        return [_spec(self.width, shape, self.split) for shape in dict.fromkeys(shapes)]

    def predicted_ms(self, threads: int) -> float:
        """Measured multiply-add rate plus the staging copies and the call."""
        compute = self.macs / (_MACS_PER_NS * 1e6 * max(1, threads))
        return compute + self.staged_bytes / (_STAGE_GBPS * 1e6) + _CALL_MS


def _phased(p: ConvProblem) -> bool:
    """Whether a strided backward-data pass runs the self-staging phase kernel
    (:mod:`miocore_direct.grouped_phases`): 16-wide groups, packed float32 NCHW tensors (with
    NHWC ones it ran slower than the passes of :meth:`VectorInvoker._phases`: 512x28x28
    stride 2, 0.34 against 0.22 ms at batch 1, 2.9 against 1.4 ms at batch 8)."""
    descs = (p.x, p.y)
    nchw = all(d.dtype is DataType.FLOAT32 and d.is_packed and d.layout == "NCHW" for d in descs)
    return nchw and p.c // p.groups in PHASED_WIDTHS and p.c % 16 == 0


def _lane_shape(p: ConvProblem, width: int) -> tuple[int, int, int] | None:
    """The (column taps, stride, dilation) of the self-staging backward-weights kernel of
    groups under 16 channels (:func:`miocore_direct.grouped_fused.lane_weights_source`):
    8-wide groups at stride 2 (ResNeXt's 256x56x56 layer), else None."""
    (_, fx), (_, sw), (_, dw) = p.filter_spatial, p.conv.strides, p.conv.dilations
    shape = (fx, sw, dw)
    lanes = width in LANE_WRW_WIDTHS and shape in LANE_WRW_SHAPES
    return shape if lanes and p.direction is Direction.BACKWARD_WEIGHTS else None


def _threads() -> int:
    """Rows of per-thread blocks: numba's whole pool (a call may take any part of it)."""
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)


def _spec(width: int, shape: tuple[int, int, int] | None, phase: bool) -> tuple[str, str]:
    """The generated forward kernel (name prefix, source) of a pass (``phase``: one of a
    strided backward-data pass's phases)."""
    from miocore_direct import grouped_simd, grouped_slide, grouped_wide

    if shape and width == WIDE:
        return grouped_wide.spec("", shape)
    if shape:
        return grouped_slide.slide_spec(shape, rows_outer=phase)
    return grouped_simd.forward_spec(width)


def _kernel(width: int, shape: tuple[int, int, int] | None, phase: bool) -> Any:
    """The compiled forward kernel of a pass (sliding-window where ``shape``)."""
    from miocore_direct import grouped_simd, grouped_slide, grouped_wide

    if shape and width == WIDE:
        return grouped_wide.kernel("", shape)
    if shape:
        return grouped_slide.slide_kernel(shape, rows_outer=phase)
    return grouped_simd.forward_kernel(width)


class VectorInvoker(PooledInvoker):
    """Stages, runs the generated vector kernel and writes the result back."""

    plan: VectorPlan

    def _run(self, params: InvokeParams) -> None:
        from miocore_direct import grouped_simd as kernels
        from miocore_direct import grouped_slide

        plan = self.plan
        wa, padded, region, phase_w = plan.regions.views(params.workspace)
        if plan.direction is Direction.BACKWARD_WEIGHTS and plan.fused:
            run_weights(plan.fused, wa, padded, params.x, params.y)
            self._unarrange(wa, params.w)
            return
        if plan.direction is Direction.BACKWARD_WEIGHTS:
            pad(params.x, padded, plan.offsets)
            dy = self._other(params.y, region, load=True)
            if plan.shape:
                kernel = grouped_slide.weights_kernel(plan.shape)
            else:
                kernel = kernels.weights_kernel(plan.width)
            rows = plan.other[0] * plan.other[1]
            flat_x, flat_dy, flat_w = padded.reshape(-1), dy.reshape(-1), wa.reshape(-1)
            for r0 in range(0, rows, plan.chunk_rows):  # chunks that stay in cache
                r1 = min(rows, r0 + plan.chunk_rows)
                kernel(flat_x, flat_dy, flat_w, plan.dims, r0, r1, r0 > 0)
            self._unarrange(wa, params.w)
            return
        backward = plan.direction is Direction.BACKWARD_DATA
        src, dst = (params.y, params.x) if backward else (params.x, params.y)
        if plan.fused and plan.fused.direct_w:  # the kernel reads the KYXC weights in place
            run_forward(plan.fused, kyxc_weights(params.w), padded, src, dst)
            return
        arranged_weights(params.w, plan.width, wa, backward)
        if plan.fused:
            run_forward(plan.fused, wa, padded, src, dst)
            return
        if plan.table is not None:
            self._phased(wa, phase_w, padded, src, dst)
            return
        out = self._other(dst, region, load=False)
        if plan.split:
            self._phase_weights(wa, phase_w)
        n = src.shape[0]
        for part in [slice(i, i + 1) for i in range(n)] if plan.per_image else [slice(0, n)]:
            pad(src[part], padded, plan.offsets)
            self._passes(wa, padded, out[part], phase_w)
        if out is not region:
            return
        self._store(out, dst)

    def _phased(
        self, wa: np.ndarray, phase_w: np.ndarray, bufs: np.ndarray, dy: np.ndarray, dx: np.ndarray
    ) -> None:
        """A strided backward-data pass in the self-staging phase kernel, from the caller's
        NCHW ``dy`` into its ``dx`` (through packed float32 copies where they are not)."""
        import numpy as np

        from miocore_direct.grouped_fused import _packed
        from miocore_direct.grouped_phases import phases_kernel

        plan = self.plan
        self._phase_weights(wa, phase_w)
        out = dx if fast_nchw(dx) else np.empty(dx.shape, np.float32)
        flat_dy, flat_dx = _packed(dy, True), out.reshape(-1)
        kernel = phases_kernel(plan.width)
        kernel(flat_dy, phase_w, flat_dx, plan.phase_dims, plan.table, bufs, True)
        if out is not dx:
            np.copyto(dx, out, casting="unsafe")

    def _passes(self, wa: np.ndarray, xp: np.ndarray, out: np.ndarray, phase_w: np.ndarray) -> None:
        """The kernel calls of a forward or backward-data pass from the staged ``xp`` into
        ``out`` (its images: the whole batch, or one of :attr:`VectorPlan.per_image`): one
        pass of every tap, or a strided backward-data pass's phases (weights in ``phase_w``)."""
        plan, n = self.plan, out.shape[0]
        flat_x, flat_out = xp.reshape(-1), out.reshape(-1)
        if not plan.split:  # forward, or backward data in one pass of every tap (stride 1)
            one = plan.phases[0] if plan.phases else None
            dims, place, shape = one[3:] if one else (plan.dims, plan.place, plan.shape)
            kernel = _kernel(plan.width, shape, False)
            kernel(flat_x, wa.reshape(-1), flat_out, (n, *dims[1:]), place)
            return
        for phase in plan.phases:
            kernel = _kernel(plan.width, phase.shape, True)
            dims = (n, *phase.dims[1:])
            kernel(flat_x, phase_w[phase.weights :], flat_out, dims, phase.place)

    def _phase_weights(self, wa: np.ndarray, phase_w: np.ndarray) -> None:
        """Each phase's taps picked from the flipped arrangement ``wa`` into its own run of
        ``phase_w``."""
        import numpy as np

        plan = self.plan
        (fy, fx), (blocks, _, width, lanes) = plan.filt, wa.shape
        full = wa.reshape(blocks, fy, fx, width, lanes)
        for phase in plan.phases:
            rows = _progression([fy - 1 - f for f in phase.rows])  # wa's taps are flipped
            cols = _progression([fx - 1 - f for f in phase.cols])
            size = blocks * len(phase.rows) * len(phase.cols) * width * lanes
            taps = phase_w[phase.weights : phase.weights + size]
            np.copyto(
                taps.reshape(blocks, len(phase.rows), len(phase.cols), width, lanes),
                full[:, rows][:, :, cols],
            )

    def _store(self, out: np.ndarray, dst: np.ndarray) -> None:
        """The first ``C`` channels of ``out`` into the caller's ``(N, C, H, W)`` tensor."""
        import numpy as np

        chans = self.plan.chans
        if dst.dtype == np.float32 and dst.flags.c_contiguous and chans % 16 == 0:
            from miocore_direct.grouped_transpose import nhwc_into_nchw

            nhwc_into_nchw(out, dst)
        else:
            np.copyto(dst.transpose(0, 2, 3, 1), out[..., :chans], casting="unsafe")

    def _unarrange(self, dwa: np.ndarray, w: np.ndarray) -> None:
        """``w[k, i, fy, fx] = dwa[k // V, fy*FX + fx, i, k % V]`` into the caller's weights."""
        import numpy as np

        k, width, fy, fx = w.shape
        blocks, taps, _, lanes = dwa.shape
        rows = weight_rows(w, width, k == blocks * lanes)
        if rows is not None:
            from miocore_direct.grouped_transpose import lanes_into_rows

            lanes_into_rows(dwa, rows, not w.flags.c_contiguous)
            return
        picked = dwa.transpose(1, 2, 0, 3).reshape(taps, width, blocks * lanes)[:, :, :k]
        picked = picked.reshape(fy, fx, width, k).transpose(3, 2, 0, 1)
        np.copyto(w, picked, casting="unsafe")

    def _other(self, array: np.ndarray, region: np.ndarray, load: bool) -> np.ndarray:
        """The caller's (N, C, H, W) tensor as a float32 (N, H, W, Kp) array: itself when
        packed float32 NHWC without padding channels, else the workspace region (filled from it,
        padding channels zero, when ``load``)."""
        import numpy as np

        view = array.transpose(0, 2, 3, 1)
        if self.plan.direct:
            return view
        if load:
            chans = self.plan.chans
            if fast_nchw(array) and chans == region.shape[3]:
                from miocore_direct.grouped_transpose import nchw_into_padded

                nchw_into_padded(array, region, 0, 0)
            else:
                np.copyto(region[..., :chans], view, casting="unsafe")
                region[..., chans:] = 0.0
        return region
