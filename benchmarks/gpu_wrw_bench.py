"""``igemm.gpu_mma_wrw`` (tensor-core backward weights) against cuDNN on ResNet-50, NHWC fp16.

For every layer (batch 32 by default): cuDNN's backward weights through PyTorch
(``torch.ops.aten.convolution_backward`` with output mask ``[False, True, False]`` on
channels_last tensors, ``cudnn.benchmark`` on), the solver's default config and a sweep of its
tuning space (every tile at its deepest pipeline, split-K around the default's, atomic and
slab reduction), each checked against cuDNN's dw. Timing: ``torch.cuda._sleep`` is enqueued
first so that the launches queue behind it and the events measure device time, not Python
launch overhead; events around each of ``--runs`` runs after ``--warmup``; median ms. Prints
per layer cuDNN/miocore ratios (default and best) and TFLOP/s, then the geomeans.

    python benchmarks/gpu_wrw_bench.py --out wrw.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from common import config_runner, geomean
from gpu_vs_cudnn import device_ms
from shapes import RESNET50, problem

import miocore

SOLVER = "igemm.gpu_mma_wrw"


def candidates(solver: Any, ctx: Any, canon: Any, limit: int) -> list[Any]:
    """The default first (and its atomic twin), then per tile (smallest bk, deepest pipeline)
    split-K at half, the same and twice that tile's default split (slabs), and bk 64 at the
    default split for the two largest tiles."""
    from miocore_igemm.gpu_wrw import _tile_rank, default_split

    default = solver.default_perf_config(ctx, canon)
    space = solver.perf_config_space(ctx, canon)
    out = [default, miocore.PerfConfig({**dict(default), "atomic": 1 - default["atomic"]})]
    by_tile: dict[tuple, list] = {}
    for c in space:
        by_tile.setdefault((c["bm"], c["bn"]), []).append(c)
    ranked = sorted(by_tile, key=lambda t: _tile_rank(canon, t), reverse=True)
    for rank, tile in enumerate(ranked):
        cfgs = by_tile[tile]
        base = default_split(ctx, canon, *tile)
        bk = min(c["bk"] for c in cfgs)
        for split in (base, base // 2, base * 2):
            pick = [c for c in cfgs if c["split"] == split and c["atomic"] == 0 and c["bk"] == bk]
            if pick:
                out.append(max(pick, key=lambda c: c["stages"]))
        if rank < 2:
            pick = [c for c in cfgs if c["split"] == base and c["atomic"] == 0 and c["bk"] > bk]
            if pick:
                out.append(max(pick, key=lambda c: c["stages"]))
    valid = [c for c in dict.fromkeys(out) if solver.is_valid_perf_config(ctx, canon, c)]
    return valid[: limit + 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--configs", type=int, default=40, help="configs tried besides default")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    solver = handle.registry.get(SOLVER).solver
    ctx = handle.context
    tdtype = getattr(torch, args.dtype)
    layers = [lay for lay in RESNET50 if not args.layers or lay.name in args.layers]
    plans = []
    for layer in layers:
        p = problem(layer, args.batch, "backward_weights", dtype=args.dtype, layout="NHWC")
        plans.append((layer, p, candidates(solver, ctx, p.canonical, args.configs)))
    kernels = [
        k
        for _, p, picks in plans
        for c in picks
        for k in solver.get_solution(ctx, p.canonical, c).kernels
    ]
    started = time.time()
    failures = handle.backend.precompile(kernels)
    print(f"compiled {len(set(kernels))} kernels in {time.time() - started:.1f} s", flush=True)
    for failure in list(failures.values())[:2]:
        print(failure[-2000:])

    rows: list[dict[str, Any]] = []
    cl = torch.channels_last
    for layer, p, picks in plans:
        x = torch.randn(p.x.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
        dy = torch.randn(p.y.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
        dw = torch.empty(p.w.lengths, device="cuda", dtype=tdtype).to(memory_format=cl)
        st, pd = [layer.stride] * 2, [layer.pad] * 2

        def cudnn(x=x, dy=dy, dw=dw, st=st, pd=pd, g=layer.groups) -> Any:
            return torch.ops.aten.convolution_backward(
                dy, x, dw, None, st, pd, [1, 1], False, [0, 0], g, [False, True, False]
            )

        row: dict[str, Any] = {"layer": layer.name, "gflop": p.flops / 1e9}
        row["cudnn_ms"] = device_ms(cudnn, args.warmup, args.runs)
        expected = cudnn()[1].float()
        scale = float(expected.abs().max())
        timings = []
        for cfg in picks:
            try:
                run = config_runner(handle, SOLVER, p, cfg, x, dw, dy)
                dw.fill_(float("nan"))
                run()
                torch.cuda.synchronize()
                err = float((dw.float() - expected).abs().max()) / scale
                ms = device_ms(run, args.warmup, args.runs)
                timings.append({"config": dict(cfg), "ms": ms, "rel_err": err})
            except Exception as exc:
                timings.append({"config": dict(cfg), "error": f"{type(exc).__name__}: {exc}"[:300]})
        row["configs"] = timings
        ok = [t for t in timings if "ms" in t and t["rel_err"] < 1e-2]
        if timings and "ms" in timings[0]:
            row["default_ms"], row["default_err"] = timings[0]["ms"], timings[0]["rel_err"]
            row["ratio_default"] = row["cudnn_ms"] / row["default_ms"]
        if ok:
            best = min(ok, key=lambda t: t["ms"])
            row["best_ms"], row["best_config"] = best["ms"], best["config"]
            row["ratio_best"] = row["cudnn_ms"] / best["ms"]
            row["tflops_best"] = p.flops / (best["ms"] * 1e-3) / 1e12
            row["tflops_cudnn"] = p.flops / (row["cudnn_ms"] * 1e-3) / 1e12
        bad = [t for t in timings if "error" in t or t["rel_err"] >= 1e-2]
        row["bad_configs"] = bad
        rows.append(row)
        print(
            f"{layer.name:10s} cudnn {row['cudnn_ms']:.4f} ms ({row.get('tflops_cudnn', 0):.0f} "
            f"TF/s)  default {row.get('default_ms', float('nan')):.4f} "
            f"(err {row.get('default_err', float('nan')):.1e}, ratio "
            f"{row.get('ratio_default', float('nan')):.3f})  best "
            f"{row.get('best_ms', float('nan')):.4f} ({row.get('tflops_best', 0):.0f} TF/s, "
            f"ratio {row.get('ratio_best', float('nan')):.3f}) {row.get('best_config')}"
            f"  bad {len(bad)}/{len(timings)}",
            flush=True,
        )
        for t in bad[:2]:
            print("   bad:", t)
    done = [r for r in rows if "ratio_best" in r]
    print(
        f"{args.dtype} batch {args.batch}: geomean cudnn/miocore best "
        f"{geomean([r['ratio_best'] for r in done]):.3f}, default "
        f"{geomean([r.get('ratio_default', 0) for r in done]):.3f} over {len(done)} layers",
        flush=True,
    )
    if args.out:
        summary = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(),
            "batch": args.batch,
            "dtype": args.dtype,
            "rows": rows,
        }
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
