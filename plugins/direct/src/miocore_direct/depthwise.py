"""``direct.depthwise``: depthwise convolutions (groups == input channels) on the CPU.

One compiled kernel per direction (:mod:`miocore_direct.depthwise_kernels`), vectorised over
channels, threads over output rows. No per-group Python loop. Packed float32 NHWC tensors are
read and written in place; NCHW, float16/bfloat16 or strided tensors are staged once in
float32 channels-last order in the workspace (a transpose is far cheaper than a kernel walking
short NCHW rows, see the kernels' module), and the result is rounded once. NCHW forward at
stride 1 or 2, backward data and backward weights at stride 1 (multiplier 1) take the plane
kernels instead
(:mod:`miocore_direct.depthwise_plane`): one padded image (or its four
phases) per channel, long rows, no transposes; other types than float32 are cast in NCHW
order. Strided backward data runs as stride-1 phases of dx: on channels-last tensors through
the all-taps tiles (:mod:`miocore_direct.depthwise_phases`), and NCHW at stride 2 on planes
(:mod:`miocore_direct.depthwise_plane_bwd`).
Any channel multiplier (K = C * M), any 2-D filter, stride, padding and dilation.
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    Direction,
    ExecutionContext,
    InvalidArgumentError,
    InvokeParams,
    PerfConfig,
    Solver,
    not_applicable,
)
from miocore_direct.depthwise_choice import (
    blocked_applies,
    phases_apply,
    plane_applies,
    plane_bwd2_applies,
    staging_beats_planes,
    staging_beats_planes_wrw,
    tiles_apply,
    wrw_tiles_apply,
)
from miocore_direct.depthwise_staging import (
    channels_last,
    channels_last_to_nchw,
    in_place,
    nchw_to_channels_last,
    packed_float32_nchw,
)
from miocore_direct.openmp import choose_wait_policy
from miocore_direct.pool_choice import PooledInvoker
from miocore_direct.regions import Float32Regions

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    import numpy as np

#: Parts the channels-last backward-weights pass splits its rows into (one partial sum each).
WEIGHT_PARTS = 16

# Cost model, measured on the 2-core development machine (docs/performance-cpu-depthwise.md):
# the kernels sustain about this many float32 multiply-adds per ns per thread (AVX2-width
# loops, load-bound), staging copies move about this many GB/s, and every call pays the numba
# dispatch and the thread-pool wake-up.
_MACS_PER_NS = 8.0
_BLOCKED_MACS_PER_NS = 16.0  # the register-blocked kernels (depthwise_blocked.py)
_STAGE_GBPS = 4.0
_CALL_MS = 0.02


class _Plan:
    """Geometry, kernel choice and workspace layout of one depthwise problem."""

    def __init__(self, p: ConvProblem) -> None:
        self.direction = p.direction
        self.n, self.c, self.k = p.n, p.c, p.k
        self.mult = p.k // p.c
        self.ins, self.outs, self.filt = p.in_spatial, p.out_spatial, p.filter_spatial
        self.geometry = (
            self.mult,
            *p.conv.strides,
            *p.conv.pads,
            *p.conv.dilations,
        )
        # Register-blocked kernel: forward, and backward data at stride 1 (a forward pass of dy
        # with the flipped filter and padding (F - 1) * d - p), multiplier 1.
        sh, sw = p.conv.strides
        self.blocked = self.direction is not Direction.BACKWARD_WEIGHTS and blocked_applies(
            self.mult, self.filt[1], sw, p.conv.dilations[1]
        )
        # Strided backward data: one stride-1 tile pass per phase of dx (depthwise_phases.py).
        self.phased = False
        self._phases: Any = None
        if self.direction is Direction.BACKWARD_DATA and (sh, sw) != (1, 1):
            self.blocked = False
            self.phased = phases_apply(self.mult, self.filt, (sh, sw), tuple(p.conv.dilations))
        # NCHW plane kernels (forward at stride 1 or 2, backward data and weights at stride
        # 1): read and write NCHW rows in place, where the other kernels need transposes.
        self.pads = tuple(p.conv.pads)
        if self.direction is Direction.BACKWARD_DATA:
            self.pads = tuple(
                (f - 1) * d - pad
                for f, d, pad in zip(self.filt, p.conv.dilations, p.conv.pads, strict=True)
            )
        self.plane = (
            p.x.layout == "NCHW"
            and (self.direction is Direction.FORWARD or (sh, sw) == (1, 1))
            and plane_applies(self.mult, self.filt[1], (sh, sw), self.pads, p.conv.dilations)
            and not (
                self.direction is not Direction.BACKWARD_WEIGHTS
                and staging_beats_planes(self.c, self.filt[1], self.outs[1])
            )
            and not (
                self.direction is Direction.BACKWARD_WEIGHTS
                and staging_beats_planes_wrw(self.c, self.outs[1])
            )
        )
        # NCHW backward data at stride 2: the phases on planes (depthwise_plane_bwd.py).
        self.plane_bwd2 = (
            p.x.layout == "NCHW"
            and self.direction is Direction.BACKWARD_DATA
            and plane_bwd2_applies(
                self.mult, self.filt, (sh, sw), tuple(p.conv.dilations), self.ins
            )
        )
        self.plane = self.plane or self.plane_bwd2
        if self.plane:
            self.blocked = self.phased = False
        layout = "NCHW" if self.plane else "NHWC"
        self.x_direct = in_place(p.x, layout)
        self.y_direct = in_place(p.y, layout)
        # Workspace regions in float32 elements: weights, x copy, y copy, partial sums.
        taps = math.prod(self.filt)
        weights = self.k * taps
        x_elems = 0 if self.x_direct else self.n * self.c * math.prod(self.ins)
        y_elems = 0 if self.y_direct else self.n * self.k * math.prod(self.outs)
        self.parts = 0
        # Channels-last backward weights: register tiles (depthwise_wrw_tiles.py) where generated.
        self.wrw_tiles = False
        if self.direction is Direction.BACKWARD_WEIGHTS and not self.plane:
            self.parts = max(1, min(WEIGHT_PARTS, self.n * self.outs[0]))
            self.wrw_tiles = wrw_tiles_apply(self.mult, self.filt[1], sw, p.conv.dilations[1])
        partial = self.parts * weights
        self.sizes = (weights, x_elems, y_elems, partial)
        self.regions = Float32Regions([(size,) for size in self.sizes])
        self.workspace_bytes = self.regions.nbytes
        self.macs = self.n * self.k * math.prod(self.outs) * taps

    def predicted_ms(self, threads: int) -> float:
        """The kernels' measured multiply-add rate plus the float32 staging copies."""
        fast = self.blocked or self.plane or self.phased or self.wrw_tiles
        rate = (_BLOCKED_MACS_PER_NS if fast else _MACS_PER_NS) * 1e6 * max(1, threads)
        staged = sum(self.sizes[1:3]) * 8 / (_STAGE_GBPS * 1e6)  # bytes read + written
        return self.macs / rate + staged + _CALL_MS

    def generated(self) -> list[tuple[str, str]]:
        """The generated kernels (name prefix, source) the invoker loads: what a first run
        may compile. The generic kernels of depthwise_kernels.py are compiled once per machine
        for every problem and are not listed."""
        _, sh, sw, _, _, _, dw = self.geometry
        fh, fw = self.filt[0], self.filt[1]
        if self.plane:
            from miocore_direct import depthwise_plane as plane

            if self.direction is Direction.BACKWARD_WEIGHTS:
                return [plane.plane_weights_spec(fw, dw)]
            if self.plane_bwd2:
                from miocore_direct.depthwise_plane_bwd import spec

                return [spec(fw)]
            if sh == 2:
                return [plane.stride2_spec((fh, fw), self.ins[1], self.outs[1])]
            return [plane.plane_spec(fw, dw)]
        if self.phased:
            return self.phase_plan().specs()
        if self.blocked:
            if tiles_apply(self.mult, self.filt, sw, dw):
                from miocore_direct import depthwise_tile_shapes as shapes
                from miocore_direct.depthwise_tiles import tile_spec

                pw = self.pads[1]  # backward data: (F - 1) * d - p, a forward pass of dy
                width, out_w = self.ins[1], self.outs[1]
                if self.direction is Direction.BACKWARD_DATA:
                    width, out_w = out_w, width
                kwargs = shapes.choose(fw, sw, dw, pw, width, out_w)
                return [tile_spec(fh, fw, sw, dw, self.k, **kwargs)]
            from miocore_direct.depthwise_blocked import forward_spec

            return [forward_spec(fw, sw, dw, fh)]
        if self.wrw_tiles:
            from miocore_direct.depthwise_wrw_tiles import wrw_spec

            return [wrw_spec(fw, sw, dw, self.k, self.ins[1], self.pads[1], self.outs[1])]
        return []

    def phase_plan(self) -> Any:
        """The :class:`~miocore_direct.depthwise_phases.PhasePlan` of a phased problem, made
        on first use (planning stays free of the kernel modules until a run asks)."""
        if self._phases is None:
            from miocore_direct.depthwise_phases import PhasePlan

            _, sh, sw, ph, pw, _, _ = self.geometry
            filt, size = (self.filt[0], self.filt[1]), (self.ins[0], self.ins[1])
            self._phases = PhasePlan(filt, (sh, sw), (ph, pw), size, self.c)
        return self._phases

    def buffers(self, workspace: Any) -> list[np.ndarray]:
        """Float32 views of the workspace regions (weights, x, y, partials)."""
        return self.regions.views(workspace)

    def tensor(self, array: np.ndarray, direct: bool, region: np.ndarray, load: bool) -> Any:
        """The kernel's float32 view of a caller's tensor: the array itself when ``direct``,
        else a workspace region in memory order (filled from ``array`` when ``load``)."""
        import numpy as np

        view = array if self.plane else channels_last(array)
        if direct:
            return view
        staged = region.reshape(view.shape)
        if load:
            if self.plane:
                np.copyto(staged, array, casting="unsafe")
            elif packed_float32_nchw(array):
                nchw_to_channels_last(array, staged)
            else:
                np.copyto(staged, view, casting="unsafe")
        return staged

    def store(self, staged: np.ndarray, array: np.ndarray) -> None:
        """Write a staged float32 result ((N, H, W, C), or (N, C, H, W) for the plane
        kernel) to the caller's logical array."""
        import numpy as np

        if self.plane:
            np.copyto(array, staged, casting="unsafe")
        elif packed_float32_nchw(array):
            channels_last_to_nchw(staged, array)
        else:
            np.copyto(channels_last(array), staged, casting="unsafe")

    def staged_weights(self, w: np.ndarray, region: np.ndarray, flip: bool = False) -> np.ndarray:
        """w (K, 1, FY, FX) as float32 (FY, FX, K), both taps reversed when ``flip``."""
        import numpy as np

        staged = region.reshape(*self.filt, self.k)
        taps = w.reshape(self.k, *self.filt).transpose(1, 2, 0)
        np.copyto(staged, taps[::-1, ::-1] if flip else taps, casting="unsafe")
        return staged

    def plane_weights(self, w: np.ndarray, region: np.ndarray, flip: bool) -> np.ndarray:
        """w (K, 1, FY, FX) as float32 (K, FY, FX), both taps reversed when ``flip``."""
        import numpy as np

        staged = region.reshape(self.k, *self.filt)
        taps = w.reshape(self.k, *self.filt)
        np.copyto(staged, taps[:, ::-1, ::-1] if flip else taps, casting="unsafe")
        return staged

    def run_plane(self, src: np.ndarray, wt: np.ndarray, dst: np.ndarray) -> None:
        """The NCHW plane kernels: forward (stride 1 or 2), or backward data as a forward
        pass of dy with the flipped filter (stride 1)."""
        from miocore_direct import depthwise_plane as generated

        _, sh, _, ph0, pw0, dh, dw = self.geometry
        if self.plane_bwd2:  # the flipped filter, the problem's own padding
            from miocore_direct.depthwise_plane_bwd import run

            run(src, wt, dst, ph0, pw0)
            return
        ph, pw = self.pads
        if sh == 2:
            generated.stride2_kernel(self.filt, src.shape[3], dst.shape[3])(src, wt, dst, ph, pw)
        else:
            generated.plane_kernel(self.filt[1], dw)(src, wt, dst, ph, dh, pw)

    def run_blocked(self, src: np.ndarray, wt: np.ndarray, dst: np.ndarray) -> None:
        """The register-blocked kernel: forward, or backward data as a forward pass of dy with
        the flipped filter (stride 1)."""
        from miocore_direct.depthwise_blocked import forward_kernel

        _, sh, sw, ph, pw, dh, dw = self.geometry
        if self.direction is Direction.BACKWARD_DATA:
            ph, pw = (self.filt[0] - 1) * dh - ph, (self.filt[1] - 1) * dw - pw
        if tiles_apply(self.mult, self.filt, sw, dw):  # 3x3 to 8x8: all-taps tiles
            from miocore_direct.depthwise_tiles import run

            run(src, wt, dst, sh, ph, dh, pw, sw, dw)
            return
        forward_kernel(self.filt[1], sw, dw, self.filt[0])(src, wt, dst, sh, ph, dh, pw)


