"""``winograd.gpu_f2x3`` / ``winograd.gpu_f4x3`` against cuDNN, with an optional older variant.

ResNet-50's stride-1 3x3 layers (batch 32) and VGG-16's 3x3 layers (batch 16), NHWC
(channels_last torch tensors) on both sides, fp16 and exact fp32 (TF32 off), forward / backward
data / backward weights. Timing is ``benchmarks/gpu_vs_cudnn.py``'s ``device_ms`` (warm-up, then
launches queued behind ``torch.cuda._sleep``, CUDA events around each run, median) for every
side. With ``--baseline MODULE``, the solvers of an earlier version are timed in the same run,
so before / after ratios come from one device session: MODULE is a copy of that version's
``miocore_winograd/gpu.py`` placed beside this file with ``SOURCE`` pointing at a copy of its
kernel file put in the plugin's ``kernels`` folder (e.g. ``winograd/winograd_gpu_v0.cu``; the
copies are not kept in the repository). ``--extra`` also times other channels-per-thread
choices than the defaults (``gpu.VEC_*_CAP``). Each result is checked
against cuDNN's (max abs difference / max abs of cuDNN's). ``--profile`` layers also get a
per-kernel breakdown (torch.profiler) of one run of every variant.

    python plugins/winograd/benchmarks/gpu_winograd_ab.py --baseline baseline_gpu_v0 --out ab.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2] / "benchmarks"))

from common import geomean  # noqa: E402
from gpu_vs_cudnn import device_ms, torch_call  # noqa: E402
from gpu_winograd_bench import layers, profile  # noqa: E402
from miocore_winograd import gpu  # noqa: E402
from shapes import problem  # noqa: E402

import miocore  # noqa: E402

DIRECTIONS = ("forward", "backward_data", "backward_weights")


@contextlib.contextmanager
def patched(patches: dict[str, Any]) -> Iterator[None]:
    """``miocore_winograd.gpu`` module constants replaced for the duration (a variant)."""
    saved = {name: getattr(gpu, name) for name in patches}
    for name, value in patches.items():
        setattr(gpu, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(gpu, name, value)


def runner(handle: miocore.Handle, variant: tuple, p: miocore.ConvProblem, x: Any, w: Any, y: Any):
    """A zero-argument callable running one variant (solver, constants) on the torch tensors."""
    solver, patches = variant
    canon = p.canonical
    with patched(patches):
        sol = solver.get_solution(handle.context, canon)
    invoker = sol.invoker_factory(handle.backend.compile(sol.kernels))
    workspace = handle.backend.allocate_workspace(sol.workspace_size)
    views = {
        key: handle.backend.check_array(getattr(p, key), t, key)
        for key, t in (("x", x), ("w", w), ("y", y))
    }
    params = miocore.InvokeParams(problem=canon, workspace=workspace, **views)
    return lambda: invoker(handle, params)


def variants(baseline: str | None, extra: bool) -> dict[str, tuple]:
    """Name -> (solver object, module constants to patch) of every variant timed."""
    f2, f4 = gpu.WinogradGpuF2x3(), gpu.WinogradGpuF4x3()
    out: dict[str, tuple] = {"f2x3": (f2, {}), "f4x3": (f4, {})}
    if extra:  # other channels-per-thread choices than the defaults (gpu.VEC_*_CAP)
        out["f2x3_in4"] = (f2, {"VEC_IN_CAP": {**gpu.VEC_IN_CAP, 2: (4, 16)}})
        out["f4x3_in1"] = (f4, {"VEC_IN_CAP": {**gpu.VEC_IN_CAP, 4: (1, 16)}})
        wide = {"VEC_OUT_CAP": {**gpu.VEC_OUT_CAP, 4: (4, 16)}}
        out["f4x3_o4"] = (f4, {**wide, "VEC_DY_CAP": {**gpu.VEC_DY_CAP, 4: (4, 8)}})
    if baseline:
        old = importlib.import_module(baseline)
        out["f2x3_v0"] = (old.WinogradGpuF2x3(), {})
        out["f4x3_v0"] = (old.WinogradGpuF4x3(), {})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "float32"])
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--baseline", default=None, help="module with the *_v0 solvers")
    parser.add_argument("--profile", nargs="*", default=["l3.3x3", "conv3_2"])
    parser.add_argument("--extra", action="store_true", help="also time narrower variants")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--budget-s", type=float, default=1e9, help="stop starting new layers")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    started = time.time()
    solvers = variants(args.baseline, args.extra)
    kernels = set()
    for dtype in args.dtypes:
        for direction in args.directions:
            for _, lay, batch in layers(args.layers):
                p = problem(lay, batch, direction, dtype, "NHWC").canonical
                for impl, patches in solvers.values():
                    with patched(patches):
                        kernels.update(impl.get_solution(handle.context, p).kernels)
    failures = handle.backend.precompile(list(kernels))
    print(f"compiled {len(kernels)} kernels in {time.time() - started:.1f} s", flush=True)
    for failure in list(failures.values())[:2]:
        print(failure[-2000:])
    rows: list[dict[str, Any]] = []
    cl = torch.channels_last
    for net, lay, batch in layers(args.layers):  # layer-major: a budget cut loses whole layers
        if time.time() - started > args.budget_s:
            print("time budget spent; stopping", flush=True)
            break
        for dtype in args.dtypes:
            tdtype = getattr(torch, dtype)
            for direction in args.directions:
                p = problem(lay, batch, direction, dtype, "NHWC")
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
                }
                ref_fn = torch_call(direction, lay, x, w, y)
                row["cudnn_ms"] = device_ms(ref_fn, args.warmup, args.runs)
                ref = ref_fn()
                if direction != "forward":
                    ref = ref[0] if direction == "backward_data" else ref[1]
                ref = ref.float()
                scale = float(ref.abs().max()) or 1.0
                out = {"forward": y, "backward_data": x, "backward_weights": w}[direction]
                for name, impl in solvers.items():
                    try:
                        run = runner(handle, impl, p, x, w, y)
                        out.fill_(float("nan"))
                        run()
                        torch.cuda.synchronize()
                        row[f"{name}_err"] = float((out.float() - ref).abs().max()) / scale
                        row[f"{name}_ms"] = device_ms(run, args.warmup, args.runs)
                        row[f"{name}_ratio"] = row["cudnn_ms"] / row[f"{name}_ms"]
                        if lay.name in args.profile and dtype == "float16":
                            row[f"{name}_profile"] = profile(run)
                        del run
                    except Exception as exc:  # report and go on with the next variant
                        row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
                rows.append(row)
                if args.out:
                    args.out.write_text(json.dumps({"rows": rows}, indent=1))
                parts = [f"{direction[:8]:8s} {dtype:8s} {lay.name:8s} cudnn {row['cudnn_ms']:.4f}"]
                for name in solvers:
                    parts.append(
                        f"{name} {row.get(f'{name}_ms', float('nan')):.4f} "
                        f"x{row.get(f'{name}_ratio', float('nan')):.2f} "
                        f"e{row.get(f'{name}_err', float('nan')):.0e}"
                        + (" ERR " + row[f"{name}_error"] if f"{name}_error" in row else "")
                    )
                print(" | ".join(parts), flush=True)
                for name in solvers:
                    if f"{name}_profile" in row:
                        top = sorted(row[f"{name}_profile"].items(), key=lambda kv: -kv[1])[:6]
                        print(f"    {name}: " + ", ".join(f"{k} {v:.4f}" for k, v in top))
                x = w = y = out = ref = None
                torch.cuda.empty_cache()
    print("== geomean cudnn/miocore (>1: miocore faster), best of f2x3/f4x3 per layer")
    for dtype in args.dtypes:
        for direction in args.directions:
            done = [r for r in rows if r["dtype"] == dtype and r["direction"] == direction]
            line = f"{direction:16s} {dtype:8s} n={len(done):2d}"
            for suffix in ("", "_v0", "_in"):
                if suffix == "_in":
                    names = ("f2x3_in4", "f4x3_in1")
                else:
                    names = (f"f2x3{suffix}", f"f4x3{suffix}")
                best = [max(r.get(f"{n}_ratio", 0) for n in names) for r in done]
                line += f" | best{suffix or '_new'} {geomean(best):.3f}"
            print(line, flush=True)
    if args.out:
        summary = {"device": torch.cuda.get_device_name(), "seconds": time.time() - started}
        args.out.write_text(json.dumps({**summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
