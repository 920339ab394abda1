"""miocore on a GPU against cuDNN through PyTorch, on the layers real networks run.

Suites (``--suites``): ResNet-50 at batch 32, VGG-16's 3x3 layers at batch 16, MobileNetV2's
depthwise and pointwise layers at batch 64, the 3-D U-Net's 3x3x3 layers at batch 2; and, named
by torchvision, every distinct convolution of EfficientNet-B0, ConvNeXt-T and MobileNetV3-Large
at batch 32 (read from one inference on the meta device). For every
layer, precision (``--dtypes``) and direction: miocore's Find-best solution (find mode NORMAL:
every applicable solver, default perf configs), then both sides timed the same way and the
ratio cuDNN time / miocore time (> 1: miocore faster), the winning family, and the fraction of
the dense-matmul rate measured in the same run that each side reaches.

Precisions never mix: ``float32`` is exact fp32 on both sides (miocore's default math mode,
``torch.backends.cudnn.allow_tf32 = False``); ``tf32`` is miocore's ``math_mode="tf32"``
against cuDNN with TF32 allowed; ``float16`` and ``bfloat16`` are those types with fp32
accumulation on both.

Timing: CUDA events around each of ``--runs`` runs after ``--warmup``, median, with a long
``torch.cuda._sleep`` queued first so that every launch is enqueued before the GPU reaches it:
the numbers are device time, not Python launch overhead (measured separately: ``host``).
cuDNN runs with ``torch.backends.cudnn.benchmark = True`` (its own find), forward through
``F.conv2d``/``conv3d``, backward through ``aten.convolution_backward`` for one gradient. Both
sides get the same layout (``--layout``, default NHWC: channels_last tensors).

    python benchmarks/gpu_vs_cudnn.py --suites resnet50 --out results.json
"""

from __future__ import annotations

import argparse
import functools
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

import torch
from common import geomean
from shapes import SUITES, Layer, problem

import miocore

#: Batch of each suite (the issue's measurement plan).
BATCH = {"resnet50": 32, "vgg16": 16, "mobilenetv2": 64, "unet3d": 2}
#: torchvision models whose distinct convolutions form a suite (the real-networks issue's
#: models, batch 32 as there); their layers are read from one inference (``model_layers``).
MODEL_BATCH = {"efficientnet_b0": 32, "convnext_tiny": 32, "mobilenet_v3_large": 32}
#: Cycles of the queue-filling sleep (~10 ms at H100/H200 clocks).
SLEEP_CYCLES = 20_000_000
DIRECTIONS = ("forward", "backward_data", "backward_weights")


def model_layers(model: Any, shape: tuple[int, ...]) -> list[Layer]:
    """Every distinct 2-D convolution of one inference of ``model`` on an input of ``shape``
    (run on the meta device: shapes only), named after its first module; square sizes only."""
    import torch.nn as nn

    names = {m: name for name, m in model.named_modules()}
    found: dict[tuple[int, ...], Layer] = {}

    def record(mod: Any, args: Any, _out: Any) -> None:
        x = args[0]
        if isinstance(mod.padding, str):
            raise ValueError(f"{names[mod]}: padding {mod.padding!r} (numbers only here)")
        sizes = {
            "hw": set(x.shape[2:]),
            "f": set(mod.kernel_size),
            "stride": set(mod.stride),
            "pad": set(mod.padding),
            "dilation": set(mod.dilation),
        }
        if any(len(v) != 1 for v in sizes.values()) or sizes["dilation"] != {1}:
            raise ValueError(f"{names[mod]}: not square or dilated: {sizes}")
        (hw,), (f,), (stride,), (pad,) = (sizes[k] for k in ("hw", "f", "stride", "pad"))
        layer = Layer(names[mod], mod.in_channels, mod.out_channels, hw, f, stride, pad,
                      mod.groups)  # fmt: skip
        found.setdefault(layer[1:], layer)

    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks = [m.register_forward_hook(record) for m in convs]
    try:
        with torch.no_grad():
            model.to("meta")(torch.empty(shape, device="meta"))
    finally:
        for h in hooks:
            h.remove()
    return list(found.values())


def suite_batch(suite: str) -> int:
    """The batch a suite is measured at."""
    return {**BATCH, **MODEL_BATCH}[suite]


def suite_layers(suite: str) -> list[Layer]:
    """The layers of a shape suite (``shapes.SUITES``) or of a torchvision model."""
    if suite in MODEL_BATCH:
        import torchvision

        model = getattr(torchvision.models, suite)()
        return model_layers(model.eval(), (1, 3, 224, 224))
    return SUITES[suite]


