"""``igemm.gpu_mma`` (tensor cores) against cuDNN on ResNet-50's layers, NHWC, forward.

For every layer: the solver's default config and the best of a few configs from its tuning
space (each checked against cuDNN's result), and cuDNN through PyTorch on channels_last
tensors (``cudnn.benchmark`` on); device events around each of ``--runs`` runs after
``--warmup``; median ms. Also the dense matmul rate (``torch.matmul`` on 8192^3 matrices of
the same dtype), so that each time is also given as the fraction of that rate it reaches.

    python benchmarks/gpu_igemm_bench.py --out igemm.json
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
from gpu_vs_cudnn import events_median_ms, geomean
from shapes import RESNET50, problem

import miocore

SOLVER = "igemm.gpu_mma"


def _picks(solver: Any, ctx: Any, canon: Any, count: int) -> list[Any]:
    """The default, then the largest tiles at their deepest pipeline, then the rest."""
    default = solver.default_perf_config(ctx, canon)
    space = solver.perf_config_space(ctx, canon)
    best_depth: dict[tuple, Any] = {}
    for c in space:  # the space lists deeper pipelines first
        best_depth.setdefault((c["bm"], c["bn"], c["bk"], c["split"]), c)
    ordered = sorted(
        best_depth.values(),
        key=lambda c: (c["split"] != default["split"], -c["bm"] * c["bn"], c["bk"]),
    )
    return list(dict.fromkeys([default, *ordered]))[: count + 1]


def matmul_tflops(torch: Any, dtype: Any, size: int = 8192) -> float:
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    ms = events_median_ms(torch, lambda: torch.matmul(a, b), 3, 10)
    return 2 * size**3 / (ms * 1e-3) / 1e12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtypes", nargs="+", default=["float16"])
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--configs", type=int, default=6, help="configs tried besides default")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    solver = handle.registry.get(SOLVER).solver
    rows: list[dict[str, Any]] = []
    peaks = {}
    started = time.time()
    for dtype in args.dtypes:
        tdtype = getattr(torch, dtype)
        peak = peaks[dtype] = matmul_tflops(torch, tdtype)
        print(f"torch.matmul {dtype} 8192^3: {peak:.1f} TFLOP/s", flush=True)
        layers = [lay for lay in RESNET50 if not args.layers or lay.name in args.layers]
        # compile every layer's candidate configs at once (NVRTC in parallel)
        plans = []
        for layer in layers:
            p = problem(layer, args.batch, dtype=dtype, layout="NHWC")
            picks = _picks(solver, handle.context, p.canonical, args.configs)
            plans.append((layer, p, picks))
        kernels = [
            k
            for _, p, picks in plans
            for c in picks
            for k in solver.get_solution(handle.context, p.canonical, c).kernels
        ]
        t0 = time.time()
        failures = handle.backend.precompile(kernels)
        print(f"compiled {len(kernels)} kernels in {time.time() - t0:.1f} s", flush=True)
        for failure in list(failures.values())[:2]:
            print(failure[-2000:])
        for layer, p, picks in plans:
            cl = torch.channels_last
            x = torch.randn(p.x.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
            w = (torch.randn(p.w.lengths, device="cuda", dtype=tdtype) * 0.05).to(memory_format=cl)
            y = torch.empty(p.y.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
            row: dict[str, Any] = {"layer": layer.name, "dtype": dtype, "gflop": p.flops / 1e9}
            fn = lambda x=x, w=w, s=layer.stride, pd=layer.pad: torch.nn.functional.conv2d(  # noqa: E731
                x, w, stride=s, padding=pd
            )
            row["cudnn_ms"] = events_median_ms(torch, fn, args.warmup, args.runs)
            expected = fn().float()
            scale = float(expected.abs().max())
            timings = []
            for cfg in picks:
                try:
                    run = config_runner(handle, SOLVER, p, cfg, x, w, y)
                    y.fill_(float("nan"))
                    run()
                    err = float((y.float() - expected).abs().max()) / scale
                    ms = events_median_ms(torch, run, args.warmup, args.runs)
                    timings.append({"config": dict(cfg), "ms": ms, "rel_err": err})
                except Exception as exc:
                    timings.append(
                        {"config": dict(cfg), "error": f"{type(exc).__name__}: {exc}"[:300]}
                    )
            row["configs"] = timings
            ok = [t for t in timings if "ms" in t and t["rel_err"] < 5e-3]
            if timings and "ms" in timings[0]:
                row["default_ms"] = timings[0]["ms"]
                row["default_err"] = timings[0]["rel_err"]
            if ok:
                best = min(ok, key=lambda t: t["ms"])
                row["best_ms"], row["best_config"] = best["ms"], best["config"]
                row["ratio_default"] = row["cudnn_ms"] / row.get("default_ms", float("nan"))
                row["ratio_best"] = row["cudnn_ms"] / best["ms"]
                tflop = p.flops / 1e12
                row["frac_peak_best"] = tflop / (best["ms"] * 1e-3) / peak
                row["frac_peak_cudnn"] = tflop / (row["cudnn_ms"] * 1e-3) / peak
            rows.append(row)
            print(
                f"{layer.name:10s} {dtype} cudnn {row['cudnn_ms']:.4f} ms  default "
                f"{row.get('default_ms', float('nan')):.4f} "
                f"(err {row.get('default_err', float('nan')):.1e})"
                f"  best {row.get('best_ms', float('nan')):.4f} {row.get('best_config')}  "
                f"cudnn/miocore {row.get('ratio_best', float('nan')):.3f}  peak frac "
                f"{row.get('frac_peak_best', float('nan')):.3f} vs cudnn "
                f"{row.get('frac_peak_cudnn', float('nan')):.3f}",
                flush=True,
            )
        done = [r for r in rows if r["dtype"] == dtype and "ratio_best" in r]
        print(
            f"{dtype}: geomean cudnn/miocore best {geomean([r['ratio_best'] for r in done]):.3f}, "
            f"default {geomean([r['ratio_default'] for r in done]):.3f} over {len(done)} layers; "
            f"geomean peak fraction miocore {geomean([r['frac_peak_best'] for r in done]):.3f}, "
            f"cudnn {geomean([r['frac_peak_cudnn'] for r in done]):.3f}",
            flush=True,
        )
    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "batch": args.batch,
        "matmul_tflops": peaks,
        "seconds": time.time() - started,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
