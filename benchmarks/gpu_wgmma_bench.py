"""``igemm.gpu_wgmma`` (wgmma + TMA, sm_90) against cuDNN on ResNet-50's and VGG-16's layers,
channels-last (``--layout NCHW``: both sides on PyTorch's default layout, which miocore
copies to channels-last inside the solution), fp16 and bf16 (and float32:
``igemm.gpu_wgmma_tf32`` against cuDNN, both in TF32), forward, (stride-1 layers) backward
data and (fp16/bf16: ``igemm.gpu_wgmma_wrw``) backward weights (``--directions``).

Per layer: cuDNN through PyTorch (``cudnn.benchmark`` on; backward data through
``aten.convolution_backward``), the solver's default config and the
best of up to ``--configs`` more of its space, each checked against cuDNN's output (relative
error of the max). Device time: launches queued behind ``torch.cuda._sleep``, events around each
of ``--runs`` runs after ``--warmup``, median. Each time is also given as the fraction of the
dense matmul rate of the dtype measured in the same run (``torch.matmul`` 8192^3). Layers with
fewer than 8 input channels (the stems) are outside the kernel's reach and skipped.

    python benchmarks/gpu_wgmma_bench.py --suites resnet50 vgg16 --dtypes float16 --out r.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from common import time_configs
from gpu_igemm_bench import matmul_tflops
from gpu_vs_cudnn import device_ms, geomean
from shapes import RESNET50, UNET3D, VGG16, problem

import miocore

SOLVER = "igemm.gpu_wgmma"
TF32_SOLVER = "igemm.gpu_wgmma_tf32"  # float32: the same kernel through TF32
WRW_SOLVER = "igemm.gpu_wgmma_wrw"  # backward weights, fp16/bf16
#: The 3-D U-Net runs the kernels' 3-D path (MIO_3D).
SUITES = {"resnet50": (RESNET50, 32), "vgg16": (VGG16, 16), "unet3d": (UNET3D, 2)}


def _picks(solver: Any, ctx: Any, canon: Any, count: int) -> list[Any]:
    """The default first, then the alternatives a normal find measures with it
    (``find_configs``); the default with the other cluster size; each tile (over one tap or
    several) and split-K (or stream-K shares; each split-K also with the fix-up, ``fix``) at
    its best box, deepest pipeline, persistent, single blocks; then the rest of the space
    spread evenly."""
    default = solver.default_perf_config(ctx, canon)
    space = list(solver.perf_config_space(ctx, canon))
    picks = [default, *solver.find_configs(ctx, canon)]
    if "cluster" in default:  # backward weights' kernel has no clusters
        picks.append({**default, "cluster": 3 - default["cluster"]})
    seen = set()
    for c in space:
        key = (c["bm"], c["bn"], c["split"], c.get("pingpong", 0), c.get("span", 1), c.get("sk"),
               c.get("fix"))  # fmt: skip
        if c.get("cluster", 1) == 1 and c.get("persist", 1) == 1 and key not in seen:
            seen.add(key)
            picks.append(c)
    rest = [c for c in space if c not in picks]
    picks += rest[:: max(1, len(rest) // max(1, count))][:count]
    out = []
    for c in picks:
        if dict(c) not in [dict(o) for o in out]:
            out.append(c)
    return out


_SHORT = {"forward": "fwd", "backward_data": "bwd", "backward_weights": "wrw"}


def solver_name(dtype: str, direction: str) -> str | None:
    """The wgmma solver of the dtype and direction (None: TF32 backward weights has none)."""
    if direction == "backward_weights":
        return None if dtype == "float32" else WRW_SOLVER
    return TF32_SOLVER if dtype == "float32" else SOLVER


def cudnn_call(direction: str, x: Any, w: Any, y: Any, layer: Any) -> Any:
    """cuDNN's call for the direction (the written tensor as its result)."""
    d = layer.dims
    if direction == "forward":
        conv = torch.nn.functional.conv3d if d == 3 else torch.nn.functional.conv2d
        return lambda: conv(x, w, stride=layer.stride, padding=layer.pad)
    aten = torch.ops.aten.convolution_backward
    stride, pad, ones, zeros = [layer.stride] * d, [layer.pad] * d, [1] * d, [0] * d
    if direction == "backward_weights":
        mask = [False, True, False]
        return lambda: aten(y, x, w, None, stride, pad, ones, False, zeros, 1, mask)[1]
    mask = [True, False, False]
    return lambda: aten(y, x, w, None, stride, pad, ones, False, zeros, 1, mask)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", default=list(SUITES))
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--directions", nargs="+", default=["forward", "backward_data"])
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--configs", type=int, default=8, help="configs tried besides default")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--layout", choices=("NHWC", "NCHW"), default="NHWC", help="both sides' tensors"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True  # float32: TF32 on both sides (PyTorch's
    torch.backends.cudnn.allow_tf32 = True  # default for convolutions)
    started = time.time()
    rows: list[dict[str, Any]] = []

    # NCHW: PyTorch's default contiguous tensors (miocore copies them to channels-last)
    def memory_format(dims: int) -> Any:
        if args.layout != "NHWC":
            return torch.contiguous_format
        return torch.channels_last_3d if dims == 3 else torch.channels_last

    for dtype in args.dtypes:
        tf32 = dtype == "float32"
        handle = miocore.Handle(
            "cuda", stream=torch.cuda.current_stream(), math_mode="tf32" if tf32 else "exact"
        )
        ctx = handle.context
        tdtype = getattr(torch, dtype)
        peak = matmul_tflops(tdtype)
        print(f"{torch.cuda.get_device_name()}: matmul {dtype} {peak:.0f} TFLOP/s", flush=True)
        plans = []
        for suite, direction in itertools.product(args.suites, args.directions):
            layers, batch = SUITES[suite]
            for layer in layers:
                if layer.c < 8 or (args.layers and layer.name not in args.layers):
                    continue
                p = problem(layer, batch, direction, dtype=dtype, layout=args.layout)
                name = solver_name(dtype, direction)
                if name is None:
                    continue
                solver = handle.registry.get(name).solver
                if not solver.is_applicable(ctx, p.canonical):
                    continue
                picks = _picks(solver, ctx, p.canonical, args.configs)
                found = 1 + len(solver.find_configs(ctx, p.canonical))
                plans.append((suite, layer, p, picks, found, name))
        kernels = [
            k
            for *_, p, picks, _, name in plans
            for c in picks
            for k in handle.registry.get(name).solver.get_solution(ctx, p.canonical, c).kernels
        ]
        t0 = time.time()
        failures = handle.backend.precompile(kernels)
        print(
            f"compiled {len({k.options for k in kernels})} option sets in {time.time() - t0:.1f} s"
        )
        for failure in list(failures.values())[:2]:
            print(failure[-3000:])
        for suite, layer, p, picks, found, name in plans:
            cl = memory_format(layer.dims)
            x = torch.randn(p.x.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
            w = (torch.randn(p.w.lengths, device="cuda", dtype=tdtype) * 0.05).to(memory_format=cl)
            y = torch.randn(p.y.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
            direction = p.direction.value
            out = {"backward_data": x, "backward_weights": w}.get(direction, y)
            cudnn = cudnn_call(direction, x, w, y, layer)
            row: dict[str, Any] = {
                "suite": suite, "layer": layer.name, "dtype": dtype, "direction": direction,
                "layout": args.layout,
            }  # fmt: skip
            row["cudnn_ms"] = device_ms(cudnn, args.warmup, args.runs)
            expected = cudnn().float()
            timings = time_configs(
                handle, name, p, picks, (x, w, y), out, expected,
                lambda run: device_ms(run, args.warmup, args.runs),
            )  # fmt: skip
            row["configs"] = timings
            ok = [t for t in timings if "ms" in t and t["rel_err"] < 1e-2]
            bad = [t for t in timings if t not in ok]
            if bad:
                print(f"  {len(bad)} configs failed, e.g. {bad[0]}", flush=True)
            tflop = p.flops / 1e12
            row["frac_cudnn"] = tflop / (row["cudnn_ms"] * 1e-3) / peak
            if timings and timings[0] in ok:
                row["default_ms"] = timings[0]["ms"]
                row["ratio_default"] = row["cudnn_ms"] / row["default_ms"]
            measured = [t for t in timings[:found] if t in ok]  # what a normal find measures
            if measured:
                row["find_ms"] = min(t["ms"] for t in measured)
                row["ratio_find"] = row["cudnn_ms"] / row["find_ms"]
            if ok:
                best = min(ok, key=lambda t: t["ms"])
                row["best_ms"], row["best_config"] = best["ms"], best["config"]
                row["ratio_best"] = row["cudnn_ms"] / best["ms"]
                row["frac_best"] = tflop / (best["ms"] * 1e-3) / peak
            rows.append(row)
            nan = float("nan")
            print(
                f"{dtype[:5]} {_SHORT[direction]} {suite:8s} {layer.name:9s} "
                f"cudnn {row['cudnn_ms']:.4f} ms "
                f"({row['frac_cudnn']:.2f})  default {row.get('default_ms', nan):.4f} "
                f"({row.get('ratio_default', nan):.2f})  find ({row.get('ratio_find', nan):.2f})"
                f"  best {row.get('best_ms', nan):.4f} "
                f"({row.get('ratio_best', nan):.2f}, {row.get('frac_best', nan):.2f} of matmul) "
                f"{tuple(row.get('best_config', {}).values())}",
                flush=True,
            )
        for suite, direction in itertools.product(args.suites, args.directions):
            done = [r for r in rows if r["suite"] == suite and r["dtype"] == dtype]
            done = [r for r in done if "ratio_best" in r and r["direction"] == direction]
            if done:
                dflt = [r["ratio_default"] for r in done if "ratio_default" in r]
                find = [r["ratio_find"] for r in done if "ratio_find" in r]
                best = geomean([r["ratio_best"] for r in done])
                print(
                    f"{dtype} {direction} {suite}: cudnn/wgmma geomean best {best:.3f}, "
                    f"default {geomean(dflt):.3f}, find {geomean(find):.3f} over {len(done)} "
                    "layers; faster than cuDNN "
                    f"{sum(r['ratio_best'] > 1 for r in done)}; matmul fraction wgmma "
                    f"{geomean([r['frac_best'] for r in done]):.3f}, cudnn "
                    f"{geomean([r['frac_cudnn'] for r in done]):.3f}",
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
