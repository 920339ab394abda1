"""``winograd.gpu_f2x3`` / ``winograd.gpu_f4x3`` against cuDNN on 3x3 stride-1 layers.

ResNet-50's stride-1 3x3 layers at batch 32 and VGG-16's 3x3 layers at batch 16, NHWC
(channels_last torch tensors), fp32 (exact: TF32 off for cuDNN and matmul; miocore's BLAS uses
CUBLAS_COMPUTE_32F) and fp16, forward / backward data / backward weights. Both sides are timed
the same way: warm-up runs, then ``torch.cuda._sleep`` so that the timed launches queue up
behind it (device time, not Python launch time), CUDA events around each of ``--runs`` runs,
median. cuDNN: ``torch.backends.cudnn.benchmark`` on. Each miocore result is checked against
cuDNN's (relative error = max abs difference / max abs of cuDNN's result). ``--profile``
layers also get a per-kernel breakdown (torch.profiler) of one miocore run, to show where the
time goes (transforms vs GEMM).

    python benchmarks/gpu_winograd_bench.py --out winograd.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from gpu_vs_cudnn import device_ms
from shapes import RESNET50, VGG16

import miocore

SOLVERS = ("winograd.gpu_f2x3", "winograd.gpu_f4x3")
DIRECTIONS = ("forward", "backward_data", "backward_weights")


def geomean(values: list[float]) -> float:
    """Geometric mean of the positive finite values (NaN for none)."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def problem(layer: Any, batch: int, direction: str, dtype: str) -> miocore.ConvProblem:
    """The NHWC miocore problem of one 2-D layer."""
    return miocore.ConvProblem.from_sizes(
        direction,
        n=batch,
        c=layer.c,
        k=layer.k,
        in_spatial=(layer.hw, layer.hw),
        filter_spatial=(layer.f, layer.f),
        pads=(layer.pad, layer.pad),
        strides=(layer.stride, layer.stride),
        dtype=dtype,
        layout="NHWC",
    )


def torch_call(direction: str, layer: Any, x: Any, w: Any, y: Any) -> Any:
    """cuDNN through PyTorch for one direction (backward: one gradient of
    ``aten.convolution_backward``)."""
    stride, pad = [layer.stride] * 2, [layer.pad] * 2
    if direction == "forward":
        return lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)
    mask = [direction == "backward_data", direction == "backward_weights", False]
    aten = torch.ops.aten.convolution_backward
    return lambda: aten(y, x, w, None, stride, pad, [1, 1], False, [0, 0], 1, mask)


def runner(handle: miocore.Handle, name: str, p: miocore.ConvProblem, x: Any, w: Any, y: Any):
    """A zero-argument callable running solver ``name`` on the torch tensors (compiled and
    invoked directly, outside the handle's find caches)."""
    impl = handle.registry.get(name).solver
    canon = p.canonical
    sol = impl.get_solution(handle.context, canon)
    invoker = sol.invoker_factory(handle.backend.compile(sol.kernels))
    workspace = handle.backend.allocate_workspace(sol.workspace_size)
    views = {
        key: handle.backend.check_array(getattr(p, key), t, key)
        for key, t in (("x", x), ("w", w), ("y", y))
    }
    params = miocore.InvokeParams(problem=canon, workspace=workspace, **views)
    return lambda: invoker(handle, params)


def layers(selected: list[str]) -> list[tuple[str, Any, int]]:
    """(network, layer, batch) of every stride-1 3x3 layer."""
    out = [("resnet50", lay, 32) for lay in RESNET50 if lay.f == 3 and lay.stride == 1]
    out += [("vgg16", lay, 16) for lay in VGG16 if lay.f == 3 and lay.stride == 1]
    return [t for t in out if not selected or t[1].name in selected]


