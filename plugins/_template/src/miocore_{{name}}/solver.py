"""``{{name}}.direct``: forward convolution, one matrix product per filter tap.

The input is copied, zero-padded and converted to float32, into the workspace (so the workspace
the solver declares is exactly what it uses); then every filter tap adds the product of a
strided view of that copy with the tap's weights to a float32 accumulator, ``block_k`` output
channels at a time (the performance config). Any 2-D or 3-D problem, groups, strides,
dilations, layouts and data types. On GPU backends the solution is one kernel,
``kernels/{{name}}_direct.cu``.

numpy is imported where the solver computes (``_forward``), not with the module: every process
registers the plugin, and a FindDb hit should not pay for numpy's import.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import miocore
from miocore import (
    APPLICABLE,
    Algorithm,
    ConvProblem,
    ConvSolution,
    Direction,
    ExecutionContext,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    TunableSolver,
    not_applicable,
)

#: Output channels per step that the performance-config space offers.
BLOCKS = (4, 8, 16, 32)

#: GPU threads per block of the kernel.
THREADS = 256


class {{Name}}Direct(TunableSolver):
    """Forward convolution as per-tap matrix products over a padded float32 copy."""

    # The name is forever: databases store it. Change it only with the algorithm's results.
    name = "{{name}}.direct"
    algorithm = Algorithm.DIRECT
    is_dynamic = True  # nothing is compiled per problem on the CPU
    # Add "cuda" and "hip" once the GPU path below has run on a device (see the README).
    backends = frozenset({"cpu"})

    # -- what it solves ------------------------------------------------------------------

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        """Forward problems only; sizes only, no allocation (it runs for every problem)."""
        if problem.direction is not Direction.FORWARD:
            return not_applicable(f"{self.name} solves forward problems, not {problem.direction}")
        return APPLICABLE

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Predicted fraction of peak: the roofline at a third of the compute rate."""
        predicted = ctx.roofline_ms(
            problem.flops, problem.bytes_moved, problem.dtype, efficiency=0.3
        )
        return ctx.wti(problem, predicted)

    # -- performance configs -------------------------------------------------------------

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        """``block_k`` values up to the output channels per group, largest first."""
        k_per_group = problem.k // problem.groups
        blocks = sorted({min(b, k_per_group) for b in BLOCKS}, reverse=True)
        return [PerfConfig(block_k=b) for b in blocks]

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        """The largest block: fewest, biggest matrix products."""
        return self.perf_config_space(ctx, problem)[0]

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """Exactly the configs of the space (a stale PerfDb entry is rejected)."""
        return config in self.perf_config_space(ctx, problem)

    # -- workspace and solution ----------------------------------------------------------

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """The padded float32 copy of the input on the CPU; nothing on a GPU."""
        if ctx.backend != "cpu":
            return 0
        return math.prod(_padded_shape(problem)) * 4

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """The CPU invoker, or the kernel to compile on a GPU backend."""
        config = perf_config or self.default_perf_config(ctx, problem)
        workspace = self.workspace_size(ctx, problem, config)
        if ctx.backend != "cpu":
            return ConvSolution(
                solver=self.name,
                workspace_size=workspace,
                invoker_factory=_gpu_invoker_factory(problem),
                kernels=(gpu_kernel(problem),),
                perf_config=config,
            )
        block_k = int(config["block_k"])

        def factory(_compiled: Any) -> Any:
            def invoker(_handle: Any, params: InvokeParams) -> None:
                _forward(params, block_k)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=workspace,
            invoker_factory=factory,
            perf_config=config,
        )


def _padded_shape(p: ConvProblem) -> tuple[int, ...]:
    pads = p.conv.pads
    return (p.n, p.c, *(s + 2 * q for s, q in zip(p.in_spatial, pads, strict=True)))


