"""``fft.gpu_rfft`` (cuFFT FFT convolution) against cuDNN on stride-1 layers where FFT could pay.

Layers: VGG-16's 3x3 layers at batch 16, and 5x5 / 7x7 / 11x11 stride-1 layers (Inception's
5x5, U-Net-like 5x5 and 7x7 blocks, a stride-1 7x7 stem, an 11x11) at batch 16. NHWC
(channels_last torch tensors) on both sides. fp32 exact (TF32 off for cuDNN and matmul) and
fp16; forward, backward data, backward weights. Both sides are timed the same way
(``gpu_vs_cudnn.device_ms``: warm-up, then ``torch.cuda._sleep`` so the timed launches queue
behind it, CUDA events around each of ``--runs`` runs, median). cuDNN: ``cudnn.benchmark`` on.
Each miocore result is checked against cuDNN's (relative error = max abs difference / max abs
of cuDNN's), and for fp32 both against a float64 run (cuDNN's double kernels).
``ratio`` = cuDNN ms / FFT ms (> 1: FFT faster). ``--profile`` layers also get a
per-kernel breakdown (torch.profiler) of one fp32 forward run.

    python benchmarks/gpu_fft_bench.py --budget-s 150 --out fft.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from common import geomean
from gpu_vs_cudnn import DIRECTIONS, device_ms, set_precision, torch_call
from shapes import VGG16, Layer, problem

import miocore

SOLVER = "fft.gpu_rfft"
BATCH = 16
#: Stride-1 layers with larger filters (name, C, K, H=W, filter, stride, pad).
LARGE = [
    Layer("incep.5x5", 48, 64, 35, 5, 1, 2),
    Layer("unet.5x5", 64, 64, 112, 5, 1, 2),
    Layer("unet.7x7", 64, 64, 56, 7, 1, 3),
    Layer("7x7.128", 128, 128, 56, 7, 1, 3),
    Layer("stem7x7.s1", 3, 64, 224, 7, 1, 3),
    Layer("11x11.32", 32, 32, 112, 11, 1, 5),
]


def _tensor(shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> Any:
    t = torch.randn(shape, device="cuda", dtype=dtype) * scale
    return t.contiguous(memory_format=torch.channels_last)


def _rel(got: Any, ref: Any) -> float:
    kind = torch.float64 if ref.dtype == torch.float64 else torch.float32
    ref = ref.to(kind)
    return float((got.to(kind) - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def bench_row(handle: Any, layer: Layer, dtype: str, direction: str, args: Any) -> dict:
    tdtype = getattr(torch, dtype)
    p = problem(layer, BATCH, direction=direction, dtype=dtype, layout="NHWC")
    row: dict[str, Any] = {"layer": layer.name, "dtype": dtype, "direction": direction}
    x = _tensor(p.x.lengths, tdtype)
    w = _tensor(p.w.lengths, tdtype, 0.05)
    y = _tensor(p.y.lengths, tdtype)
    cudnn = torch_call(direction, layer, x, w, y)
    row["cudnn_ms"] = device_ms(cudnn, args.warmup, args.runs)
    solver = handle.registry.get(SOLVER).solver
    why = solver.is_applicable(handle.context, p.canonical)
    if not why:
        row["skip"] = why.reason
        return row
    row["wti"] = round(solver.wti(handle.context, p.canonical), 4)
    row["workspace_mb"] = round(solver.workspace_size(handle.context, p.canonical) / 2**20, 1)
    out = {"forward": "y", "backward_data": "x", "backward_weights": "w"}[direction]
    bufs = {"x": x, "w": w, "y": y}
    bufs[out] = torch.full_like(bufs[out], float("nan"))
    try:
        start = time.perf_counter()
        sol = handle.compile_solution(p, SOLVER)
        ws = torch.empty(max(sol.workspace_size, 1), dtype=torch.uint8, device="cuda")

        def run() -> None:
            handle.run_solution(sol, x=bufs["x"], w=bufs["w"], y=bufs["y"], workspace=ws)

        run()
        torch.cuda.synchronize()
        row["setup_s"] = round(time.perf_counter() - start, 3)
        ref = cudnn()
        if direction != "forward":
            ref = ref[0] if direction == "backward_data" else ref[1]
        row["rel_err_vs_cudnn"] = _rel(bufs[out], ref)
        if dtype == "float32":  # who is off: both against float64 (cuDNN's double kernels)
            x64, w64, y64 = (t.double() for t in (x, w, y))
            ref64 = torch_call(direction, layer, x64, w64, y64)()
            if direction != "forward":
                ref64 = ref64[0] if direction == "backward_data" else ref64[1]
            row["err_fft_vs_fp64"] = _rel(bufs[out].double(), ref64)
            row["err_cudnn_vs_fp64"] = _rel(ref.double(), ref64)
            del x64, w64, y64, ref64
        row["fft_ms"] = device_ms(run, args.warmup, args.runs)
        row["ratio"] = row["cudnn_ms"] / row["fft_ms"]
    except Exception as exc:  # report and go on: one failing layer must not hide the rest
        row["error"] = f"{type(exc).__name__}: {exc}"[:400]
    return row


def profile(handle: Any, layer: Layer) -> list[str]:
    """Per-kernel device time of one fp32 forward run (where the time goes)."""
    set_precision("float32")
    p = problem(layer, BATCH, dtype="float32", layout="NHWC")
    x, w = _tensor(p.x.lengths, torch.float32), _tensor(p.w.lengths, torch.float32, 0.05)
    y = _tensor(p.y.lengths, torch.float32)
    sol = handle.compile_solution(p, SOLVER)
    ws = torch.empty(max(sol.workspace_size, 1), dtype=torch.uint8, device="cuda")
    handle.run_solution(sol, x=x, w=w, y=y, workspace=ws)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            handle.run_solution(sol, x=x, w=w, y=y, workspace=ws)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=10)
    return [f"profile {layer.name} fp32 forward x3:", *table.splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--budget-s", type=float, default=150.0, help="stop starting rows after")
    parser.add_argument("--profile", nargs="*", default=["unet.7x7", "conv3_2"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    layers = [lay for lay in LARGE + VGG16 if not args.layers or lay.name in args.layers]
    started = time.time()
    rows = []
    for name in args.profile:
        layer = next((lay for lay in LARGE + VGG16 if lay.name == name), None)
        if layer is not None:
            try:
                print("\n".join(profile(handle, layer)), flush=True)
            except Exception as exc:
                print(f"profile {name} failed: {type(exc).__name__}: {exc}"[:400], flush=True)
    for layer in layers:  # layer-major: a budget cut loses whole layers, not a dtype
        for dtype in args.dtypes:
            set_precision(dtype)  # float32: exact (TF32 off on cuDNN and matmul)
            for direction in args.directions:
                if time.time() - started > args.budget_s:
                    break
                row = bench_row(handle, layer, dtype, direction, args)
                rows.append(row)
                print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    print("\nratio = cuDNN ms / fft.gpu_rfft ms (> 1: FFT faster)")
    for dtype in args.dtypes:
        for direction in args.directions:
            sel = [r for r in rows if r["dtype"] == dtype and r["direction"] == direction]
            parts = [f"{r['layer']} {r['ratio']:.2f}" for r in sel if "ratio" in r]
            big = [
                r["ratio"] for r in sel if "ratio" in r and r["layer"] in {x.name for x in LARGE}
            ]
            vgg = [r["ratio"] for r in sel if "ratio" in r and r["layer"].startswith("conv")]
            print(
                f"{dtype} {direction}: geomean large-filter {geomean(big):.3f}, "
                f"VGG-16 3x3 {geomean(vgg):.3f} | " + ", ".join(parts)
            )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
