"""The Triton implicit-GEMM solvers (miocore-triton) against cuDNN and miocore's other kernels.

For every layer of the chosen suites (groups == 1 layers; ``--layout`` NHWC or NCHW, the same
for both sides), precision and direction:

* cuDNN through PyTorch in benchmark mode (its own find);
* ``triton.igemm_*`` at its default configuration and at the best of its whole space (every
  configuration compiled first in ``--procs`` processes, then timed);
* miocore's NORMAL find over its own kernels (run this with ``MIOCORE_DISABLE_PLUGINS=cudnn``),
  which measures the Triton solver at its default among the others; the best non-Triton own
  solver re-timed, and the find's winner.

All timed the same way (``gpu_vs_cudnn.device_ms``: CUDA events around each run, queued
behind a sleep, median), with the fraction of the dense-matmul rate of the same precision
measured in the same run. Prints one JSON row per case and a summary: geometric means of
cuDNN time / miocore time per suite, precision and direction.

    MIOCORE_DISABLE_PLUGINS=cudnn python benchmarks/gpu_triton_bench.py --suites resnet50 \
        --dtypes float16 --out triton.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import dataclasses

import torch
from common import geomean
from gpu_vs_cudnn import (
    BATCH,
    DIRECTIONS,
    MODEL_BATCH,
    _tensor,
    device_ms,
    element_type,
    matmul_tflops,
    set_precision,
    suite_batch,
    suite_layers,
    torch_call,
)
from shapes import problem

import miocore

SOLVER = {
    "forward": "triton.igemm_fwd",
    "backward_data": "triton.igemm_bwd",
    "backward_weights": "triton.igemm_wrw",
}

_WORKER: dict[str, Any] = {}


def _build(kernels: list[miocore.KernelInfo]) -> dict[str, str]:
    """In a worker process: compile ``kernels`` into the shared binary cache."""
    if "handle" not in _WORKER:
        _WORKER["handle"] = miocore.Handle("cuda")
    return _WORKER["handle"].backend.precompile(kernels)


def precompile(cases: list[dict[str, Any]], procs: int) -> tuple[float, int, dict[str, str]]:
    """Every configuration's kernels of every case, built in ``procs`` processes."""
    infos: dict[tuple[str, tuple[str, ...]], miocore.KernelInfo] = {}
    for case in cases:
        for cfg in case["space"]:
            sol = case["solver"].get_solution(case["ctx"], case["p"], cfg)
            for k in sol.kernels:
                infos.setdefault((k.kernel_name, k.options), k)
    items = list(infos.values())
    chunks = [items[i::procs] for i in range(procs)]
    start = time.perf_counter()
    failures: dict[str, str] = {}
    with ProcessPoolExecutor(procs, mp_context=get_context("spawn")) as pool:
        for result in pool.map(_build, [c for c in chunks if c]):
            failures.update(result)
    return time.perf_counter() - start, len(items), failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suites", nargs="+", default=["resnet50"], choices=[*BATCH, *MODEL_BATCH])
    parser.add_argument("--dtypes", nargs="+", default=["float16"])
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS))
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--layout", default="NHWC", choices=("NHWC", "NCHW"))
    parser.add_argument("--procs", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-find", action="store_true", help="skip the own-kernel find")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    stream = torch.cuda.current_stream()
    handles = {
        mode: miocore.Handle("cuda", stream=stream, math_mode=mode) for mode in ("exact", "tf32")
    }
    cases = []
    for suite in args.suites:
        batch = suite_batch(suite)
        for layer in suite_layers(suite):
            if layer.groups != 1 or (args.layers and layer.name not in args.layers):
                continue
            for mode in args.dtypes:
                dtype = element_type(mode)
                h = handles["tf32" if mode == "tf32" else "exact"]
                for direction in args.directions:
                    p = problem(layer, batch, direction, dtype=dtype, layout=args.layout)
                    solver = h.registry.get(SOLVER[direction]).solver
                    applicable = solver.is_applicable(h.context, p)
                    cases.append({
                        "suite": suite, "layer": layer, "mode": mode, "direction": direction,
                        "p": p, "h": h, "ctx": h.context, "solver": solver,
                        "space": solver.perf_config_space(h.context, p) if applicable else [],
                        "reason": "" if applicable else applicable.reason,
                    })  # fmt: skip
    build_s, kernels, failures = precompile(cases, args.procs)
    print(json.dumps({"precompile_s": round(build_s, 1), "kernels": kernels,
                      "failures": len(failures)}), flush=True)  # fmt: skip
    rates = {mode: matmul_tflops("float16" if mode == "bfloat16" else mode) for mode in args.dtypes}
    torch.backends.cudnn.benchmark = True
    rows = []
    for case in cases:
        row = measure(case, args, rates[case["mode"]])
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "configs"}), flush=True)
        torch.cuda.empty_cache()
    summary = summarize(rows)
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "summary": summary, "rates": rates,
                                        "precompile_s": build_s, "kernels": kernels,
                                        "build_failures": failures}, indent=1))  # fmt: skip


