"""Benchmark fft.overlap_save against PyTorch's CPU convolution (oneDNN, 2 threads).

Usage: ``python plugins/fft/benchmarks/bench_fft.py [--quick]``. Prints, per problem and
direction, the median time of every perf config, the default's, torch's, and their ratio
(torch time / fft time: above 1 means FFT is faster). PyTorch is a benchmark-only dependency.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from miocore_fft import FftOverlapSave

from miocore import ConvProblem, InvokeParams
from miocore.backends.cpu import allocate_workspace, empty_for
from miocore.reference import random_inputs
from miocore.testing import cpu_context

PROBLEMS = {
    "resnet50 stem 7x7 (stride 1 variant), n=1": dict(
        n=1, c=3, k=64, in_spatial=(224, 224), filter_spatial=(7, 7), pads=(3, 3)
    ),
    "inception-v3 5x5 48->64 35x35, n=8": dict(
        n=8, c=48, k=64, in_spatial=(35, 35), filter_spatial=(5, 5), pads=(2, 2)
    ),
    "resnet 3x3 64->64 56x56, n=1": dict(
        n=1, c=64, k=64, in_spatial=(56, 56), filter_spatial=(3, 3), pads=(1, 1)
    ),
    "11x11 32->32 112x112, n=1": dict(
        n=1, c=32, k=32, in_spatial=(112, 112), filter_spatial=(11, 11), pads=(5, 5)
    ),
    "convnext dw 7x7 96 56x56, n=1": dict(
        n=1, c=96, k=96, in_spatial=(56, 56), filter_spatial=(7, 7), pads=(3, 3), groups=96
    ),
}


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn`` after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def torch_ms(p: ConvProblem, repeats: int) -> float:
    """PyTorch's time for the same direction (conv2d / its two gradients)."""
    import torch

    torch.set_num_threads(2)
    x = torch.randn(p.x.lengths)
    w = torch.randn(p.w.lengths)
    dy = torch.randn(p.y.lengths)
    conv = dict(padding=p.conv.pads, dilation=p.conv.dilations, groups=p.groups)
    f = torch.nn.functional.conv2d if p.spatial_dims == 2 else torch.nn.functional.conv3d
    grad = torch.nn.grad
    with torch.no_grad():
        if p.direction.value == "forward":
            return median_ms(lambda: f(x, w, **conv), repeats)
        if p.direction.value == "backward_data":
            gi = grad.conv2d_input if p.spatial_dims == 2 else grad.conv3d_input
            return median_ms(lambda: gi(x.shape, w, dy, **conv), repeats)
        gw = grad.conv2d_weight if p.spatial_dims == 2 else grad.conv3d_weight
        return median_ms(lambda: gw(x, w.shape, dy, **conv), repeats)


def fft_ms(p: ConvProblem, config: object, repeats: int) -> float:
    """Our time for one perf config (workspace allocated once, outside the timing)."""
    solver = FftOverlapSave()
    sol = solver.get_solution(cpu_context(), p, config)  # type: ignore[arg-type]
    arrays = random_inputs(p, 0)
    arrays[p.direction.output_tensor] = empty_for(getattr(p, p.direction.output_tensor))
    ws = allocate_workspace(sol.workspace_size)
    invoker = sol.invoker_factory(())
    params = InvokeParams(problem=p, workspace=ws, **arrays)
    return median_ms(lambda: invoker(None, params), repeats)


def main() -> None:
    """Run the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="forward only, 3 repeats")
    parser.add_argument("--configs", action="store_true", help="time every perf config")
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    ctx = cpu_context()
    solver = FftOverlapSave()
    directions = ["forward"] if args.quick else ["forward", "backward_data", "backward_weights"]
    np.random.seed(0)
    for label, sizes in PROBLEMS.items():
        for d in directions:
            p = ConvProblem.from_sizes(d, **sizes)
            default = solver.default_perf_config(ctx, p)
            configs = list(solver.perf_config_space(ctx, p)) if args.configs else [default]
            timed = {c["fft_len"]: fft_ms(p, c, repeats) for c in configs}
            t_torch = torch_ms(p, repeats)
            best = min(timed, key=timed.__getitem__)
            t_def = timed[default["fft_len"]]
            pred = solver.predicted_ms(ctx, p)
            cfgs = " ".join(f"{k}:{v:.1f}" for k, v in sorted(timed.items()))
            print(
                f"{label:44s} {d:16s} default={default['fft_len']:3d} {t_def:8.2f} ms "
                f"best={best:3d} torch={t_torch:8.2f} ms torch/fft={t_torch / t_def:5.2f} "
                f"pred={pred:7.2f} ms wti={solver.wti(ctx, p):.3f} [{cfgs}]",
                flush=True,
            )


if __name__ == "__main__":
    main()