#: Timings queued again behind a longer sleep because the host fell behind the first one.
LATE_QUEUES = {"count": 0}


@functools.cache
def _sleep_ms() -> float:
    """The queue-filling sleep's own device time in ms (measured once per process)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(SLEEP_CYCLES)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def device_ms(fn: Any, warmup: int, runs: int) -> float:
    """Median device time of ``fn`` (events around each run), launches queued behind a sleep.

    The sleep must outlast queueing every run, or the runs queued after it ends carry host
    time between their events (a side with more host time per launch is charged more): where
    queueing took longer than 90% of the sleep, the runs are queued again behind one 4x longer
    (:data:`LATE_QUEUES` counts it; a host slowed by other processes does this)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    cycles = SLEEP_CYCLES
    for _ in range(4):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        began = time.perf_counter()
        torch.cuda._sleep(cycles)
        for s, e in zip(starts, ends, strict=True):
            s.record()
            fn()
            e.record()
        queued_ms = (time.perf_counter() - began) * 1e3
        torch.cuda.synchronize()
        if queued_ms < 0.9 * _sleep_ms() * cycles / SLEEP_CYCLES:
            break
        LATE_QUEUES["count"] += 1
        cycles *= 4
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def set_precision(mode: str) -> None:
    """cuDNN's and cuBLAS's TF32 switches for one precision mode."""
    tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32


def element_type(mode: str) -> str:
    """The tensors' element type of a precision mode (``tf32`` computes on float32 tensors)."""
    return "float32" if mode == "tf32" else mode


def matmul_tflops(mode: str, size: int = 8192) -> float:
    """The dense matmul rate of this precision mode (torch.matmul, size^3, median of 10)."""
    set_precision(mode)
    dtype = getattr(torch, element_type(mode))
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    ms = device_ms(lambda: torch.matmul(a, b), 3, 10)
    return 2 * size**3 / ms / 1e9


def torch_call(direction: str, layer: Layer, x: Any, w: Any, y: Any) -> Any:
    """cuDNN through PyTorch for one direction (forward: conv2d/conv3d)."""
    F = torch.nn.functional
    d = layer.dims
    stride, pad = [layer.stride] * d, [layer.pad] * d
    if direction == "forward":
        conv = F.conv2d if d == 2 else F.conv3d
        return lambda: conv(x, w, stride=stride, padding=pad, groups=layer.groups)
    mask = [direction == "backward_data", direction == "backward_weights", False]
    aten = torch.ops.aten.convolution_backward

    def run() -> Any:
        return aten(y, x, w, None, stride, pad, [1] * d, False, [0] * d, layer.groups, mask)

    return run


def _tensor(shape: tuple[int, ...], dtype: Any, layout: str, scale: float = 1.0) -> Any:
    t = torch.randn(shape, device="cuda", dtype=dtype) * scale
    if layout == "NHWC":
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        t = t.contiguous(memory_format=fmt)
    return t