def timed(h: miocore.Handle, sol: Any, tensors: dict[str, Any], args: argparse.Namespace) -> float:
    """Device time of one solution through the handle (its workspace allocated once)."""
    ws = h.backend.allocate_workspace(sol.workspace_size)

    def run() -> None:
        h.run_solution(sol, workspace=ws, **tensors)

    return device_ms(run, args.warmup, args.runs)


def measure(case: dict[str, Any], args: argparse.Namespace, rate: float) -> dict[str, Any]:
    """One case: cuDNN, the Triton solver's every configuration, the own-kernel find."""
    p, h, mode, layer, solver = case["p"], case["h"], case["mode"], case["layer"], case["solver"]
    set_precision(mode)
    tdtype = getattr(torch, p.dtype.value)
    tensors = {
        "x": _tensor(p.x.lengths, tdtype, args.layout),
        "w": _tensor(p.w.lengths, tdtype, args.layout, 0.05),
        "y": _tensor(p.y.lengths, tdtype, args.layout),
    }
    row: dict[str, Any] = {
        "suite": case["suite"], "layer": layer.name, "precision": mode, "layout": args.layout,
        "direction": case["direction"], "key": p.key, "gflop": p.flops / 1e9,
    }  # fmt: skip
    call = torch_call(case["direction"], layer, tensors["x"], tensors["w"], tensors["y"])
    row["cudnn_ms"] = device_ms(call, 3, args.runs)
    if case["reason"]:
        row["declined"] = case["reason"]
    else:
        base = next(s for s in h.get_solutions(p) if s.solver == solver.name)
        default = solver.default_perf_config(case["ctx"], p)
        times = {}
        for cfg in case["space"]:
            size = solver.workspace_size(case["ctx"], p, cfg)
            sol = dataclasses.replace(base, perf_config=cfg, workspace_size=size)
            try:
                times[cfg.to_string()] = timed(h, sol, tensors, args)
            except Exception as exc:
                row.setdefault("config_errors", {})[cfg.to_string()] = str(exc)[:200]
        if times:
            best = min(times, key=times.__getitem__)
            row["triton_best_ms"], row["triton_best_config"] = times[best], best
            row["triton_default_ms"] = times.get(default.to_string())
            row["triton_default_config"] = default.to_string()
            row["configs"] = {k: round(v, 4) for k, v in times.items()}
    if not args.no_find:
        start = time.perf_counter()
        sols = h.find_solutions(p, find_mode="NORMAL", **tensors)
        row["find_s"] = round(time.perf_counter() - start, 2)
        row["find_winner"] = sols[0].solver
        row["find_times"] = {s.solver: round(s.time_ms, 4) for s in sols[:6]}
        others = [s for s in sols if not s.solver.startswith("triton.")]
        if others:
            row["own_solver"] = others[0].solver
            row["own_ms"] = timed(h, others[0], tensors, args)
    row["cudnn_of_matmul"] = p.flops / row["cudnn_ms"] / 1e9 / rate
    if "triton_best_ms" in row:
        row["triton_of_matmul"] = p.flops / row["triton_best_ms"] / 1e9 / rate
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per suite, precision and direction: geomeans of cuDNN time over each miocore time."""
    out: dict[str, Any] = {}
    for key in sorted({(r["suite"], r["precision"], r["direction"]) for r in rows}):
        sel = [r for r in rows if (r["suite"], r["precision"], r["direction"]) == key]
        entry: dict[str, Any] = {"layers": len(sel)}
        for name in ("triton_best_ms", "triton_default_ms", "own_ms"):
            ratios = [r["cudnn_ms"] / r[name] for r in sel if r.get(name)]
            if ratios:
                entry[name.removesuffix("_ms")] = {
                    "geomean": round(geomean(ratios), 3),
                    "at_least_1": sum(x >= 1 for x in ratios),
                    "n": len(ratios),
                }
        both = [
            r["cudnn_ms"] / min(r["triton_best_ms"], r["own_ms"])
            for r in sel if r.get("triton_best_ms") and r.get("own_ms")
        ]  # fmt: skip
        if both:
            entry["own_with_triton_best"] = round(geomean(both), 3)
        # what NORMAL find gets: the Triton solver at its default among the others
        found = [
            r["cudnn_ms"] / min(r.get("triton_default_ms") or math.inf, r["own_ms"])
            for r in sel if r.get("own_ms")
        ]  # fmt: skip
        if found:
            entry["own_with_triton_default"] = {
                "geomean": round(geomean(found), 3),
                "at_least_1": sum(x >= 1 for x in found),
            }
        out["/".join(key)] = entry
    return out


if __name__ == "__main__":
    main()