def profile(run: Any) -> dict[str, float]:
    """Device milliseconds per kernel name (shortened) of one ``run``."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    run()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        run()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for evt in p.key_averages():
        ms = getattr(evt, "device_time_total", getattr(evt, "cuda_time_total", 0.0)) / 1e3
        if ms > 0:
            out[evt.key[:60]] = out.get(evt.key[:60], 0.0) + ms
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--profile", nargs="*", default=["l3.3x3", "conv3_2"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--budget-s", type=float, default=1e9, help="stop starting new layers")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    started = time.time()
    rows: list[dict[str, Any]] = []
    cl = torch.channels_last
    # compile every kernel set up front (NVRTC in parallel)
    kernels = set()
    for dtype in args.dtypes:
        for direction in args.directions:
            for _, lay, batch in layers(args.layers):
                p = problem(lay, batch, direction, dtype).canonical
                for name in SOLVERS:
                    impl = handle.registry.get(name).solver
                    kernels.update(impl.get_solution(handle.context, p).kernels)
    failures = handle.backend.precompile(list(kernels))
    print(f"compiled {len(kernels)} kernels in {time.time() - started:.1f} s", flush=True)
    for failure in list(failures.values())[:2]:
        print(failure[-2000:])
    for direction in args.directions:
        for dtype in args.dtypes:
            tdtype = getattr(torch, dtype)
            for net, lay, batch in layers(args.layers):
                if time.time() - started > args.budget_s:
                    print("time budget spent; stopping", flush=True)
                    break
                p = problem(lay, batch, direction, dtype)
                x = torch.randn(p.x.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
                w = (torch.randn(p.w.lengths, device="cuda", dtype=tdtype) * 0.05).to(
                    memory_format=cl
                )
                y = torch.randn(p.y.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
                row: dict[str, Any] = {
                    "net": net,
                    "layer": lay.name,
                    "batch": batch,
                    "dtype": dtype,
                    "direction": direction,
                    "gflop": p.flops / 1e9,
                }
                ref_fn = torch_call(direction, lay, x, w, y)
                row["cudnn_ms"] = device_ms(ref_fn, args.warmup, args.runs)
                ref = ref_fn()
                if direction == "backward_data":
                    ref = ref[0]
                elif direction == "backward_weights":
                    ref = ref[1]
                ref = ref.float()
                scale = float(ref.abs().max()) or 1.0
                out = {"forward": y, "backward_data": x, "backward_weights": w}[direction]
                for name in SOLVERS:
                    short = name.split("_")[-1]
                    try:
                        run = runner(handle, name, p, x, w, y)
                        out.fill_(float("nan"))
                        run()
                        torch.cuda.synchronize()
                        row[f"{short}_err"] = float((out.float() - ref).abs().max()) / scale
                        row[f"{short}_ms"] = device_ms(run, args.warmup, args.runs)
                        row[f"{short}_ratio"] = row["cudnn_ms"] / row[f"{short}_ms"]
                        if lay.name in args.profile:
                            row[f"{short}_profile"] = profile(run)
                        del run
                    except Exception as exc:  # report and go on with the next solver
                        row[f"{short}_error"] = f"{type(exc).__name__}: {exc}"[:300]
                rows.append(row)
                if args.out:
                    args.out.write_text(json.dumps({"rows": rows}, indent=1))
                print(
                    f"{direction[:8]:8s} {dtype:8s} {net:8s} {lay.name:8s} cudnn "
                    f"{row['cudnn_ms']:.4f} ms | f2x3 {row.get('f2x3_ms', float('nan')):.4f} "
                    f"(x{row.get('f2x3_ratio', float('nan')):.2f}, err "
                    f"{row.get('f2x3_err', float('nan')):.1e}) | f4x3 "
                    f"{row.get('f4x3_ms', float('nan')):.4f} "
                    f"(x{row.get('f4x3_ratio', float('nan')):.2f}, err "
                    f"{row.get('f4x3_err', float('nan')):.1e}) "
                    f"{row.get('f2x3_error', '')}{row.get('f4x3_error', '')}",
                    flush=True,
                )
                for key in ("f2x3_profile", "f4x3_profile"):
                    if key in row:
                        top = sorted(row[key].items(), key=lambda kv: -kv[1])[:6]
                        print(f"    {key}: " + ", ".join(f"{k} {v:.3f}" for k, v in top))
                x = w = y = out = ref = None
                torch.cuda.empty_cache()
            done = [r for r in rows if r["dtype"] == dtype and r["direction"] == direction]
            best = [max(r.get("f2x3_ratio", 0), r.get("f4x3_ratio", 0)) for r in done]
            print(
                f"== {direction} {dtype}: geomean cudnn/miocore f2x3 "
                f"{geomean([r.get('f2x3_ratio', 0) for r in done]):.3f}, f4x3 "
                f"{geomean([r.get('f4x3_ratio', 0) for r in done]):.3f}, best of the two "
                f"{geomean(best):.3f} over {len(done)} layers (>1: miocore faster)",
                flush=True,
            )
    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "seconds": time.time() - started,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