def bench_suite(
    args: argparse.Namespace, suite: str, mode: str, handle: miocore.Handle, rate: float
) -> list[dict[str, Any]]:
    """Every layer of ``suite`` in ``mode`` and every direction: one row each."""
    set_precision(mode)
    torch.backends.cudnn.benchmark = True
    dtype = element_type(mode)
    tdtype = getattr(torch, dtype)
    rows = []
    layers = [lay for lay in suite_layers(suite) if not args.layers or lay.name in args.layers]
    for layer in layers:
        p0 = problem(layer, suite_batch(suite), dtype=dtype, layout=args.layout)
        x = _tensor(p0.x.lengths, tdtype, args.layout)
        w = _tensor(p0.w.lengths, tdtype, args.layout, 0.05)
        y = _tensor(p0.y.lengths, tdtype, args.layout)
        for direction in args.directions:
            p = miocore.ConvProblem(direction, x=p0.x, w=p0.w, y=p0.y, conv=p0.conv)
            row: dict[str, Any] = {
                "suite": suite,
                "layer": layer.name,
                "precision": mode,
                "direction": direction,
                "key": p.key,
                "gflop": p.flops / 1e9,
            }
            try:
                start = time.perf_counter()
                sols = handle.find_solutions(p, x=x, w=w, y=y, find_mode="NORMAL")
                row["find_s"] = round(time.perf_counter() - start, 3)
                best = sols[0]
                row["solver"] = best.solver
                row["family"] = best.solver.split(".")[0]
                row["candidates"] = {s.solver: round(s.time_ms, 4) for s in sols[:4]}
                ws = handle.backend.allocate_workspace(best.workspace_size)

                def run(best: Any = best, ws: Any = ws, x: Any = x, w: Any = w, y: Any = y) -> None:
                    handle.run_solution(best, x=x, w=w, y=y, workspace=ws)

                row["miocore_ms"] = device_ms(run, args.warmup, args.runs)
                del ws
            except Exception as exc:  # a failing case is recorded, the suite goes on
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            row["cudnn_ms"] = device_ms(
                torch_call(direction, layer, x, w, y), args.warmup, args.runs
            )
            row["cudnn_tflops"] = p.flops / row["cudnn_ms"] / 1e9
            row["cudnn_of_matmul"] = row["cudnn_tflops"] / rate
            if "miocore_ms" in row:
                row["speedup"] = row["cudnn_ms"] / row["miocore_ms"]
                row["miocore_tflops"] = p.flops / row["miocore_ms"] / 1e9
                row["miocore_of_matmul"] = row["miocore_tflops"] / rate
            rows.append(row)
            print(json.dumps(row), flush=True)
        x = w = y = None
        torch.cuda.empty_cache()
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per suite, precision and direction: geomean speedup, cases faster, winning families."""
    out: dict[str, Any] = {}
    groups = sorted({(r["suite"], r["precision"], r["direction"]) for r in rows})
    for suite, mode, direction in groups:
        sel = [
            r
            for r in rows
            if (r["suite"], r["precision"], r["direction"]) == (suite, mode, direction)
        ]
        speedups = [r["speedup"] for r in sel if "speedup" in r]
        families: dict[str, int] = {}
        for r in sel:
            if "family" in r:
                families[r["family"]] = families.get(r["family"], 0) + 1
        out[f"{suite}/{mode}/{direction}"] = {
            "geomean_speedup": geomean(speedups) if speedups else None,
            "faster": sum(s > 1 for s in speedups),
            "layers": len(sel),
            "failed": len(sel) - len(speedups),
            "families": families,
        }
    return out


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
    parser.add_argument("--suites", nargs="+", default=list(BATCH), choices=[*BATCH, *MODEL_BATCH])
    parser.add_argument(
        "--dtypes",
        nargs="+",
        default=["float32", "float16", "tf32"],
        choices=("float32", "tf32", "float16", "bfloat16"),
    )
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--layout", default="NHWC", choices=("NHWC", "NCHW"))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-extras", action="store_true", help="no host/find-time parts")
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="keep the run's find records: the user database in this folder (NORMAL find's "
        "times of every candidate at today's solver revisions; benchmarks/merge_db.py folds "
        "them into a system database)",
    )
    args = parser.parse_args()
    if args.db:  # before any handle opens its database
        args.db.mkdir(parents=True, exist_ok=True)
        os.environ["MIOCORE_USER_DB_PATH"] = str(args.db)

    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "date": time.strftime("%Y-%m-%d"),
        "layout": args.layout,
        # "cudnn": own kernels alone; "": every plugin (the all-plugin column)
        "disabled_plugins": os.environ.get("MIOCORE_DISABLE_PLUGINS", ""),
    }
    if not args.skip_extras:
        result["host_overhead"] = bench_host_overhead(torch)
        print(json.dumps(result["host_overhead"]), flush=True)
        result["find"] = bench_find_cold_warm()
        print(json.dumps(result["find"]), flush=True)
    rates = {mode: matmul_tflops(mode) for mode in args.dtypes}
    result["matmul_tflops"] = rates
    print(json.dumps({"matmul_tflops": rates}), flush=True)
    rows: list[dict[str, Any]] = []
    stream = torch.cuda.current_stream()
    handles = {
        "exact": miocore.Handle("cuda", stream=stream),
        "tf32": miocore.Handle("cuda", stream=stream, math_mode="tf32"),
    }
    for mode in args.dtypes:
        handle = handles["tf32" if mode == "tf32" else "exact"]
        for suite in args.suites:
            rows += bench_suite(args, suite, mode, handle, rates[mode])
            result["layers"] = rows
            result["summary"] = summarize(rows)
            result["late_queues"] = LATE_QUEUES["count"]  # timings queued again (device_ms)
            if args.out:  # after every suite: a run cut off still leaves its results
                args.out.write_text(json.dumps(result, indent=1))
    for name, s in result.get("summary", {}).items():
        g = s["geomean_speedup"]
        print(
            f"{name:42s} cuDNN/miocore {g if g is None else round(g, 2)} over {s['layers']}, "
            f"faster in {s['faster']}, failed {s['failed']}, winners {s['families']}"
        )
    late = LATE_QUEUES["count"]
    print(f"timings queued again behind a longer sleep (the host fell behind): {late}")


if __name__ == "__main__":
    main()
