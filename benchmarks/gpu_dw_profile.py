"""One call of ``direct.gpu_depthwise`` (its default config, or ``--config``) and of cuDNN on
chosen depthwise layers, one direction (``--direction``, backward weights by default) and
layout, inside a profiler range: run it under Nsight Compute to read where each kernel's time
goes, e.g.

    ncu --clock-control none --profile-from-start off -k regex:"dw_|grad|conv" \\
        --section SpeedOfLight --section WarpStateStats python3 gpu_dw_profile.py \\
        --direction forward --layers dw32s1@112 dw144s2@56

Everything (compilation, cuDNN's benchmark-mode choice) is warmed up before the range.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from common import config_runner
from gpu_depthwise_bench import add_experiment_options, apply_experiment_options, cudnn_call
from shapes import SUITES, problem

import miocore
from miocore import PerfConfig

SOLVER = "direct.gpu_depthwise"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="mobilenetv2", choices=sorted(SUITES))
    parser.add_argument("--layers", nargs="+", required=True, help="layer names of the suite")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--config", type=json.loads, default=None, help="a perf config (JSON)")
    parser.add_argument("--no-cudnn", action="store_true")
    parser.add_argument(
        "--direction",
        default="backward_weights",
        choices=("forward", "backward_data", "backward_weights"),
    )
    parser.add_argument("--layout", default="NHWC", choices=("NHWC", "NCHW"))
    add_experiment_options(parser)
    args = parser.parse_args()
    apply_experiment_options(args)
    torch.backends.cudnn.benchmark = True
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    solver = handle.registry.get(SOLVER).solver
    calls = []
    for layer in (lay for lay in SUITES[args.suite] if lay.name in args.layers):
        p = problem(layer, args.batch, args.direction, dtype=args.dtype, layout=args.layout)
        cfg = PerfConfig(**args.config) if args.config else None
        cfg = cfg or solver.default_perf_config(handle.context, p.canonical)
        dt = getattr(torch, args.dtype)
        memory = torch.channels_last if args.layout == "NHWC" else torch.contiguous_format
        x, w, y = (
            torch.randn(t.lengths, device="cuda").to(dt).contiguous(memory_format=memory)
            for t in (p.x, p.w, p.y)
        )
        ours = config_runner(handle, SOLVER, p, cfg, x, w, y)
        theirs = cudnn_call(args.direction, x, w, y, layer)
        for fn in (ours, theirs, ours, theirs):  # compiled, benchmarked, warm
            fn()
        calls.append((layer.name, dict(cfg), ours, theirs))
        print(layer.name, dict(cfg), flush=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _, _, ours, theirs in calls:
        ours()
        if not args.no_cudnn:
            theirs()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
