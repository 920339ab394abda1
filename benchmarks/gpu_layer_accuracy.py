"""Each candidate's error on one layer, next to PyTorch's own cuDNN call: which solver a find
lets through that is far less accurate than the vendor's pick.

A backward-weights problem (x and dy random normal, channels-last) is found in NORMAL mode;
every ranked solution, and PyTorch's ``aten.convolution_backward`` on the same tensors, is
compared with a float64 result (PyTorch on the GPU in double): relative error as norms
(||a - ref|| / ||ref||), the measure ``gpu_models.py`` reports for a network's weight grads.

    python benchmarks/gpu_layer_accuracy.py --dtype bfloat16 --c 192 --hw 28 --f 7 --groups 192
"""

from __future__ import annotations

import argparse
import json

import torch

import miocore


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--c", type=int, default=192)
    parser.add_argument("--hw", type=int, default=28)
    parser.add_argument("--f", type=int, default=7)
    parser.add_argument("--groups", type=int, default=192)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    dtype = getattr(torch, args.dtype)
    pad = args.f // 2
    cl = torch.channels_last
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(args.n, args.c, args.hw, args.hw, device="cuda", generator=gen)
    dy = torch.randn(args.n, args.c, args.hw, args.hw, device="cuda", generator=gen)
    w_shape = (args.c, args.c // args.groups, args.f, args.f)
    xl, dyl = x.to(dtype).contiguous(memory_format=cl), dy.to(dtype).contiguous(memory_format=cl)
    w0 = torch.zeros(w_shape, device="cuda", dtype=dtype).contiguous(memory_format=cl)
    geometry = ([1, 1], [pad, pad], [1, 1], False, [0, 0], args.groups)
    exact = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), w0.double(), None, *geometry, [False, True, False]
    )[1]
    theirs = torch.ops.aten.convolution_backward(
        dyl, xl, w0, None, *geometry, [False, True, False]
    )[1]
    rows = {"pytorch": rel(theirs, exact)}
    h = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    p = miocore.ConvProblem.from_sizes(
        "backward_weights", n=args.n, c=args.c, k=args.c, in_spatial=(args.hw, args.hw),
        filter_spatial=(args.f, args.f), pads=(pad, pad), groups=args.groups,
        dtype=args.dtype, layout="NHWC",
    )  # fmt: skip
    found = h.find_solutions(p, find_mode="NORMAL")
    for solution in found:
        dw = torch.full(w_shape, float("nan"), device="cuda", dtype=dtype)
        dw = dw.contiguous(memory_format=cl)
        h.prepare(solution)(x=xl, w=dw, y=dyl)
        torch.cuda.synchronize()
        rows[solution.solver] = rel(dw, exact)
    print(json.dumps({"problem": p.key, "winner": found[0].solver, "rel_err": rows}, indent=1))
    print("skipped:", json.dumps(h.last_report.skipped, indent=1)[:3000])


if __name__ == "__main__":
    main()
