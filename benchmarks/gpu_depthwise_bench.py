"""``direct.gpu_depthwise`` against cuDNN on a network's depthwise layers (MobileNetV2's by
default, ``--suite`` picks another of ``shapes.SUITES``: ``efficientnet_b0_dw``,
``convnext_t_dw``), batch 64 unless ``--batch``.

For every dw layer, layout (NHWC, NCHW), dtype (fp32 with TF32 off, fp16) and direction: the
solver's default config and the best of a few configs from its space (``--configs N``
neighbours of the default, or ``--configs 0`` for the whole space) (each checked against
cuDNN's result: a config beyond ``WRONG`` times the dtype's tolerance is an error, never the
best), and cuDNN through PyTorch (``F.conv2d(groups=C)``;
``aten.convolution_backward`` for one gradient; ``cudnn.benchmark`` on), same layout on both
sides. Timing: ``torch.cuda._sleep`` first so the launches queue behind it (device time, not
Python launch time), events around each of ``--runs`` runs after ``--warmup``, median. Also
GB/s (x + w + y bytes once over the time) against a measured device copy rate. Each row's
kernels compile just before it is timed and the JSON is written after every row, so a run
cut off by its time limit keeps what it timed; ``--count`` counts the kernels on the host
first (``depthwise_picks.py`` chooses the configs; ``--vary`` narrows a sweep).

    python benchmarks/gpu_depthwise_bench.py --out depthwise.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from common import config_runner, geomean
from depthwise_picks import (
    add_pick_options,
    picks_for,
    registered_solver,
    stand_in_context,
    unique_kernels,
)
from gpu_vs_cudnn import device_ms
from shapes import SUITES, problem

import miocore
from miocore.testing import TOLERANCES

SOLVER = "direct.gpu_depthwise"
#: A config whose output is further from cuDNN's than this many times the dtype's tolerance
#: against the float64 reference (cuDNN's own rounding sits between) is wrong: reported as an
#: error and never the best.
WRONG = 4


def copy_gbps() -> float:
    """Device-to-device copy rate (bytes read + written per second) of a 1 GiB tensor."""
    a = torch.empty(2**28, device="cuda")
    b = torch.empty_like(a)
    ms = device_ms(lambda: b.copy_(a), 2, 10)
    return 2 * a.numel() * 4 / ms / 1e6


def cudnn_call(direction: str, x: Any, w: Any, y: Any, layer: Any) -> Any:
    """The cuDNN call (through PyTorch) of one direction."""
    s, p, g = [layer.stride] * 2, [layer.pad] * 2, layer.groups
    if direction == "forward":
        return lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p, groups=g)
    mask = [direction == "backward_data", direction == "backward_weights", False]
    aten = torch.ops.aten.convolution_backward
    return lambda: aten(y, x, w, None, s, p, [1, 1], False, [0, 0], g, mask)


def add_experiment_options(parser: argparse.ArgumentParser) -> None:
    """The solver's switches, as options for A/B runs (this script's and
    ``gpu_dw_profile.py``'s)."""
    parser.add_argument(
        "--tma-l2",
        choices=("wide", "narrow"),
        default=None,
        help="TMA maps' L2 promotion: 256 bytes (wide) or no wider than a box row of some of "
        "a pixel's channels (narrow; the solver's TMA_L2_NARROW, narrow as shipped)",
    )
    parser.add_argument(
        "--channel-blocks-first",
        choices=("on", "off"),
        default=None,
        help="whether dw_nhwc_tile launches a run of tiles' channel blocks next to each other "
        "(the solver's NHWC_TILE_CHANNELS_FIRST, on as shipped)",
    )


def apply_experiment_options(args: argparse.Namespace) -> None:
    """Sets the switches :func:`add_experiment_options` parsed."""
    import miocore_direct.gpu_depthwise_geometry as geometry
    import miocore_direct.gpu_depthwise_nhwc_tile as tiles

    if args.tma_l2 is not None:  # how much of L2's fetch a box row uses
        geometry.TMA_L2_NARROW = args.tma_l2 == "narrow"
    if args.channel_blocks_first is not None:  # the launch order's DRAM traffic
        tiles.NHWC_TILE_CHANNELS_FIRST = args.channel_blocks_first == "on"


