"""``direct.gpu_tiled`` against ``direct.gpu_naive`` and cuDNN on ResNet-50 3x3 layers.

For every layer, dtype and direction: the tiled solver with its default config and the best of
a handful of configs from its tuning space (each checked against cuDNN's result), the naive
solver, and cuDNN through PyTorch (``cudnn.benchmark`` on); device events around each of
``--runs`` runs after ``--warmup``; median ms.

    python benchmarks/gpu_tiled_bench.py --out tiled.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import config_runner
from gpu_vs_cudnn import events_median_ms, geomean, torch_call
from shapes import RESNET50, problem

import miocore

LAYERS = ("l1.3x3", "l2.3x3s2", "l2.3x3", "l3.3x3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument(
        "--directions", nargs="+", default=["forward", "backward_data", "backward_weights"]
    )
    parser.add_argument("--configs", type=int, default=6, help="tiled configs tried")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    tiled = handle.registry.get("direct.gpu_tiled").solver
    rows = []
    for dtype in args.dtypes:
        tdtype = getattr(torch, dtype)
        for layer in (lay for lay in RESNET50 if lay.name in LAYERS):
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
                    "gflop": p.flops / 1e9,
                }
                ref_fn = torch_call(torch, direction, x, w, y, layer.stride, layer.pad)
                row["cudnn_ms"] = events_median_ms(torch, ref_fn, args.warmup, args.runs)
                out = ref_fn()
                if direction == "forward":
                    expected = out.float()
                else:
                    expected = (out[0] if direction == "backward_data" else out[1]).float()
                written = {"forward": "y", "backward_data": "x", "backward_weights": "w"}
                target = {"x": x, "w": w, "y": y}[written[direction]]
                keep = target.clone()
                try:
                    sol = handle.compile_solution(p, "direct.gpu_naive")
                    row["naive_ms"] = events_median_ms(
                        torch,
                        lambda sol=sol, x=x, w=w, y=y: handle.run_solution(sol, x=x, w=w, y=y),
                        args.warmup,
                        max(3, args.runs // 3),
                    )
                except Exception as exc:
                    row["naive_error"] = f"{type(exc).__name__}: {exc}"[:200]
                canon = p.canonical
                space = tiled.perf_config_space(handle.context, canon)
                default = tiled.default_perf_config(handle.context, canon)
                picks = [default] + [c for c in space[:: max(1, len(space) // args.configs)]]
                picks = list(dict.fromkeys(picks))[: args.configs + 1]
                kernels = [
                    k for c in picks for k in tiled.get_solution(handle.context, canon, c).kernels
                ]
                handle.backend.precompile(kernels)
                timings = []
                for cfg in picks:
                    try:
                        fn = config_runner(handle, "direct.gpu_tiled", p, cfg, x, w, y)
                        fn()
                        torch.cuda.synchronize()
                        got = target.float()
                        err = float((got - expected).norm() / expected.norm())
                        ms = events_median_ms(torch, fn, args.warmup, args.runs)
                        timings.append({"config": dict(cfg), "ms": ms, "rel_err": err})
                    except Exception as exc:
                        timings.append({"config": dict(cfg), "error": str(exc)[:200]})
                target.copy_(keep)
                row["tiled"] = timings
                ok = [t for t in timings if "ms" in t]
                if ok:
                    row["tiled_default_ms"] = ok[0]["ms"] if timings[0] is ok[0] else None
                    best = min(ok, key=lambda t: t["ms"])
                    row["tiled_best_ms"] = best["ms"]
                    row["tiled_best_config"] = best["config"]
                    row["tiled_max_rel_err"] = max(t["rel_err"] for t in ok)
                    row["best_vs_cudnn"] = best["ms"] / row["cudnn_ms"]
                    if "naive_ms" in row:
                        row["naive_vs_best"] = row["naive_ms"] / best["ms"]
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "tiled"}), flush=True)
            x = w = y = None
            torch.cuda.empty_cache()
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "date": time.strftime("%Y-%m-%d"),
        "layers": rows,
    }
    for dtype in args.dtypes:
        for direction in args.directions:
            sel = [r for r in rows if r["dtype"] == dtype and r["direction"] == direction]
            a = [r["best_vs_cudnn"] for r in sel if "best_vs_cudnn" in r]
            b = [r["naive_vs_best"] for r in sel if "naive_vs_best" in r]
            print(
                f"{dtype}/{direction}: tiled/cuDNN geomean {geomean(a):.2f}x, "
                f"naive/tiled geomean {geomean(b):.2f}x over {len(a)} layers"
            )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
