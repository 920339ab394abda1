"""What a remembered call's graph replay costs on the host, piece by piece, and whether a graph
may be launched into a stream that someone else is capturing.

One small fp16 problem, run three times through ``Handle.run_solution`` so that its launches are
kept as a graph; then loops of calls with the GPU held busy (a sleep queued first, so every
launch returns at once), median over rounds, µs per call:

* ``replay``: the graph's ``replay()`` as the runner calls it (capture check + launch);
* ``is_capturing_bindings`` / ``graph_launch_bindings``: the two driver calls through
  ``cuda.bindings`` alone;
* ``is_capturing_ctypes`` / ``graph_launch_ctypes``: the same two calls through ``ctypes`` on
  ``libcuda`` (the handles read once);
* ``run_solution``: the whole remembered call.

Then the capture probe: a ``torch.cuda.graph`` capture during which the kept graph is launched
on the capturing stream; reports the launch's error code, whether the capture survived, and
whether replaying the captured graph recomputes the output.

    python benchmarks/gpu_replay_cost.py --out replay.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import miocore

sys.path.insert(0, str(Path(__file__).parent))
from shapes import Layer, problem


def per_call_us(fn: Any, calls: int, rounds: int) -> float:
    """Median over ``rounds`` of the host time of ``calls`` calls, the GPU kept busy."""
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--solver", nargs="+", default=["direct.gpu_naive", "gemm.gpu_nhwc"])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    libcuda = ctypes.CDLL("libcuda.so.1")
    is_capturing = libcuda.cuStreamIsCapturing
    is_capturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    is_capturing.restype = ctypes.c_int
    graph_launch = libcuda.cuGraphLaunch
    graph_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    graph_launch.restype = ctypes.c_int

    stream = torch.cuda.current_stream()
    h = miocore.Handle("cuda", stream=stream)
    p = problem(Layer("small", 64, 64, 14, 3, 1, 1), 2, "forward", dtype="float16", layout="NHWC")
    cl = torch.channels_last
    x = torch.randn(2, 64, 14, 14, device="cuda", dtype=torch.float16).contiguous(memory_format=cl)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).contiguous(memory_format=cl)
    y = torch.empty(2, 64, 14, 14, device="cuda", dtype=torch.float16).contiguous(memory_format=cl)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "solvers": {}}
    for name in args.solver:
        sol = next((s for s in h.get_solutions(p) if s.solver == name), None)
        if sol is None:
            report["solvers"][name] = "not applicable"
            continue
        ws = h.backend.allocate_workspace(sol.workspace_size)
        for _ in range(3):
            h.run_solution(sol, x=x, w=w, y=y, workspace=ws)
        torch.cuda.synchronize()
        kept = [e for e in h.runner._remembered.values() if e[0].solver == name]
        graph = kept[0][4] if kept else None
        row: dict[str, Any] = {}
        row["run_solution"] = per_call_us(
            lambda sol=sol, ws=ws: h.run_solution(sol, x=x, w=w, y=y, workspace=ws),
            args.calls,
            args.rounds,
        )
        if graph is not None:
            row.update(parts(graph, h.backend.stream_object, is_capturing, graph_launch, args))
        report["solvers"][name] = row
        print(json.dumps({name: row}), flush=True)
    report["capture_probe"] = capture_probe(h, p, x, w, y, graph_launch)
    print(json.dumps(report["capture_probe"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


def parts(graph: Any, s_obj: Any, is_capturing: Any, graph_launch: Any, args: Any) -> dict:
    """The replay and its two driver calls, through cuda.bindings and through ctypes."""
    from cuda.bindings import driver as cu

    s_int, g_int = int(s_obj), int(graph.executable)
    status_p = ctypes.pointer(ctypes.c_int())
    calls, rounds = args.calls, args.rounds
    return {
        "replay": per_call_us(graph.replay, calls, rounds),
        "is_capturing_bindings": per_call_us(lambda: cu.cuStreamIsCapturing(s_obj), calls, rounds),
        "graph_launch_bindings": per_call_us(
            lambda: cu.cuGraphLaunch(graph.executable, s_obj), calls, rounds
        ),
        "is_capturing_ctypes": per_call_us(lambda: is_capturing(s_int, status_p), calls, rounds),
        "graph_launch_ctypes": per_call_us(lambda: graph_launch(g_int, s_int), calls, rounds),
        "nodes": graph.nodes,
    }


def capture_probe(h: Any, p: Any, x: Any, w: Any, y: Any, graph_launch: Any) -> dict[str, Any]:
    """Launch a kept graph into a stream torch is capturing: does the capture survive, and
    does its replay recompute the output?"""
    sol = h.get_solutions(p)[0]
    ws = h.backend.allocate_workspace(sol.workspace_size)
    for _ in range(3):
        h.run_solution(sol, x=x, w=w, y=y, workspace=ws)
    torch.cuda.synchronize()
    kept = [e for e in h.runner._remembered.values() if e[0].solver == sol.solver]
    graph = kept[0][4] if kept else None
    out: dict[str, Any] = {"solver": sol.solver, "graph": graph is not None}
    if graph is None:
        return out
    side = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    expected = y.clone()
    try:
        with torch.cuda.graph(g, stream=side):
            out["error"] = int(graph_launch(int(graph.executable), side.cuda_stream))
        out["capture_ended"] = True
    except Exception as exc:  # the capture was invalidated
        out["capture_ended"] = False
        out["capture_error"] = str(exc)[:300]
        return out
    y.zero_()
    g.replay()
    torch.cuda.synchronize()
    out["replay_recomputes"] = bool(torch.equal(y, expected))
    return out


if __name__ == "__main__":
    main()