def plan_rows(args: argparse.Namespace, layers: list, solver: Any, ctx: Any) -> list[tuple]:
    """(dtype, layout, layer, direction, problem, picks) for every row of the run."""
    plan = []
    for dtype in args.dtypes:
        for layout in args.layouts:
            for layer in layers:
                for direction in args.directions:
                    p = problem(layer, args.batch, direction, dtype=dtype, layout=layout)
                    row = (layer, direction, dtype, layout)
                    picks = picks_for(args, solver, ctx, p.canonical, row)
                    plan.append((dtype, layout, layer, direction, p, picks))
    return plan


def count_kernels(args: argparse.Namespace, layers: list) -> None:
    """Prints each row's configs and the kernels it would compile that no earlier row does,
    on a stand-in of the H200 (no GPU opened)."""
    solver, ctx = registered_solver(SOLVER), stand_in_context()
    seen: set = set()
    for dtype, layout, layer, direction, p, picks in plan_rows(args, layers, solver, ctx):
        kernels = unique_kernels(solver, ctx, p.canonical, picks)
        print(f"{layer.name} {direction} {dtype} {layout}: {len(picks)} configs, "
              f"{len(kernels - seen)} new kernels")  # fmt: skip
        seen |= kernels
    print(f"{len(seen)} kernels to compile cold (under 7 a second on the GPU machine)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--suite", default="mobilenetv2", choices=sorted(SUITES))
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument("--layouts", nargs="+", default=["NHWC", "NCHW"])
    parser.add_argument(
        "--directions", nargs="+", default=["forward", "backward_data", "backward_weights"]
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--wrw-acc",
        type=int,
        default=None,
        help="backward weights: accumulators per thread allowed (the solver's MAX_WRW_ACC)",
    )
    parser.add_argument(
        "--nchw-chunk-bytes",
        type=int,
        default=None,
        help="dw_nchw's staging load width (the solver's NCHW_CHUNK_BYTES; 0: element by element)",
    )
    add_pick_options(parser)
    add_experiment_options(parser)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--layers", nargs="+", default=None, help="only these layers (names)")
    parser.add_argument(
        "--count",
        action="store_true",
        help="only count the kernels each row would compile (on the host: no GPU needed)",
    )
    args = parser.parse_args()
    if args.wrw_acc is not None:  # an experiment: which configs a larger budget opens
        import miocore_direct.gpu_depthwise_geometry as dw

        dw.MAX_WRW_ACC = args.wrw_acc
    if args.nchw_chunk_bytes is not None:  # an experiment: the staging's load width
        import miocore_direct.gpu_depthwise_geometry as dw

        dw.NCHW_CHUNK_BYTES = args.nchw_chunk_bytes
    apply_experiment_options(args)
    layers = [lay for lay in SUITES[args.suite] if lay.groups > 1 and lay.groups == lay.c]
    if args.layers:
        layers = [lay for lay in layers if lay.name in args.layers]
    if args.count:  # sizes the run before a device call: cold compiles are what cost
        count_kernels(args, layers)
        return
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    solver = handle.registry.get(SOLVER).solver
    copy_rate = copy_gbps()
    print(f"device copy rate: {copy_rate:.0f} GB/s", flush=True)
    plan = plan_rows(args, layers, solver, handle.context)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "copy_gbps": copy_rate,
        "options": " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "rows": [],
    }
    rows = []
    tensors: dict[tuple, Any] = {}
    for dtype, layout, layer, direction, p, picks in plan:
        # each row's kernels compiled (in parallel) just before it is timed, and the results
        # written after every row: a run cut off by its time limit keeps what it timed
        kernels = [
            k
            for cfg in picks
            for k in solver.get_solution(handle.context, p.canonical, cfg).kernels
        ]
        start = time.perf_counter()
        failures = handle.backend.precompile(kernels)
        print(f"{layer.name} {direction} {dtype}: {len(picks)} configs, compiled in "
              f"{time.perf_counter() - start:.1f} s", flush=True)  # fmt: skip
        if failures:
            print("compile failures:", next(iter(failures.values())), flush=True)
        key = (dtype, layout, layer.name)
        if key not in tensors:
            tensors.clear()
            torch.cuda.empty_cache()
            tdtype = getattr(torch, dtype)
            fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
            gen = torch.Generator(device="cuda").manual_seed(0)

            def rand(
                shape: tuple, scale: float, tdtype: Any = tdtype, fmt: Any = fmt, gen: Any = gen
            ) -> Any:
                t = torch.randn(shape, device="cuda", generator=gen) * scale
                return t.to(tdtype).contiguous(memory_format=fmt)

            tensors[key] = (
                rand(p.x.lengths, 1.0),
                rand(p.w.lengths, 0.3),
                rand(p.y.lengths, 1.0),
            )
        x, w, y = tensors[key]
        row: dict[str, Any] = {
            "layer": layer.name,
            "layout": layout,
            "dtype": dtype,
            "direction": direction,
            "mbytes": p.bytes_moved / 1e6,
        }
        ref_fn = cudnn_call(direction, x, w, y, layer)
        row["cudnn_ms"] = device_ms(ref_fn, args.warmup, args.runs)
        out = ref_fn()
        if direction != "forward":
            out = out[0] if direction == "backward_data" else out[1]
        expected = out.float()
        target = {"forward": y, "backward_data": x, "backward_weights": w}[direction]
        keep = target.clone()
        timings = []
        for cfg in picks:
            try:
                fn = config_runner(handle, SOLVER, p, cfg, x, w, y)
                target.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                err = float((target.float() - expected).abs().max() / expected.abs().max())
                if not err <= WRONG * TOLERANCES[p.dtype]:  # NaN (unwritten) included
                    raise ValueError(f"wrong result: {err:.3g} of cuDNN's largest magnitude")
                ms = device_ms(fn, args.warmup, args.runs)
                timings.append({"config": dict(cfg), "ms": ms, "rel_err": err})
            except Exception as exc:  # a failing config is reported, the sweep goes on
                timings.append({"config": dict(cfg), "error": f"{type(exc).__name__}: {exc}"})
        target.copy_(keep)
        ok = [t for t in timings if "ms" in t]
        if ok:
            best = min(ok, key=lambda t: t["ms"])
            if "ms" in timings[0]:
                row["default_ms"] = timings[0]["ms"]
            row["best_ms"] = best["ms"]
            row["best_config"] = best["config"]
            row["max_rel_err"] = max(t["rel_err"] for t in ok)
            row["timings"] = [(t["config"], round(t["ms"], 5)) for t in ok]  # rule studies
            row["best_vs_cudnn"] = best["ms"] / row["cudnn_ms"]
            if "default_ms" in row:
                row["default_vs_cudnn"] = row["default_ms"] / row["cudnn_ms"]
            row["gbps"] = p.bytes_moved / best["ms"] / 1e6
            row["cudnn_gbps"] = p.bytes_moved / row["cudnn_ms"] / 1e6
        errors = [t for t in timings if "error" in t]
        if errors:
            row["errors"] = errors
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            args.out.write_text(json.dumps({**result, "rows": rows}, indent=1))

    print(
        f"\n{'layer':12} {'layout':6} {'dtype':8} {'dir':17} {'ours ms':>8} {'cudnn':>8} "
        f"{'ratio':>6} {'GB/s':>6} {'cuDNN':>6}"
    )
    for r in rows:
        if "best_ms" in r:
            print(
                f"{r['layer']:12} {r['layout']:6} {r['dtype']:8} {r['direction']:17} "
                f"{r['best_ms']:8.4f} {r['cudnn_ms']:8.4f} {r['best_vs_cudnn']:6.2f} "
                f"{r['gbps']:6.0f} {r['cudnn_gbps']:6.0f}"
            )
    print(f"\ncopy rate {copy_rate:.0f} GB/s; ratio = ours / cuDNN time (< 1: faster)")
    for dtype in args.dtypes:
        for layout in args.layouts:
            for direction in args.directions:
                sel = [
                    r
                    for r in rows
                    if (r["dtype"], r["layout"], r["direction"]) == (dtype, layout, direction)
                    and "best_vs_cudnn" in r
                ]
                best = [r["best_vs_cudnn"] for r in sel]
                dflt = [r["default_vs_cudnn"] for r in sel if "default_vs_cudnn" in r]
                wins = sum(v < 1 for v in best)
                print(
                    f"{dtype}/{layout}/{direction}: best/cuDNN geomean {geomean(best):.2f}, "
                    f"default/cuDNN {geomean(dflt):.2f}, faster on {wins}/{len(best)}, "
                    f"mean {statistics.mean(r['gbps'] for r in sel) if sel else 0:.0f} GB/s"
                )
    allr = [r["best_vs_cudnn"] for r in rows if "best_vs_cudnn" in r]
    print(f"all: geomean {geomean(allr):.2f}, faster on {sum(v < 1 for v in allr)}/{len(allr)}")


if __name__ == "__main__":
    main()
