"""Benchmark the igemm solvers against PyTorch's CPU convolution (oneDNN), 2 threads.

ResNet-50 layers at batch 1 and 8 (all three directions) and VGG-16 3x3 layers at batch 1.
For each layer it times torch and the default configuration (median of several runs, in the
same process, interleaved), and with ``--all`` every configuration of the search space, to
check the default rule. Prints one JSON object per measurement and a summary table.

    python plugins/igemm/bench/bench_igemm.py [--all] [--layout NCHW|NHWC] [--net resnet50|vgg16]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import numpy as np
import torch
from miocore_igemm import SOLVERS

from miocore import ConvProblem, InvokeParams
from miocore.testing import cpu_context

# (c, k, size, filter, stride, pad): unique convolutions of torchvision's ResNet-50 (v1.5).
RESNET50 = [
    (3, 64, 224, 7, 2, 3),
    (64, 64, 56, 1, 1, 0),
    (64, 64, 56, 3, 1, 1),
    (64, 256, 56, 1, 1, 0),
    (256, 64, 56, 1, 1, 0),
    (256, 128, 56, 1, 1, 0),
    (128, 128, 56, 3, 2, 1),
    (128, 512, 28, 1, 1, 0),
    (256, 512, 56, 1, 2, 0),
    (512, 128, 28, 1, 1, 0),
    (128, 128, 28, 3, 1, 1),
    (512, 256, 28, 1, 1, 0),
    (256, 256, 28, 3, 2, 1),
    (256, 1024, 14, 1, 1, 0),
    (512, 1024, 28, 1, 2, 0),
    (1024, 256, 14, 1, 1, 0),
    (256, 256, 14, 3, 1, 1),
    (1024, 512, 14, 1, 1, 0),
    (512, 512, 14, 3, 2, 1),
    (512, 2048, 7, 1, 1, 0),
    (1024, 2048, 14, 1, 2, 0),
    (2048, 512, 7, 1, 1, 0),
    (512, 512, 7, 3, 1, 1),
]
VGG16 = [
    (3, 64, 224, 3, 1, 1),
    (64, 64, 224, 3, 1, 1),
    (64, 128, 112, 3, 1, 1),
    (128, 128, 112, 3, 1, 1),
    (128, 256, 56, 3, 1, 1),
    (256, 256, 56, 3, 1, 1),
    (256, 512, 28, 3, 1, 1),
    (512, 512, 28, 3, 1, 1),
    (512, 512, 14, 3, 1, 1),
]
DIRS = {"forward": "F", "backward_data": "B", "backward_weights": "W"}


def _median_ms(fn, repeats: int, budget_s: float = 1.5) -> float:
    fn()
    times = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if time.perf_counter() - start > budget_s and len(times) >= 3:
            break
    return statistics.median(times)


def torch_fn(direction: str, layer, n: int, layout: str):
    c, k, size, f, s, p = layer
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    x = torch.randn(n, c, size, size).to(memory_format=fmt)
    w = torch.randn(k, c, f, f).to(memory_format=fmt)
    y = torch.nn.functional.conv2d(x, w, stride=s, padding=p)
    dy = torch.randn_like(y)
    if direction == "forward":
        return lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p)
    mask = [direction == "backward_data", direction == "backward_weights", False]

    def bwd():
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask
        )

    return bwd


def igemm_fn(solver, problem: ConvProblem, config):
    ctx = cpu_context()
    sol = solver.get_solution(ctx, problem, config)
    inv = sol.invoker_factory(())
    rng = np.random.default_rng(0)
    arrays = {}
    for name in ("x", "w", "y"):
        desc = getattr(problem, name)
        logical = "NCHW"
        mem = rng.standard_normal([desc.lengths[logical.index(a)] for a in desc.layout])
        arrays[name] = mem.astype(np.float32).transpose([desc.layout.index(a) for a in logical])
    ws = np.empty(sol.workspace_size, np.uint8) if sol.workspace_size else None
    params = InvokeParams(problem=problem, workspace=ws, **arrays)
    return lambda: inv(None, params), sol.workspace_size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="time every configuration too")
    ap.add_argument("--layout", default="NCHW")
    ap.add_argument("--net", default="both")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--directions", default="forward,backward_data,backward_weights")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(2)
    ctx = cpu_context()
    jobs = []
    if args.net in ("both", "resnet50"):
        jobs += [
            ("resnet50", n, layer) for n in map(int, args.batches.split(",")) for layer in RESNET50
        ]
    if args.net in ("both", "vgg16"):
        jobs += [("vgg16", 1, layer) for layer in VGG16]
    results = []
    for direction in args.directions.split(","):
        solver = next(s for s in SOLVERS if s.direction.value == direction)
        for net, n, layer in jobs:
            c, k, size, f, s, p = layer
            problem = ConvProblem.from_sizes(
                direction,
                n=n,
                c=c,
                k=k,
                in_spatial=(size, size),
                filter_spatial=(f, f),
                pads=(p, p),
                strides=(s, s),
                layout=args.layout,
            )
            tfn = torch_fn(direction, layer, n, args.layout)
            default = solver.default_perf_config(ctx, problem)
            configs = list(solver.perf_config_space(ctx, problem)) if args.all else [default]
            row = {"net": net, "n": n, "layer": layer, "dir": direction, "default": dict(default)}
            per = {}
            for cfg in configs:
                fn, ws = igemm_fn(solver, problem, cfg)
                t_torch = _median_ms(tfn, args.repeats)
                t_ig = _median_ms(fn, args.repeats)
                per[f"{cfg['strategy']}:{cfg['block']}"] = (t_ig, t_torch, ws)
            key = f"{default['strategy']}:{default['block']}"
            t_ig, t_torch, ws = per[key]
            best = min(per, key=lambda kk: per[kk][0] / per[kk][1])
            row.update(
                torch_ms=t_torch,
                igemm_ms=t_ig,
                ratio=t_torch / t_ig,
                workspace=ws,
                best=best,
                best_ratio=per[best][1] / per[best][0],
                wti=solver.wti(ctx, problem),
                all={kk: round(v[1] / v[0], 3) for kk, v in per.items()},
            )
            results.append(row)
            print(json.dumps(row), flush=True)
    print("\nratio = torch time / igemm time (>1: igemm faster)")
    groups: dict[tuple, list[float]] = {}
    for r in results:
        groups.setdefault((r["net"], r["n"], r["dir"]), []).append(r["ratio"])
    for (net, n, d), ratios in groups.items():
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(
            f"{net:9s} n={n} {d:17s} layers={len(ratios):2d} geomean={gm:.3f} "
            f"min={min(ratios):.2f} max={max(ratios):.2f}"
        )


if __name__ == "__main__":
    main()
