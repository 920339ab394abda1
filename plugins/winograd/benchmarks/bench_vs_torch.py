"""Winograd vs PyTorch CPU convolution (oneDNN), 2 threads, on ResNet-50 and VGG-16 3x3 layers.

Usage: python benchmarks/bench_vs_torch.py [--direction forward|backward_data|backward_weights]
       [--layout NHWC|NCHW] [--configs default|all] [--repeat 5] [--only NAME]

Per layer, torch and miocore are timed in alternating blocks (a pause between blocks lets the
other library's spinning worker threads park), ``rounds`` times; the medians are compared.
The ratio is torch time / miocore time (> 1: Winograd is faster).
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from miocore_winograd import BLOCKS, TILES, WinogradRxS

from miocore import ConvProblem, InvokeParams, PerfConfig
from miocore.testing import cpu_context

LAYERS = [  # name, n, c, k, hw (3x3, pad 1, stride 1)
    ("r50.l1", 1, 64, 64, 56),
    ("r50.l2", 1, 128, 128, 28),
    ("r50.l3", 1, 256, 256, 14),
    ("r50.l4", 1, 512, 512, 7),
    ("r50.l1.b8", 8, 64, 64, 56),
    ("r50.l2.b8", 8, 128, 128, 28),
    ("r50.l3.b8", 8, 256, 256, 14),
    ("r50.l4.b8", 8, 512, 512, 7),
    ("vgg.1_1", 1, 3, 64, 224),
    ("vgg.1_2", 1, 64, 64, 224),
    ("vgg.2_1", 1, 64, 128, 112),
    ("vgg.2_2", 1, 128, 128, 112),
    ("vgg.3_1", 1, 128, 256, 56),
    ("vgg.3_2", 1, 256, 256, 56),
    ("vgg.4_1", 1, 256, 512, 28),
    ("vgg.4_2", 1, 512, 512, 28),
    ("vgg.5_1", 1, 512, 512, 14),
]


def _block(fn: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _torch_fn(direction: str, xt, wt, yt) -> Callable[[], object]:
    if direction == "forward":
        return functools.partial(torch.nn.functional.conv2d, xt, wt, padding=1)
    if direction == "backward_data":
        return functools.partial(torch.nn.grad.conv2d_input, xt.shape, wt, yt, padding=1)
    return functools.partial(torch.nn.grad.conv2d_weight, xt, wt.shape, yt, padding=1)


def main() -> None:
    """Run the comparison and print per-layer ratios and their geometric mean."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--direction", default="forward")
    ap.add_argument("--layout", default="NHWC")
    ap.add_argument("--configs", default="default")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(2)
    solver = WinogradRxS()
    ctx = cpu_context()
    ratios = []
    for name, n, c, k, hw in LAYERS:
        if args.only and args.only not in name:
            continue
        p = ConvProblem.from_sizes(
            args.direction,
            n=n,
            c=c,
            k=k,
            in_spatial=(hw, hw),
            filter_spatial=(3, 3),
            pads=(1, 1),
            layout=args.layout,
        )
        rng = np.random.default_rng(0)
        xt = torch.from_numpy(rng.standard_normal((n, c, hw, hw), dtype=np.float32))
        wt = torch.from_numpy(rng.standard_normal((k, c, 3, 3), dtype=np.float32))
        yt = torch.from_numpy(rng.standard_normal((n, k, hw, hw), dtype=np.float32))
        if args.layout == "NHWC":
            xt, wt, yt = (t.contiguous(memory_format=torch.channels_last) for t in (xt, wt, yt))
        xa, wa, ya = xt.numpy(), wt.numpy(), yt.numpy()
        tfn = _torch_fn(args.direction, xt, wt, yt)
        configs = (
            [solver.default_perf_config(ctx, p)]
            if args.configs == "default"
            else [PerfConfig(tile=t, block=b) for t in TILES for b in BLOCKS]
        )
        best = None
        with torch.no_grad():
            for cfg in configs:
                sol = solver.get_solution(ctx, p, cfg)
                params = InvokeParams(
                    problem=p,
                    x=xa,
                    w=wa,
                    y=ya,
                    workspace=np.empty(sol.workspace_size, np.uint8),
                )
                mfn = functools.partial(sol.invoker_factory(()), None, params)
                tt, mt = [], []
                for _ in range(args.rounds):
                    tfn()
                    tt += _block(tfn, args.repeat)
                    time.sleep(0.2)
                    mfn()
                    mt += _block(mfn, args.repeat)
                    time.sleep(0.2)
                tmed, mmed = statistics.median(tt), statistics.median(mt)
                if best is None or mmed / tmed < best[1] / best[0]:
                    best = (tmed, mmed, min(tt), min(mt), dict(cfg))
        tmed, mmed, tmin, mmin, cfg = best
        ratios.append(tmed / mmed)
        print(
            f"{name:10s} torch {tmed:8.2f} ms (min {tmin:7.2f})  winograd {mmed:8.2f} ms"
            f" (min {mmin:7.2f})  ratio {tmed / mmed:5.2f}  {cfg}",
            flush=True,
        )
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geomean ratio (torch/winograd) over {len(ratios)} layers: {geo:.3f}")


if __name__ == "__main__":
    main()
