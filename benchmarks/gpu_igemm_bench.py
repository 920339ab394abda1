"""``igemm.gpu_mma`` (tensor cores) against cuDNN on ResNet-50's layers, NHWC, forward and
backward data.

For every layer and direction: the solver's default config and the best of its tuning space
(split-K limited to the default's; each result checked against cuDNN's), and cuDNN through
PyTorch on channels_last tensors (``cudnn.benchmark`` on; backward data through
``aten.convolution_backward``). Timing: ``torch.cuda._sleep`` is enqueued first so that the
launches queue up behind it and the events measure device time, not Python launch overhead;
events around each of ``--runs`` runs after ``--warmup``; median ms. Also the dense matmul
rate (``torch.matmul`` on 8192^3 matrices of the same dtype, same run), so that each time is
also given as TFLOP/s and as the fraction of that rate.

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

import torch  # imported at module import time: a lazy import mid-session failed on the device
from common import time_configs
from gpu_vs_cudnn import device_ms, geomean
from shapes import RESNET50, problem

import miocore

SOLVER = "igemm.gpu_mma"
DIRECTIONS = ("forward", "backward_data")


def _picks(solver: Any, ctx: Any, canon: Any, count: int) -> list[Any]:
    """The default, then the space (split-K only at the default's split), 128-row tiles at 3
    stages first."""
    default = solver.default_perf_config(ctx, canon)
    space = [c for c in solver.perf_config_space(ctx, canon) if c["split"] in (1, default["split"])]
    # the first device sweep: 128-row tiles at 3 stages won most layers, 256 x 128 none
    space.sort(key=lambda c: (c["bm"] != 128, c["stages"] != 3, -c["bn"], c["bk"], c["split"]))
    return list(dict.fromkeys([default, *space]))[: count + 1]


def matmul_tflops(dtype: Any, size: int = 8192) -> float:
    """Dense matmul rate of ``dtype`` (the reference the fractions are of)."""
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    ms = device_ms(lambda: torch.matmul(a, b), 3, 10)
    return 2 * size**3 / (ms * 1e-3) / 1e12


def _cudnn(direction: str, x: Any, w: Any, y: Any, stride: int, pad: int) -> Any:
    if direction == "forward":
        return lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)
    aten = torch.ops.aten.convolution_backward
    mask = [True, False, False]
    return lambda: aten(y, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, mask)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--configs", type=int, default=14, help="configs tried besides default")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    solver = handle.registry.get(SOLVER).solver
    tdtype = getattr(torch, args.dtype)
    started = time.time()
    peak = matmul_tflops(tdtype)
    print(f"{torch.cuda.get_device_name()}: torch.matmul {args.dtype} 8192^3 {peak:.1f} TFLOP/s")
    layers = [lay for lay in RESNET50 if not args.layers or lay.name in args.layers]
    plans = []
    for direction in args.directions:
        for layer in layers:
            p = problem(layer, args.batch, direction, dtype=args.dtype, layout="NHWC")
            plans.append(
                (direction, layer, p, _picks(solver, handle.context, p.canonical, args.configs))
            )
    # compile every candidate at once (NVRTC in parallel; identical option sets compile once)
    kernels = [
        k
        for _, _, p, picks in plans
        for c in picks
        for k in solver.get_solution(handle.context, p.canonical, c).kernels
    ]
    t0 = time.time()
    failures = handle.backend.precompile(kernels)
    print(
        f"compiled {len(set(k.options for k in kernels))} option sets in {time.time() - t0:.1f} s"
    )
    for failure in list(failures.values())[:2]:
        print(failure[-2000:])
    rows: list[dict[str, Any]] = []
    cl = torch.channels_last
    for direction, layer, p, picks in plans:
        x = torch.randn(p.x.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
        w = (torch.randn(p.w.lengths, device="cuda", dtype=tdtype) * 0.05).to(memory_format=cl)
        y = torch.randn(p.y.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
        out = x if direction == "backward_data" else y
        fn = _cudnn(direction, x, w, y, layer.stride, layer.pad)
        row: dict[str, Any] = {"layer": layer.name, "direction": direction}
        row["gflop"] = p.flops / 1e9
        row["cudnn_ms"] = device_ms(fn, args.warmup, args.runs)
        expected = fn().float()
        timings = time_configs(
            handle, SOLVER, p, picks, (x, w, y), out, expected,
            lambda run: device_ms(run, args.warmup, args.runs),
        )  # fmt: skip
        row["configs"] = timings
        ok = [t for t in timings if "ms" in t and t["rel_err"] < 5e-3]
        bad = [t for t in timings if "ms" not in t or t["rel_err"] >= 5e-3]
        if bad:
            print(f"  {len(bad)} configs failed, e.g. {bad[0]}")
        if timings and timings[0] in ok:
            row["default_ms"] = timings[0]["ms"]
            row["ratio_default"] = row["cudnn_ms"] / row["default_ms"]
        if ok:
            best = min(ok, key=lambda t: t["ms"])
            row["best_ms"], row["best_config"] = best["ms"], best["config"]
            row["ratio_best"] = row["cudnn_ms"] / best["ms"]
            tflop = p.flops / 1e12
            row["tflops_best"] = tflop / (best["ms"] * 1e-3)
            row["frac_peak_best"] = row["tflops_best"] / peak
            row["frac_peak_cudnn"] = tflop / (row["cudnn_ms"] * 1e-3) / peak
        rows.append(row)
        nan = float("nan")
        print(
            f"{direction[:8]:8s} {layer.name:9s} cudnn {row['cudnn_ms']:.4f} ms  default "
            f"{row.get('default_ms', nan):.4f} ({row.get('ratio_default', nan):.2f})  best "
            f"{row.get('best_ms', nan):.4f} ({row.get('ratio_best', nan):.2f}) "
            f"{row.get('tflops_best', nan):.0f} TFLOP/s = {row.get('frac_peak_best', nan):.2f} "
            f"of matmul (cudnn {row.get('frac_peak_cudnn', nan):.2f})  "
            f"{tuple(row.get('best_config', {}).values())}",
            flush=True,
        )
    for direction in args.directions:
        done = [r for r in rows if r["direction"] == direction and "ratio_best" in r]
        dflt = [r["ratio_default"] for r in done if "ratio_default" in r]
        best = [r["ratio_best"] for r in done]
        print(
            f"{direction}: geomean cudnn/miocore best {geomean(best):.3f}, "
            f"default {geomean(dflt):.3f} over {len(done)} layers; matmul fraction miocore "
            f"{geomean([r['frac_peak_best'] for r in done]):.3f}, cudnn "
            f"{geomean([r['frac_peak_cudnn'] for r in done]):.3f}",
            flush=True,
        )
    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "batch": args.batch,
        "dtype": args.dtype,
        "matmul_tflops": peak,
        "seconds": time.time() - started,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