class _DepthwiseInvoker(PooledInvoker):
    """Runs one problem's plan on the caller's arrays and workspace."""

    plan: _Plan

    def _run(self, params: InvokeParams) -> None:
        import numpy as np

        from miocore_direct import depthwise_kernels as kernels

        plan = self.plan
        w_region, x_region, y_region, partial_region = plan.buffers(params.workspace)
        geometry = plan.geometry
        if plan.plane and plan.direction is Direction.BACKWARD_WEIGHTS:
            from miocore_direct.depthwise_plane import plane_weights_kernel

            x = plan.tensor(params.x, plan.x_direct, x_region, load=True)
            dy = plan.tensor(params.y, plan.y_direct, y_region, load=True)
            taps = w_region.reshape(plan.k, *plan.filt)
            _, _, _, ph, pw, dh, dw = geometry
            plane_weights_kernel(plan.filt[1], dw)(x, dy, taps, ph, dh, pw)
            np.copyto(params.w, taps.reshape(params.w.shape), casting="unsafe")
        elif plan.plane:
            forward = plan.direction is Direction.FORWARD
            wt = plan.plane_weights(params.w, w_region, flip=not forward)
            src_array, dst_array = (params.x, params.y) if forward else (params.y, params.x)
            src_direct, dst_direct = (
                (plan.x_direct, plan.y_direct) if forward else (plan.y_direct, plan.x_direct)
            )
            src_region, dst_region = (x_region, y_region) if forward else (y_region, x_region)
            src = plan.tensor(src_array, src_direct, src_region, load=True)
            dst = plan.tensor(dst_array, dst_direct, dst_region, load=False)
            plan.run_plane(src, wt, dst)
            if not dst_direct:
                plan.store(dst, dst_array)
        elif plan.direction is Direction.FORWARD:
            wt = plan.staged_weights(params.w, w_region)
            x = plan.tensor(params.x, plan.x_direct, x_region, load=True)
            y = plan.tensor(params.y, plan.y_direct, y_region, load=False)
            if plan.blocked:
                plan.run_blocked(x, wt, y)
            else:
                kernels.forward_nhwc(x, wt, y, *geometry)
            if not plan.y_direct:
                plan.store(y, params.y)
        elif plan.phased:
            phases = plan.phase_plan()
            subs = phases.stage_weights(params.w, w_region)
            dy = plan.tensor(params.y, plan.y_direct, y_region, load=True)
            dx = plan.tensor(params.x, plan.x_direct, x_region, load=False)
            phases.run(dy, subs, dx)
            if not plan.x_direct:
                plan.store(dx, params.x)
        elif plan.direction is Direction.BACKWARD_DATA:
            wt = plan.staged_weights(params.w, w_region, flip=plan.blocked)
            dy = plan.tensor(params.y, plan.y_direct, y_region, load=True)
            dx = plan.tensor(params.x, plan.x_direct, x_region, load=False)
            if plan.blocked:
                plan.run_blocked(dy, wt, dx)
            else:
                kernels.backward_data_nhwc(dy, wt, dx, *geometry)
            if not plan.x_direct:
                plan.store(dx, params.x)
        else:
            x = plan.tensor(params.x, plan.x_direct, x_region, load=True)
            dy = plan.tensor(params.y, plan.y_direct, y_region, load=True)
            partial = partial_region.reshape(plan.parts, *plan.filt, plan.k)
            if plan.wrw_tiles:
                from miocore_direct.depthwise_wrw_tiles import run as run_wrw_tiles

                _, sh, sw, ph, pw, dh, dw = geometry
                run_wrw_tiles(x, dy, partial, sh, ph, dh, pw, sw, dw)
            else:
                kernels.backward_weights_nhwc(x, dy, partial, *geometry)
            total = np.sum(partial, axis=0, out=w_region.reshape(*plan.filt, plan.k))
            np.copyto(params.w.reshape(plan.k, *plan.filt), total.transpose(2, 0, 1), "unsafe")


