"""``igemm.gpu_fma`` (exact fp32, CUDA-core FMA) against cuDNN exact fp32 on ResNet-50's layers.

Both sides exact fp32 (``torch.backends.cudnn.allow_tf32 = False``), channels_last / NHWC,
``cudnn.benchmark`` on. For every layer (batch 32) and direction (forward, backward data,
backward weights): cuDNN (forward ``F.conv2d``, backward ``aten.convolution_backward`` for one
gradient), the solver's default config and the best of a few configs from its space (each
checked against cuDNN's result). Device time: CUDA events around each of ``--runs`` runs after
``--warmup``, median, with a ``torch.cuda._sleep`` queued first so that launches wait behind it
(no Python launch overhead in the numbers). Also the cuBLAS SGEMM rate (exact fp32
``torch.matmul``, 8192^3) for reference; TFLOP/s are given per layer.

    python benchmarks/gpu_fma_bench.py --out fma.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from common import config_runner, geomean
from gpu_vs_cudnn import device_ms
from shapes import RESNET50, problem

import miocore

SOLVER = "igemm.gpu_fma"
DIRECTIONS = ("forward", "backward_data", "backward_weights")
#: Nominal fp32 FMA peak of an H200 SXM (132 SMs x 128 FMA/clk x 2 flops x 1.98 GHz).
FP32_PEAK_TFLOPS = 67.0


def torch_call(direction: str, stride: int, pad: int, x: Any, w: Any, y: Any) -> Any:
    """cuDNN through PyTorch for one direction; returns a callable giving the output tensor."""
    if direction == "forward":
        return lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)
    mask = [direction == "backward_data", direction == "backward_weights", False]
    index = 0 if direction == "backward_data" else 1
    aten = torch.ops.aten.convolution_backward
    st, pd = [stride] * 2, [pad] * 2
    return lambda: aten(y, x, w, None, st, pd, [1, 1], False, [0, 0], 1, mask)[index]


def picks(solver: Any, ctx: Any, canon: Any, count: int) -> list[Any]:
    """The default, then every tile at both bk with the default split, then split neighbours."""
    default = solver.default_perf_config(ctx, canon)
    space = solver.perf_config_space(ctx, canon)
    same_split = [c for c in space if c["split"] == default["split"]]
    near = [
        c
        for c in space
        if c["bm"] == default["bm"]
        and c["bn"] == default["bn"]
        and c["bk"] == default["bk"]
        and c["split"] in (default["split"] * 2, default["split"] * 4, default["split"] // 2)
    ]
    ordered = sorted(same_split, key=lambda c: (-c["bm"] * c["bn"], c["bk"]))
    return list(dict.fromkeys([default, *near, *ordered]))[: count + 1]


def sgemm_tflops(size: int = 8192) -> float:
    """cuBLAS exact-fp32 matmul rate."""
    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda")
    ms = device_ms(lambda: torch.matmul(a, b), 2, 5)
    return 2 * size**3 / ms / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--configs", type=int, default=6, help="configs tried besides default")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    solver = handle.registry.get(SOLVER).solver
    ctx = handle.context
    started = time.time()
    sgemm = sgemm_tflops()
    print(f"cuBLAS exact fp32 matmul 8192^3: {sgemm:.1f} TFLOP/s", flush=True)
    layers = [lay for lay in RESNET50 if not args.layers or lay.name in args.layers]
    plans = []
    for direction in args.directions:
        for layer in layers:
            p = problem(layer, args.batch, direction=direction, dtype="float32", layout="NHWC")
            plans.append((direction, layer, p, picks(solver, ctx, p.canonical, args.configs)))
    kernels = [
        k
        for _, _, p, cfgs in plans
        for c in cfgs
        for k in solver.get_solution(ctx, p.canonical, c).kernels
    ]
    t0 = time.time()
    failures = handle.backend.precompile(kernels)
    print(f"compiled {len(kernels)} kernels in {time.time() - t0:.1f} s", flush=True)
    for failure in list(failures.values())[:2]:
        print(failure[-2000:])
    rows: list[dict[str, Any]] = []
    cl = torch.channels_last
    for direction, layer, p, cfgs in plans:
        x = torch.randn(p.x.lengths, device="cuda").contiguous(memory_format=cl)
        w = (torch.randn(p.w.lengths, device="cuda") * 0.05).contiguous(memory_format=cl)
        y = torch.randn(p.y.lengths, device="cuda").contiguous(memory_format=cl)
        ref_fn = torch_call(direction, layer.stride, layer.pad, x, w, y)
        row: dict[str, Any] = {"direction": direction, "layer": layer.name, "gflop": p.flops / 1e9}
        row["cudnn_ms"] = device_ms(ref_fn, args.warmup, args.runs)
        expected = ref_fn().clone()
        scale = float(expected.abs().max())
        out = {"forward": y, "backward_data": x, "backward_weights": w}[direction]
        timings = []
        for cfg in cfgs:
            try:
                run = config_runner(handle, SOLVER, p, cfg, x, w, y)
                out.fill_(float("nan"))
                run()
                err = float((out - expected).abs().max()) / scale
                ms = device_ms(run, args.warmup, args.runs)
                timings.append({"config": dict(cfg), "ms": ms, "rel_err": err})
            except Exception as exc:  # report and go on: one bad config must not end the run
                timings.append({"config": dict(cfg), "error": f"{type(exc).__name__}: {exc}"[:300]})
        row["configs"] = timings
        ok = [t for t in timings if "ms" in t and t["rel_err"] < 1e-4]
        if timings and "ms" in timings[0]:
            row["default_ms"], row["default_err"] = timings[0]["ms"], timings[0]["rel_err"]
        if ok:
            best = min(ok, key=lambda t: t["ms"])
            row["best_ms"], row["best_config"] = best["ms"], best["config"]
            row["ratio_default"] = row["cudnn_ms"] / row.get("default_ms", math.nan)
            row["ratio_best"] = row["cudnn_ms"] / best["ms"]
            row["tflops_best"] = p.flops / best["ms"] / 1e9
            row["tflops_cudnn"] = p.flops / row["cudnn_ms"] / 1e9
        rows.append(row)
        bad = [t for t in timings if "error" in t or t.get("rel_err", 0) >= 1e-4]
        print(
            f"{direction:16s} {layer.name:9s} cudnn {row['cudnn_ms']:.4f} ms "
            f"({row.get('tflops_cudnn', math.nan):.1f} TF)  default "
            f"{row.get('default_ms', math.nan):.4f} (err {row.get('default_err', math.nan):.1e})"
            f"  best {row.get('best_ms', math.nan):.4f} ({row.get('tflops_best', math.nan):.1f} "
            f"TF) {row.get('best_config')}  cudnn/miocore default "
            f"{row.get('ratio_default', math.nan):.3f} best {row.get('ratio_best', math.nan):.3f}"
            + (f"  BAD {bad[:2]}" if bad else ""),
            flush=True,
        )
    for direction in [*args.directions, "all"]:
        done = [r for r in rows if "ratio_best" in r and direction in (r["direction"], "all")]
        best = geomean([r["ratio_best"] for r in done])
        print(
            f"{direction}: geomean cudnn/miocore best {best:.3f}"
            f", default {geomean([r['ratio_default'] for r in done]):.3f} over {len(done)} layers;"
            f" geomean TFLOP/s miocore {geomean([r['tflops_best'] for r in done]):.1f}, cudnn "
            f"{geomean([r['tflops_cudnn'] for r in done]):.1f} (fp32 FMA peak ~{FP32_PEAK_TFLOPS})",
            flush=True,
        )
    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "batch": args.batch,
        "sgemm_tflops": sgemm,
        "seconds": time.time() - started,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
