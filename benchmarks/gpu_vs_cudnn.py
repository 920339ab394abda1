"""miocore on a GPU against cuDNN through PyTorch: ResNet-50 layers at batch 32.

For every layer, dtype (fp32, fp16) and direction: miocore's Find-best solution, then both
sides timed the same way (device events around each of ``--runs`` back-to-back runs after
``--warmup`` runs; median). cuDNN runs through PyTorch with ``torch.backends.cudnn.benchmark``
on (forward: ``F.conv2d``; backward: ``aten.convolution_backward`` for one gradient). Also:
Find time cold (empty binary cache, fresh FindDb) and warm (filled cache, fresh FindDb) in two
child processes, and the host overhead of one ``immediate`` call (cached invoker) against one
``F.conv2d`` call on a tiny layer.

    python benchmarks/gpu_vs_cudnn.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import geomean
from shapes import RESNET50, problem

import miocore


def events_median_ms(torch: Any, fn: Any, warmup: int, runs: int) -> float:
    """Median device time of ``fn`` over ``runs`` runs (events around each), after warm-up."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def torch_call(torch: Any, direction: str, x: Any, w: Any, y: Any, stride: int, pad: int) -> Any:
    F = torch.nn.functional
    if direction == "forward":
        return lambda: F.conv2d(x, w, stride=stride, padding=pad)
    mask = [direction == "backward_data", direction == "backward_weights", False]
    aten = torch.ops.aten.convolution_backward

    def run() -> Any:
        return aten(y, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, mask)

    return run


def bench_layers(args: argparse.Namespace, torch: Any) -> list[dict[str, Any]]:
    torch.backends.cudnn.benchmark = True
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    rows = []
    layers = [layer for layer in RESNET50 if not args.layers or layer.name in args.layers]
    for dtype in args.dtypes:
        tdtype = getattr(torch, dtype)
        for layer in layers:
            p0 = problem(layer, args.batch, dtype=dtype)
            x = torch.randn(p0.x.lengths, device="cuda", dtype=tdtype)
            w = torch.randn(p0.w.lengths, device="cuda", dtype=tdtype) * 0.05
            y = torch.randn(p0.y.lengths, device="cuda", dtype=tdtype)
            for direction in args.directions:
                p = miocore.ConvProblem(direction, x=p0.x, w=p0.w, y=p0.y, conv=p0.conv)
                row: dict[str, Any] = {
                    "layer": layer.name,
                    "dtype": dtype,
                    "direction": direction,
                    "key": p.key,
                    "gflop": p.flops / 1e9,
                }
                try:
                    start = time.perf_counter()
                    sols = handle.find_solutions(p, x=x, w=w, y=y, find_mode="NORMAL")
                    row["find_s"] = time.perf_counter() - start
                    best = sols[0]
                    ws = handle.backend.allocate_workspace(best.workspace_size)
                    row["solver"] = best.solver
                    row["find_ms"] = best.time_ms
                    row["miocore_ms"] = events_median_ms(
                        torch,
                        lambda best=best, ws=ws, x=x, w=w, y=y: handle.run_solution(
                            best, x=x, w=w, y=y, workspace=ws
                        ),
                        args.warmup,
                        args.runs,
                    )
                    del ws
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                row["cudnn_ms"] = events_median_ms(
                    torch,
                    torch_call(torch, direction, x, w, y, layer.stride, layer.pad),
                    args.warmup,
                    args.runs,
                )
                if "miocore_ms" in row:
                    row["ratio"] = row["miocore_ms"] / row["cudnn_ms"]
                rows.append(row)
                print(json.dumps(row), flush=True)
            x = w = y = None
            torch.cuda.empty_cache()
    return rows


_FIND_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import miocore
    p = miocore.ConvProblem.from_sizes("forward", n=32, c=64, k=64, in_spatial=(56, 56),
                                       filter_spatial=(3, 3), pads=(1, 1), dtype=sys.argv[1])
    start = time.perf_counter()
    h = miocore.Handle("cuda")
    sols = h.find_solutions(p, find_mode="NORMAL")
    total = time.perf_counter() - start
    print(json.dumps({"find_s": total, "compiled": h.backend.stats["compiled"],
                      "disk_hits": h.backend.stats["disk_hits"], "best": sols[0].solver}))
    """
)


def bench_find_cold_warm() -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, db in (("cold", "db1"), ("warm", "db2")):
            env = {
                **os.environ,
                "MIOCORE_KERNEL_CACHE_PATH": f"{tmp}/kernels",
                "MIOCORE_USER_DB_PATH": f"{tmp}/{db}",
            }
            result = subprocess.run(
                [sys.executable, "-c", _FIND_CHILD, "float32"],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            out[label] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def bench_host_overhead(torch: Any, calls: int = 2000) -> dict[str, float]:
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    p = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=8, k=8, in_spatial=(8, 8), filter_spatial=(3, 3), pads=(1, 1)
    )
    x = torch.randn(p.x.lengths, device="cuda")
    w = torch.randn(p.w.lengths, device="cuda")
    y = torch.empty(p.y.lengths, device="cuda")
    solver = "direct.gpu_naive"
    handle.compile_solution(p, solver)

    def per_call_us(fn: Any) -> float:
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        best = math.inf
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / calls * 1e6)
        return best

    F = torch.nn.functional
    return {
        "miocore_immediate_us": per_call_us(lambda: handle.immediate(p, solver, x=x, w=w, y=y)),
        "torch_conv2d_us": per_call_us(lambda: F.conv2d(x, w, padding=1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument(
        "--directions", nargs="+", default=["forward", "backward_data", "backward_weights"]
    )
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-layers", action="store_true")
    args = parser.parse_args()
    import torch

    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "date": time.strftime("%Y-%m-%d"),
    }
    result["host_overhead"] = bench_host_overhead(torch)
    print(json.dumps(result["host_overhead"]), flush=True)
    result["find"] = bench_find_cold_warm()
    print(json.dumps(result["find"]), flush=True)
    if not args.skip_layers:
        rows = bench_layers(args, torch)
        result["layers"] = rows
        summary = {}
        for dtype in args.dtypes:
            for direction in args.directions:
                ratios = [
                    r["ratio"]
                    for r in rows
                    if r["dtype"] == dtype and r["direction"] == direction and "ratio" in r
                ]
                summary[f"{dtype}/{direction}"] = {
                    "geomean_ratio": geomean(ratios),
                    "layers": len(ratios),
                }
        result["summary"] = summary
        for name, s in summary.items():
            print(f"{name:28s} miocore/cuDNN geomean {s['geomean_ratio']:.2f}x over {s['layers']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
