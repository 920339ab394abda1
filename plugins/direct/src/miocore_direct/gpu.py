"""``direct.gpu_naive``: the universal GPU fallback, as MIOpen's naive convolution kernels are.

One kernel per direction in ``kernels/naive_conv.cu`` solves every consistent problem: 2-D and
3-D, groups, dilation, any stride and padding, any layout and strides (sizes and strides are
kernel arguments), fp32/fp16/bf16 with fp32 accumulation. The kernels are compiled once per
element type, so the solver is dynamic: DYNAMIC_HYBRID find benchmarks it on a miss.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    Direction,
    ExecutionContext,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    Solver,
)
from miocore.backends.gpu_kernels import (
    DTYPE_OPTIONS,
    GPU_BACKENDS,
    KernelArgs,
    channels_last,
    grid_for,
    tensor5_bytes,
)

#: The plugin's kernel folder, declared through ``miocore_kernel_sources`` as ``direct``.
KERNEL_DIR = Path(__file__).parent / "kernels"
SOURCE = "direct/naive_conv.cu"
_KERNELS = {
    Direction.FORWARD: "naive_conv_fwd",
    Direction.BACKWARD_DATA: "naive_conv_bwd",
    Direction.BACKWARD_WEIGHTS: "naive_conv_wrw",
}
_BLOCK = 256


def conv_params_bytes(p: ConvProblem) -> bytes:
    """The ``MioConvParams`` struct of ``naive_conv.cu`` for canonical problem ``p``."""
    import numpy as np

    pads, strides, dils = (list(v) for v in (p.conv.pads, p.conv.strides, p.conv.dilations))
    if p.spatial_dims == 2:
        pads, strides, dils = [0, *pads], [1, *strides], [1, *dils]
    written = {
        Direction.FORWARD: p.y,
        Direction.BACKWARD_DATA: p.x,
        Direction.BACKWARD_WEIGHTS: p.w,
    }[p.direction]
    tail = np.array([p.groups, *pads, *strides, *dils, int(channels_last(written))], dtype=np.int64)
    return tensor5_bytes(p.x) + tensor5_bytes(p.w) + tensor5_bytes(p.y) + tail.tobytes()


class GpuNaiveDirectSolver(Solver):
    """Every consistent problem on CUDA and HIP devices; no workspace."""

    name = "direct.gpu_naive"
    numerical_notes = frozenset()
    algorithm = Algorithm.DIRECT
    is_dynamic = True
    backends = GPU_BACKENDS

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Always: the naive kernels are the universal fallback."""
        return APPLICABLE

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """About 1-3% of the roofline: one scalar multiply-add per load, no data reuse."""
        return 0.01 if problem.direction is Direction.BACKWARD_WEIGHTS else 0.03

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """One kernel for the problem's direction, compiled for its element type."""
        direction = problem.direction
        if direction is Direction.BACKWARD_WEIGHTS:
            grid = grid_for(problem.w.element_count, 1, ctx.device, waves=64)
        else:
            out = problem.y if direction is Direction.FORWARD else problem.x
            grid = grid_for(out.element_count, _BLOCK, ctx.device)
        kernel = KernelInfo(
            source=SOURCE,
            kernel_name=_KERNELS[direction],
            options=(DTYPE_OPTIONS[problem.dtype],),
            grid=(grid,),
            block=(_BLOCK,),
        )
        params = conv_params_bytes(problem)

        def factory(compiled: Any) -> Any:
            (launcher,) = compiled
            args = KernelArgs([("ptr", 0), ("ptr", 0), ("ptr", 0), ("bytes", params)])

            def invoker(handle: Any, ip: InvokeParams) -> None:
                args.set_pointers(ip.x.ptr, ip.w.ptr, ip.y.ptr)
                launcher.launch(args)

            return invoker

        return ConvSolution(
            solver=self.name, workspace_size=0, invoker_factory=factory, kernels=(kernel,)
        )
