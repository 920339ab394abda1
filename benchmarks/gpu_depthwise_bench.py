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
GB/s (x + w + y bytes once over the time) against a measured device copy rate.

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
from gpu_vs_cudnn import device_ms
from miocore_direct.gpu_depthwise_geometry import NHWC_MIN_BLOCKS
from miocore_direct.gpu_depthwise_nhwc_tile import NHWC_TILE_RUNS, is_nhwc_tile, nhwc_tile_configs
from shapes import SUITES, problem

import miocore
from miocore import PerfConfig
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


def tile_runs(solver: Any, ctx: Any, canon: Any, count: int) -> list[PerfConfig]:
    """The first ``count`` staged tiles whose two buffers fit, capped and not, in runs of
    every length of ``NHWC_TILE_RUNS``."""

    def valid(cfg: PerfConfig) -> bool:
        return solver.is_valid_perf_config(ctx, canon, cfg)

    tiles = [c for c in nhwc_tile_configs(canon) if "nt" not in c]  # single tiles
    bases = [c for c in tiles if "mb" not in c and valid(PerfConfig(**c, nt=2))][:count]
    out = []
    for cfg in tiles:
        if PerfConfig(**{k: v for k, v in cfg.items() if k != "mb"}) in bases:
            out += [r for r in (PerfConfig(**cfg, nt=nt) for nt in NHWC_TILE_RUNS) if valid(r)]
    return out


def tma_twin(config: PerfConfig) -> PerfConfig:
    """The same staged tile loaded the other way: by TMA if it used cp.async, and back."""
    rest = {k: v for k, v in config.items() if k != "tma"}
    return PerfConfig(**rest) if config.get("tma") else PerfConfig(**rest, tma=1)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--suite", default="mobilenetv2", choices=sorted(SUITES))
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument("--layouts", nargs="+", default=["NHWC", "NCHW"])
    parser.add_argument(
        "--directions", nargs="+", default=["forward", "backward_data", "backward_weights"]
    )
    parser.add_argument(
        "--configs", type=int, default=3, help="neighbours of the default tried (0: all)"
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
    parser.add_argument(
        "--nhwc-tiles",
        type=int,
        default=0,
        help="also the first N staged-tile configs of dw_nhwc_tile (each capped and uncapped)",
    )
    parser.add_argument(
        "--tile-runs",
        action="store_true",
        help="with --nhwc-tiles N: the first N tiles whose two staging buffers fit (capped and "
        "not) also in runs of 2, 4 and 8 tiles a block (the nt key: the next tile's input "
        "copied while one computes)",
    )
    parser.add_argument(
        "--space-runs",
        action="store_true",
        help="also every run of staged tiles in the solver's space (each tile shape, channel "
        "block and outputs a thread, capped for 3 blocks, in runs of 2, 4 and 8)",
    )
    parser.add_argument(
        "--minb",
        action="store_true",
        help="also every channels-innermost pick with its registers capped (the mb key)",
    )
    parser.add_argument(
        "--tma-twins",
        action="store_true",
        help="also each staged-tile pick without tma staged by the tensor memory accelerator",
    )
    add_experiment_options(parser)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--layers", nargs="+", default=None, help="only these layers (names)")
    parser.add_argument(
        "--tile-only",
        action="store_true",
        help="with --configs 0: the default and the staged-tile configs only (dw_nhwc_tile's, "
        "dw_wrw_tile's)",
    )
    args = parser.parse_args()
    if args.wrw_acc is not None:  # an experiment: which configs a larger budget opens
        import miocore_direct.gpu_depthwise_geometry as dw

        dw.MAX_WRW_ACC = args.wrw_acc
    if args.nchw_chunk_bytes is not None:  # an experiment: the staging's load width
        import miocore_direct.gpu_depthwise_geometry as dw

        dw.NCHW_CHUNK_BYTES = args.nchw_chunk_bytes
    apply_experiment_options(args)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    solver = handle.registry.get(SOLVER).solver
    layers = [lay for lay in SUITES[args.suite] if lay.groups > 1 and lay.groups == lay.c]
    if args.layers:
        layers = [lay for lay in layers if lay.name in args.layers]
    copy_rate = copy_gbps()
    print(f"device copy rate: {copy_rate:.0f} GB/s", flush=True)

    # every config of every row first, compiled in parallel
    plan = []
    kernels = []
    for dtype in args.dtypes:
        for layout in args.layouts:
            for layer in layers:
                for direction in args.directions:
                    p = problem(layer, args.batch, direction, dtype=dtype, layout=layout)
                    canon = p.canonical
                    space = solver.perf_config_space(handle.context, canon)
                    default = solver.default_perf_config(handle.context, canon)
                    # the default and configs one key away from it (a local sweep)
                    near = [c for c in space if sum(c.get(k) != default[k] for k in default) == 1]
                    picks = [default]
                    for key in ("pix", "py", "tw", "vec", "ct", "by"):  # one per key
                        alt = [
                            c
                            for c in near
                            if key in c and key in default and c[key] != default[key]
                        ]
                        if key == "vec" and "vec" in default:  # another width, any ct
                            alt = [
                                c
                                for c in space
                                if c["vec"] != default["vec"]
                                and all(
                                    c.get(k) == default[k]
                                    for k in default
                                    if k not in ("vec", "ct")
                                )
                            ]
                        if alt and len(picks) <= args.configs:
                            picks.append(alt[0])
                    if args.configs == 0:  # the whole space, the default first
                        picks = [default, *(c for c in space if c != default)]
                        if args.tile_only:
                            staged = [c for c in picks[1:] if "cb" in c or is_nhwc_tile(c)]
                            picks = [default, *staged]
                    if args.nhwc_tiles:  # dw_nhwc_tile's first base tiles, capped or not
                        tiles = [c for c in nhwc_tile_configs(canon) if "nt" not in c]
                        base = [c for c in tiles if "mb" not in c][: args.nhwc_tiles]
                        uncapped = [PerfConfig(**{k: v for k, v in c.items() if k != "mb"})
                                    for c in tiles]  # fmt: skip
                        chosen = [c for c, u in zip(tiles, uncapped, strict=True) if u in base]
                        picks += [c for c in chosen if c not in picks]
                        if args.tile_runs:
                            picks += tile_runs(solver, handle.context, canon, args.nhwc_tiles)
                    if args.space_runs:
                        picks += [c for c in space if "nt" in c and c not in picks]
                    if args.tma_twins:  # a staged tile's twin staged the other way, if any
                        twins = [tma_twin(c) for c in picks if is_nhwc_tile(c)]
                        picks += [t for t in twins if t in space and t not in picks]
                    if args.minb:  # each pick again with dw_nhwc's registers capped
                        capped = [PerfConfig(**c, mb=m) for c in picks for m in NHWC_MIN_BLOCKS]
                        picks += [c for c in capped if c in space]
                    for cfg in picks:
                        kernels.extend(solver.get_solution(handle.context, canon, cfg).kernels)
                    plan.append((dtype, layout, layer, direction, p, picks))
    start = time.perf_counter()
    failures = handle.backend.precompile(kernels)
    print(f"compiled {len(kernels)} kernels in {time.perf_counter() - start:.1f} s", flush=True)
    if failures:
        print("compile failures:", next(iter(failures.values())), flush=True)

    rows = []
    tensors: dict[tuple, Any] = {}
    for dtype, layout, layer, direction, p, picks in plan:
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
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "cudnn": torch.backends.cudnn.version(),
                    "copy_gbps": copy_rate,
                    "options": " ".join(sys.argv[1:]),
                    "date": time.strftime("%Y-%m-%d"),
                    "rows": rows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
