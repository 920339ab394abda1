"""One layer through its wgmma solver (``igemm.gpu_wgmma``, backward weights
``igemm.gpu_wgmma_wrw``; the default configuration) and through cuDNN, each run ``--runs``
times after a warm-up, for a profiler to attach to (Nsight Compute):

    ncu --kernel-name regex:'igemm_wgmma|sm90|conv' --launch-skip 2 --launch-count 4 \\
        --section SpeedOfLight --section WarpStateStats \\
        python benchmarks/gpu_wgmma_profile.py --layer conv4_2

Prints each side's device time (events, median) so the profile's run can be matched to it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch
from common import config_runner
from gpu_wgmma_bench import cudnn_call, solver_name
from shapes import RESNET50, VGG16, problem

import miocore


def _timed(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", default="conv4_2")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--direction", default="forward")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    layers = {lay.name: (lay, 16 if lay in VGG16 else 32) for lay in RESNET50 + VGG16}
    layer, batch = layers[args.layer]
    p = problem(layer, batch, args.direction, dtype=args.dtype, layout="NHWC")
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    solver = solver_name(args.dtype, args.direction)
    cfg = handle.registry.get(solver).solver.default_perf_config(handle.context, p.canonical)
    tdtype = getattr(torch, args.dtype)
    cl = torch.channels_last
    x = torch.randn(p.x.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
    w = (torch.randn(p.w.lengths, device="cuda", dtype=tdtype) * 0.05).to(memory_format=cl)
    y = torch.randn(p.y.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
    ours = config_runner(handle, solver, p, cfg, x, w, y)
    cudnn = cudnn_call(args.direction, x, w, y, layer)

    ours()
    cudnn()
    torch.cuda.synchronize()
    print(f"{args.layer} {args.dtype} {args.direction}, config {dict(cfg)}")
    print(f"wgmma {_timed(ours, args.runs):.4f} ms, cudnn {_timed(cudnn, args.runs):.4f} ms")


if __name__ == "__main__":
    main()
