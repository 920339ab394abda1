"""miocore's Find-best with and without the miocore-cudnn plugin, against PyTorch's cuDNN.

For every ResNet-50 layer (batch 32, channels_last by default), precision (``--dtypes``:
``float16``, ``bfloat16``, ``float32`` exact, ``tf32``) and direction, three times:

* ``all``: Find (NORMAL) with every installed plugin, cuDNN's engines included;
* ``own``: Find with ``MIOCORE_DISABLE_PLUGINS=cudnn``: miocore's own kernels only;
* ``torch``: PyTorch's convolution on cuDNN with ``torch.backends.cudnn.benchmark = True``.

Each side is timed as ``benchmarks/gpu_vs_cudnn.py`` times it (device events around each of
``--runs`` runs after ``--warmup``, median, launches queued behind a long sleep), on the same
tensors. Printed per row and summarised as geometric means: ``torch/all`` (> 1: miocore with
the plugin is faster than PyTorch), ``torch/own`` and ``own/all`` (what the plugin adds), plus
how often a cuDNN engine won the all-plugin find and the host wall time per ``run_solution``
call of the all-plugin winner. Needs the cuDNN frontend on the device
(``plugins/cudnn/gpu_prepare.sh``); without it ``all`` equals ``own`` and says so.

    python benchmarks/gpu_cudnn_plugin.py --out cudnn_plugin.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from common import geomean
from gpu_vs_cudnn import BATCH, _tensor, device_ms, set_precision, torch_call
from shapes import SUITES, problem

import miocore

DIRECTIONS = ("forward", "backward_data", "backward_weights")


def registries() -> tuple[miocore.Registry, miocore.Registry]:
    """(every installed plugin, the same with the cudnn plugin disabled through
    ``MIOCORE_DISABLE_PLUGINS`` as a user would)."""
    before = os.environ.get("MIOCORE_DISABLE_PLUGINS")
    everything = miocore.Registry.discover()
    os.environ["MIOCORE_DISABLE_PLUGINS"] = ",".join(filter(None, [before, "cudnn"]))
    try:
        own = miocore.Registry.discover()
    finally:
        if before is None:
            del os.environ["MIOCORE_DISABLE_PLUGINS"]
        else:
            os.environ["MIOCORE_DISABLE_PLUGINS"] = before
    return everything, own


def cudnn_loads(registry: miocore.Registry) -> bool:
    """Whether cudnn.* solvers are registered and the cuDNN frontend loads (else they all
    decline, and the all-plugin find is miocore's own)."""
    if not any(s.name.startswith("cudnn.") for s in registry.solvers):
        return False
    from miocore_cudnn import _loader

    module, reason = _loader.frontend()
    if module is None:
        print(f"note: the cudnn plugin is installed but declines everything: {reason}")
    return module is not None


def host_us(handle: miocore.Handle, best: Any, tensors: dict[str, Any], ws: Any) -> float:
    """Wall microseconds per ``run_solution`` call over a loop of 200 (device idle first)."""
    torch.cuda.synchronize()
    calls = 200
    start = time.perf_counter()
    for _ in range(calls):
        handle.run_solution(best, workspace=ws, **tensors)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return 1e6 * elapsed / calls


def find_and_time(
    handle: miocore.Handle, p: miocore.ConvProblem, tensors: dict[str, Any], args: Any
) -> dict[str, Any]:
    """Find-best (NORMAL) on the caller's tensors, then its device time and host cost."""
    start = time.perf_counter()
    sols = handle.find_solutions(p, find_mode="NORMAL", **tensors)
    out: dict[str, Any] = {"find_s": round(time.perf_counter() - start, 3)}
    best = sols[0]
    out["solver"] = best.solver
    out["perf_config"] = dict(best.perf_config) if best.perf_config else None
    out["top"] = {s.solver: round(s.time_ms, 4) for s in sols[:4]}
    ws = handle.backend.allocate_workspace(best.workspace_size)

    def run() -> None:
        handle.run_solution(best, workspace=ws, **tensors)

    out["ms"] = device_ms(run, args.warmup, args.runs)
    out["host_us"] = round(host_us(handle, best, tensors, ws), 2)
    return out


def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    everything, own = registries()
    has_cudnn = cudnn_loads(everything)
    stream = torch.cuda.current_stream()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.dtypes:
            set_precision(mode)
            torch.backends.cudnn.benchmark = True
            math_mode = "tf32" if mode == "tf32" else "exact"
            dtype = "float32" if mode == "tf32" else mode
            handles = {
                side: miocore.Handle(
                    "cuda",
                    registry=reg,
                    stream=stream,
                    math_mode=math_mode,
                    user_db_path=Path(tmp) / f"{side}-{mode}",
                )
                for side, reg in (("all", everything), ("own", own))
            }
            tdtype = getattr(torch, dtype)
            for layer in SUITES["resnet50"]:
                if args.layers and layer.name not in args.layers:
                    continue
                p0 = problem(layer, BATCH["resnet50"], dtype=dtype, layout=args.layout)
                tensors = {
                    "x": _tensor(p0.x.lengths, tdtype, args.layout),
                    "w": _tensor(p0.w.lengths, tdtype, args.layout, 0.05),
                    "y": _tensor(p0.y.lengths, tdtype, args.layout),
                }
                for direction in args.directions:
                    p = miocore.ConvProblem(direction, x=p0.x, w=p0.w, y=p0.y, conv=p0.conv)
                    row: dict[str, Any] = {
                        "layer": layer.name, "precision": mode, "direction": direction,
                        "key": p.key, "cudnn_plugin": has_cudnn,
                    }  # fmt: skip
                    for side, h in handles.items():
                        try:
                            row[side] = find_and_time(h, p, tensors, args)
                        except Exception as exc:  # recorded; the suite goes on
                            row[side] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                    call = torch_call(direction, layer, tensors["x"], tensors["w"], tensors["y"])
                    row["torch_ms"] = device_ms(call, args.warmup, args.runs)
                    for side in ("all", "own"):
                        if "ms" in row[side]:
                            row[f"torch/{side}"] = row["torch_ms"] / row[side]["ms"]
                    if "ms" in row["all"] and "ms" in row["own"]:
                        row["own/all"] = row["own"]["ms"] / row["all"]["ms"]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if args.out:  # kept current, so a run cut short still leaves its rows
                        args.out.write_text(json.dumps({"rows": rows}, indent=1))
                tensors.clear()
                torch.cuda.empty_cache()
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per precision and direction: geomean ratios and how often cuDNN won the find."""
    out: dict[str, Any] = {}
    for mode, direction in sorted({(r["precision"], r["direction"]) for r in rows}):
        sel = [r for r in rows if (r["precision"], r["direction"]) == (mode, direction)]
        entry: dict[str, Any] = {"layers": len(sel)}
        for ratio in ("torch/all", "torch/own", "own/all"):
            values = [r[ratio] for r in sel if ratio in r]
            entry[ratio] = round(geomean(values), 3) if values else None
        entry["cudnn_won"] = sum(r["all"].get("solver", "").startswith("cudnn.") for r in sel)
        hosts = [r["all"]["host_us"] for r in sel if "host_us" in r["all"]]
        entry["all_host_us_median"] = sorted(hosts)[len(hosts) // 2] if hosts else None
        out[f"{mode}/{direction}"] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "tf32"],
                        choices=["float16", "bfloat16", "float32", "tf32"])  # fmt: skip
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS), choices=DIRECTIONS)
    parser.add_argument("--layers", nargs="*", default=[])
    parser.add_argument("--layout", default="NHWC", choices=["NHWC", "NCHW"])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = bench(args)
    summary = summarize(rows)
    print(json.dumps(summary, indent=1))
    if not any(r["cudnn_plugin"] for r in rows):
        print("note: cuDNN's engines were not available: 'all' measured miocore's own kernels")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