def _forward(params: InvokeParams, block_k: int) -> None:
    import numpy as np

    p = params.problem
    g, n = p.groups, p.n
    cg, kg = p.c // g, p.k // g
    shape = _padded_shape(p)
    size = math.prod(shape)
    if params.workspace is None or params.workspace.nbytes < 4 * size:
        have = 0 if params.workspace is None else params.workspace.nbytes
        raise miocore.WorkspaceError(
            f"{4 * size} bytes are needed", field="workspace.nbytes", value=have
        )
    # The workspace is the padded float32 copy of x: nothing else is allocated for it.
    padded = params.workspace.view(np.uint8)[: 4 * size].view(np.float32).reshape(shape)
    padded[...] = 0
    crop = tuple(slice(q, q + s) for q, s in zip(p.conv.pads, p.in_spatial, strict=True))
    padded[(slice(None), slice(None), *crop)] = params.x
    weights = params.w.astype(np.float32).reshape(g, kg, cg, *p.filter_spatial)
    acc = np.zeros((n, g, kg, *p.out_spatial), np.float32)
    spatial = "dhw"[-len(p.out_spatial) :]
    for tap in itertools.product(*(range(f) for f in p.filter_spatial)):
        view = padded[(slice(None), slice(None), *_tap_slices(p, tap))]
        part = view.reshape(n, g, cg, *p.out_spatial)
        for k0 in range(0, kg, block_k):
            w_tap = weights[(slice(None), slice(k0, k0 + block_k), slice(None), *tap)]
            acc[:, :, k0 : k0 + block_k] += np.einsum(
                f"ngc{spatial},gkc->ngk{spatial}", part, w_tap, optimize=True
            )
    params.y[...] = acc.reshape(n, p.k, *p.out_spatial).astype(params.y.dtype)


def _tap_slices(p: ConvProblem, tap: tuple[int, ...]) -> list[slice]:
    out = []
    for i, t in enumerate(tap):
        start = t * p.conv.dilations[i]
        stop = start + p.conv.strides[i] * (p.out_spatial[i] - 1) + 1
        out.append(slice(start, stop, p.conv.strides[i]))
    return out


# -- GPU -----------------------------------------------------------------------------------------

_DTYPE_FLAG = {"float32": "-DMIO_DTYPE_FP32", "float16": "-DMIO_DTYPE_FP16"}
_DTYPE_FLAG["bfloat16"] = "-DMIO_DTYPE_BF16"


def gpu_kernel(problem: ConvProblem) -> KernelInfo:
    """The kernel of ``problem`` on a GPU backend: one thread per output element (grid-stride)."""
    total = math.prod(problem.y.lengths)
    blocks = max(1, min(65535, -(-total // THREADS)))
    return KernelInfo(
        source="{{name}}_direct.cu",
        kernel_name="{{name}}_direct_fwd",
        options=(_DTYPE_FLAG[problem.dtype.value],),
        grid=(blocks,),
        block=(THREADS,),
    )


def _gpu_invoker_factory(problem: ConvProblem) -> Any:
    """Launch arguments: the three tensors, then lengths, element strides and conv params
    padded to 3 spatial dimensions (2-D runs as 3-D with depth 1), as the kernel expects."""

    def as3(values: tuple[int, ...], fill: int) -> list[int]:
        return [fill] * (3 - len(values)) + list(values)

    def dims(desc: Any) -> list[int]:
        n, c, *spatial = desc.lengths
        sn, sc, *sspatial = desc.strides
        return [n, c, *as3(tuple(spatial), 1), sn, sc, *as3(tuple(sspatial), 0)]

    conv = problem.conv
    scalars = [
        *dims(problem.x),
        *dims(problem.w),
        *dims(problem.y),
        problem.groups,
        *as3(conv.pads, 0),
        *as3(conv.strides, 1),
        *as3(conv.dilations, 1),
    ]

    def factory(compiled: Any) -> Any:
        (kernel,) = compiled
        info = gpu_kernel(problem)

        def invoker(handle: Any, params: InvokeParams) -> None:
            handle.backend.launch(
                kernel, info.grid, info.block, (params.x, params.w, params.y, *scalars)
            )

        return invoker

    return factory
