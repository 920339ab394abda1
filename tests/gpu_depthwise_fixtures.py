"""What the CPU-side tests of ``direct.gpu_depthwise`` share: an execution context that
describes a CUDA device (132 SMs by default) without one, a small depthwise problem, and the
solver's default for a 96-channel NHWC layer."""

from __future__ import annotations

import dataclasses

import miocore
from miocore.testing import cpu_context


def cuda_context(sms: int = 132) -> miocore.ExecutionContext:
    """A context whose device says CUDA with ``sms`` compute units (no device is opened)."""
    device = dataclasses.replace(cpu_context().device, backend="cuda", compute_units=sms)
    return miocore.ExecutionContext(device=device)


def depthwise_problem(direction: str = "forward", **kw) -> miocore.ConvProblem:
    """A 2 x 32 x 14 x 14 depthwise 3x3 problem; ``kw`` overrides ``from_sizes`` arguments."""
    args = dict(n=2, c=32, k=32, in_spatial=(14, 14), filter_spatial=(3, 3), pads=(1, 1), groups=32)
    args.update(kw)
    return miocore.ConvProblem.from_sizes(direction, **args)


def nhwc_default(
    direction: str, f: int, stride: int, hw: int, dtype: str, plain: bool = False
) -> miocore.PerfConfig:
    """``direct.gpu_depthwise``'s default for a 96-channel NHWC depthwise layer of 8 images
    (checked to be in its space); ``plain``: ``dw_nhwc``'s rule, where a staged tile's rule
    may take the layer (``gpu_depthwise_defaults.default_nhwc_plain``)."""
    from miocore_direct.gpu_depthwise import GpuDepthwiseSolver
    from miocore_direct.gpu_depthwise_defaults import default_nhwc_plain

    s, ctx = GpuDepthwiseSolver(), cuda_context()
    p = depthwise_problem(
        direction, n=8, c=96, k=96, groups=96, in_spatial=(hw, hw), filter_spatial=(f, f),
        pads=(f // 2, f // 2), strides=(stride, stride), dtype=dtype, layout="NHWC",
    ).canonical  # fmt: skip
    cfg = default_nhwc_plain(p) if plain else s.default_perf_config(ctx, p)
    assert cfg in s.perf_config_space(ctx, p)
    return cfg


def macros(kernel: miocore.KernelInfo) -> dict[str, str]:
    """A kernel's ``-DMIO_*`` options, name to value."""
    pairs = (o[2:].partition("=") for o in kernel.options if o.startswith("-DMIO_"))
    return {name: value for name, _, value in pairs}