def _threads_of(ctx: ExecutionContext) -> int:
    """Threads the kernels will get: numba's setting once it is loaded, else every core (wti
    must not pay numba's import, seconds on a loaded machine, for immediate mode's ranking)."""
    numba = sys.modules.get("numba")
    return numba.get_num_threads() if numba is not None else (os.cpu_count() or 1)


class DepthwiseDirectSolver(Solver):
    """Depthwise convolution (groups == C, any multiplier K = C * M) on the CPU.

    Every direction; NCHW and NHWC (x, y in the same layout family; other strides and types are
    staged in float32); float32/float16/bfloat16 with float32 accumulation; any 2-D filter,
    stride, padding and dilation. Workspace: the float32 weights, staged copies of tensors that
    cannot be used in place, and the backward-weights partial sums (see the README).
    """

    name = "direct.depthwise"
    numerical_notes = frozenset()
    algorithm = Algorithm.DIRECT
    is_dynamic = True
    # 1 (2026-11-26): all-taps and edge tiles, strided backward data by phases, NCHW stride-2
    # planes; the shipped CPU FindDb timed the register-blocked kernels of 2026-11-25, so the
    # hybrid modes measure this solver again where it was recorded (miocore.find.hit).
    # 2 (2026-11-26, session 12): interior columns split into even tiles (no overlapping
    # last tile), up to 8 pixels at stride 2 too; edge tiles at column stride 2; rows of up
    # to 16 columns as one tile: 1.4-2.2x at batch 8 on the 14x14 and 7x7 5x5/7x7 layers.
    # 3 (2026-11-26, session 14): small calls run on one thread where that is faster
    # (miocore_direct.pool_choice): waking the pool cost small layers up to 10x their time;
    # forward NCHW layers with short rows for their filter staged instead of on planes.
    # 4 (2026-11-27, session 16): stride-2 forward NCHW planes of even width without per-row
    # copies (depthwise_plane.source_plane_stride2_even): 1.3-2x on the suites' layers.
    # 5 (2026-11-27, session 17): channels-last 3x3 forward and stride-1 backward data on the
    # all-taps tiles (depthwise_tile_shapes.MIN_TAPS 9): 1.3-2x on MobileNetV2's layers;
    # channels-last backward weights on register tiles (depthwise_wrw_tiles.py): 1.3-3x.
    # 6 (2026-11-27, session 18): NCHW staging through 16x16 block transposes (channels in
    # blocks of 16); NCHW backward weights on 7-wide outputs, and forward and stride-1
    # backward data with short rows for the filter (5-wide up to 14, 7-wide up to 28),
    # staged to the tiles.
    revision = 6

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """2-D CPU problems whose groups equal the input channels, x and y in one layout."""
        if ctx.backend not in self.backends:
            return not_applicable(f"direct.depthwise runs on the CPU only, not on {ctx.backend!r}")
        if problem.is_transposed:
            return not_applicable("expects the canonical (mode='conv') form of the problem")
        if len(problem.in_spatial) != 2:
            return not_applicable("2-D convolutions only")
        if problem.groups != problem.c or problem.c == 1:
            return not_applicable(
                f"groups {problem.groups} != input channels {problem.c} (not depthwise)"
            )
        if problem.x.layout not in ("NCHW", "NHWC") or problem.y.layout != problem.x.layout:
            return not_applicable(
                f"x layout {problem.x.layout} and y layout {problem.y.layout} differ"
            )
        return APPLICABLE

    def compiles_for(self, ctx: ExecutionContext, problem: ConvProblem) -> bool:
        """Whether the first run on ``problem`` compiles a generated kernel (per filter
        geometry, and for the all-taps tiles per channel count: 5-40 s each) that neither
        this process nor numba's disk cache holds yet. DYNAMIC_HYBRID then measures this
        solver only where it is predicted to beat the ready ones (docs/find-modes.md).
        Builds nothing: generates the sources and looks for their cache files."""
        from miocore.backends.cpu_generated import generated_ready

        if not self.is_applicable(ctx, problem):
            return False
        return not all(generated_ready(*spec) for spec in _Plan(problem).generated())

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Bytes of the float32 weights, staged tensors and partial sums."""
        return _Plan(problem).workspace_bytes

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The plan for ``problem`` wrapped in an invoker."""
        answer = self.is_applicable(ctx, problem)
        if not answer:
            raise InvalidArgumentError(answer.reason, field="problem", value=problem.key)
        choose_wait_policy()  # before numba starts its OpenMP threads
        plan = _Plan(problem)
        invoker = _DepthwiseInvoker(plan)
        return ConvSolution(
            solver=self.name,
            workspace_size=plan.workspace_bytes,
            invoker_factory=lambda _k: invoker,
        )

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """The kernels' measured multiply-add rate (per thread) plus staging copies."""
        return ctx.wti(problem, _Plan(problem).predicted_ms(_threads_of(ctx)))
