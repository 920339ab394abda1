"""Time direct.taps against PyTorch's CPU convolution (oneDNN) on reference layers.

Run: ``python plugins/direct/benchmarks/bench_vs_torch.py [--repeats 7] [--only NAME]``.
torch is a benchmark-only dependency (``pip install torch``); both run with two threads.
Each repeat times torch and miocore back to back, so noise from other processes hits both;
the reported ratio is the median of the per-repeat ratios (miocore time / torch time).
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import numpy as np
import torch
from miocore_direct import TapsDirectSolver

from miocore import ConvProblem, InvokeParams
from miocore.backends.cpu import allocate_workspace
from miocore.reference import random_inputs
from miocore.testing import cpu_context

# name: (n, c, k, hw, filter, pad, stride, groups)
LAYERS = {
    "r50-conv2-3x3-b1": (1, 64, 64, 56, 3, 1, 1, 1),
    "r50-conv2-3x3-b8": (8, 64, 64, 56, 3, 1, 1, 1),
    "r50-conv3-3x3-b1": (1, 128, 128, 28, 3, 1, 1, 1),
    "r50-conv4-3x3-b8": (8, 256, 256, 14, 3, 1, 1, 1),
    "r50-conv5-3x3-b1": (1, 512, 512, 7, 3, 1, 1, 1),
    "r50-conv5-3x3-b8": (8, 512, 512, 7, 3, 1, 1, 1),
    "r50-1x1-64-256-b1": (1, 64, 256, 56, 1, 0, 1, 1),
    "r50-1x1-s2-256-512-b8": (8, 256, 512, 56, 1, 0, 2, 1),
    "r50-conv1-7x7-s2-b1": (1, 3, 64, 224, 7, 3, 2, 1),
    "vgg-3x3-64-224-b1": (1, 64, 64, 224, 3, 1, 1, 1),
    "vgg-3x3-256-56-b1": (1, 256, 256, 56, 3, 1, 1, 1),
    "vgg-3x3-512-14-b1": (1, 512, 512, 14, 3, 1, 1, 1),
    "mnv2-dw-3x3-144-56-b1": (1, 144, 144, 56, 3, 1, 1, 144),
    "mnv2-dw-3x3-s2-96-112-b1": (1, 96, 96, 112, 3, 1, 2, 96),
    "mnv2-dw-3x3-384-14-b8": (8, 384, 384, 14, 3, 1, 1, 384),
}


def _time(fn, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", default="")
    parser.add_argument("--layout", default="NCHW")
    parser.add_argument("--direction", default="forward")
    args = parser.parse_args()
    torch.set_num_threads(2)
    solver, ctx = TapsDirectSolver(), cpu_context()
    for name, (n, c, k, hw, f, pad, stride, groups) in LAYERS.items():
        if args.only and args.only not in name:
            continue
        p = ConvProblem.from_sizes(
            args.direction,
            n=n,
            c=c,
            k=k,
            in_spatial=(hw, hw),
            filter_spatial=(f, f),
            pads=(pad, pad),
            strides=(stride, stride),
            groups=groups,
            layout=args.layout,
        )
        data = random_inputs(p, 0)
        sol = solver.get_solution(ctx, p)
        invoker = sol.invoker_factory(())
        params = InvokeParams(problem=p, workspace=allocate_workspace(sol.workspace_size), **data)
        tx = torch.from_numpy(np.ascontiguousarray(data["x"]))
        tw = torch.from_numpy(np.ascontiguousarray(data["w"]))
        ty = torch.from_numpy(np.ascontiguousarray(data["y"]))
        if args.layout == "NHWC":
            tx = tx.to(memory_format=torch.channels_last)
            tw = tw.to(memory_format=torch.channels_last)
            ty = ty.to(memory_format=torch.channels_last)
        kw = dict(stride=stride, padding=pad, groups=groups)
        if args.direction == "forward":
            run_torch = partial(torch.nn.functional.conv2d, tx, tw, **kw)
        elif args.direction == "backward_data":
            run_torch = partial(torch.nn.grad.conv2d_input, tx.shape, tw, ty, **kw)
        else:
            run_torch = partial(torch.nn.grad.conv2d_weight, tx, tw.shape, ty, **kw)
        run_ours = partial(invoker, None, params)

        runs = max(2, min(20, int(2e9 / p.flops)))
        ratios, ours_ms, torch_ms = [], [], []
        for _ in range(args.repeats):
            t_torch = _time(run_torch, runs)
            t_ours = _time(run_ours, runs)
            ratios.append(t_ours / t_torch)
            ours_ms.append(t_ours)
            torch_ms.append(t_torch)
        print(
            f"{name:28s} ours {statistics.median(ours_ms):8.3f} ms  torch "
            f"{statistics.median(torch_ms):8.3f} ms  ratio {statistics.median(ratios):5.2f}  "
            f"ws {sol.workspace_size / 2**20:7.2f} MiB  wti {solver.wti(ctx, p):.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
