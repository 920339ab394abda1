"""Host cost of one miocore call per GPU solver, and a network's convolutions end to end.

Part 1, per solver: on small problems (so the kernels cost little), every applicable GPU
solver's invoker is built, then three loops of calls are timed on the host while the GPU is
held busy by a queued ``torch.cuda._sleep`` (so no call ever waits for the device): the invoker
alone (arguments built once), ``run_solution``, ``immediate`` and, where the handle has it,
``prepare``'s callable and its ``run_at`` (addresses alone; also with two address triples in
turn, as a network's layers of one shape call it). Each figure is wall time per call, in
microseconds.

Part 2, a network: ResNet-50's 23 distinct convolution layers at batch 32, fp16, channels-last,
forward, each with its NORMAL-find best solution; one pass over all layers timed three ways:
the sum of the layers' device times (events around each call), the wall time of a pass of
back-to-back calls (host-bound when it is larger), and the same pass through cuDNN
(``F.conv2d``, benchmark mode).

    python benchmarks/gpu_call_cost.py --out cost.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from gpu_timing import host_ms
from shapes import SUITES

import miocore

SLEEP_CYCLES = 60_000_000  # ~30 ms at H100/H200 clocks: longer than any timed loop below


def tensor(desc: Any, gen: torch.Generator) -> torch.Tensor:
    """A random device tensor with ``desc``'s logical shape, dtype and strides."""
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[
        str(desc.dtype)
    ]
    storage = torch.empty(desc.element_space, dtype=dtype, device="cuda")
    storage.uniform_(-1, 1, generator=gen)
    return torch.as_strided(storage, desc.lengths, desc.strides)


def host_us(fn: Any, calls: int = 200, repeats: int = 5) -> float:
    """Median over ``repeats`` of the host wall time per call of ``calls`` calls, the GPU busy."""
    return host_ms(fn, calls, repeats) * 1e3


def device_ms(fn: Any, runs: int = 20) -> float:
    """Median device time of one call (events around it)."""
    for _ in range(3):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    torch.cuda._sleep(SLEEP_CYCLES // 4)
    for s, e in zip(starts, ends, strict=True):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def small_problems(dtypes: tuple[str, ...] = ("float16", "float32")) -> list[miocore.ConvProblem]:
    out = []
    for dtype in dtypes:
        for direction in ("forward", "backward_data", "backward_weights"):
            for f, pad in ((3, 1), (1, 0)):
                out.append(
                    miocore.ConvProblem.from_sizes(
                        direction,
                        n=2,
                        c=64,
                        k=64,
                        in_spatial=(14, 14),
                        filter_spatial=(f, f),
                        pads=(pad, pad),
                        dtype=dtype,
                        layout="NHWC",
                    )
                )
    out.append(
        miocore.ConvProblem.from_sizes(
            "forward",
            n=2,
            c=64,
            k=64,
            in_spatial=(14, 14),
            filter_spatial=(3, 3),
            pads=(1, 1),
            groups=64,
            dtype="float16",
            layout="NHWC",
        )
    )
    return out


def timed_solvers(solutions: list[Any], cudnn_engines: int) -> list[Any]:
    """The GPU solvers to time of one problem's solutions: miocore's own kernels, Triton's,
    and cuDNN's first ``cudnn_engines`` engines in the ranking (there are dozens)."""
    out, engines = [], 0
    for s in solutions:
        if s.solver.startswith("cudnn."):
            engines += 1
            if engines > cudnn_engines:
                continue
        elif "gpu" not in s.solver and not s.solver.startswith("triton."):
            continue
        out.append(s)
    return out


def per_solver(
    h: miocore.Handle,
    gen: torch.Generator,
    dtypes: tuple[str, ...] = ("float16", "float32"),
    cudnn_engines: int = 2,
) -> list[dict[str, Any]]:
    rows = []
    for p in small_problems(dtypes):
        arrays = {n: tensor(getattr(p, n), gen) for n in ("x", "w", "y")}
        for s in timed_solvers(list(h.get_solutions(p)), cudnn_engines):
            try:
                sol = h.compile_solution(p, s.solver)
                ws = torch.empty(max(sol.workspace_size, 1), dtype=torch.uint8, device="cuda")
                h.run_solution(sol, workspace=ws, **arrays)
                entry = h.invoker_cache.get(p.network_config, sol.solver)
                canon = p.canonical
                views = {n: h.backend.check_array(getattr(p, n), arrays[n], n) for n in arrays}
                if p.is_transposed:
                    views["x"], views["y"] = views["y"], views["x"]
                wsv = h.backend.check_workspace(ws, entry.workspace_size)
                params = miocore.InvokeParams(problem=canon, workspace=wsv, **views)
                row = {
                    "problem": p.key,
                    "solver": sol.solver,
                    "invoker_us": host_us(lambda: entry.invoker(h, params)),  # noqa: B023
                    "run_solution_us": host_us(
                        lambda: h.run_solution(sol, workspace=ws, **arrays)  # noqa: B023
                    ),
                    "immediate_us": host_us(
                        lambda: h.immediate(p, sol.solver, workspace=ws, **arrays)  # noqa: B023
                    ),
                    "device_ms": device_ms(lambda: entry.invoker(h, params)),  # noqa: B023
                }
                if hasattr(h, "prepare"):
                    run = h.prepare(sol, workspace=ws)
                    row["prepared_us"] = host_us(lambda: run(**arrays))  # noqa: B023
                    if hasattr(run, "run_at"):  # the torch front end's path: addresses alone
                        ptrs = [arrays[n].data_ptr() for n in ("x", "w", "y")]
                        row["run_at_us"] = host_us(lambda: run.run_at(*ptrs))  # noqa: B023
                        # A framework's pattern: two address triples in turn (graphs of both).
                        other = {n: tensor(getattr(p, n), gen) for n in ("x", "w", "y")}
                        alt = [ptrs, [other[n].data_ptr() for n in ("x", "w", "y")]]
                        turn = iter(range(10**9))
                        row["run_at_alternating_us"] = host_us(
                            lambda: run.run_at(*alt[next(turn) % 2])  # noqa: B023
                        )
            except Exception as exc:  # report and go on: one solver must not stop the table
                row = {"problem": p.key, "solver": s.solver, "error": repr(exc)[:200]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def network(h: miocore.Handle, gen: torch.Generator) -> dict[str, Any]:
    torch.backends.cudnn.benchmark = True
    layers = []
    for layer in SUITES["resnet50"]:
        p = miocore.ConvProblem.from_sizes(
            "forward",
            n=32,
            c=layer.c,
            k=layer.k,
            in_spatial=(layer.hw, layer.hw),
            filter_spatial=(layer.f, layer.f),
            strides=(layer.stride, layer.stride),
            pads=(layer.pad, layer.pad),
            dtype="float16",
            layout="NHWC",
        )
        arrays = {n: tensor(getattr(p, n), gen) for n in ("x", "w", "y")}
        sol = h.find_solutions(p, find_mode="NORMAL")[0]
        ws = torch.empty(max(sol.workspace_size, 1), dtype=torch.uint8, device="cuda")
        run = h.prepare(sol, workspace=ws) if hasattr(h, "prepare") else None
        layers.append((layer, p, sol, ws, arrays, run))
    torch.cuda.synchronize()

    def miocore_pass() -> None:
        for _, _, sol, ws, arrays, _ in layers:
            h.run_solution(sol, workspace=ws, **arrays)

    def prepared_pass() -> None:
        for *_, arrays, run in layers:
            run(**arrays)

    def cudnn_pass() -> None:
        for layer, _, _, _, arrays, _ in layers:
            torch.nn.functional.conv2d(
                arrays["x"], arrays["w"], stride=layer.stride, padding=layer.pad
            )

    def wall_ms(fn: Any, repeats: int = 10) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        out = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append(time.perf_counter() - start)
        return statistics.median(out) * 1e3

    device = sum(
        device_ms(lambda a=arrays, s=sol, w=ws: h.run_solution(s, workspace=w, **a))
        for _, _, sol, ws, arrays, _ in layers
    )
    result = {
        "layers": len(layers),
        "device_sum_ms": device,
        "run_solution_pass_ms": wall_ms(miocore_pass),
        "cudnn_pass_ms": wall_ms(cudnn_pass),
        "winners": [sol.solver for _, _, sol, *_ in layers],
    }
    if layers[0][-1] is not None:
        result["prepared_pass_ms"] = wall_ms(prepared_pass)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20):
        miocore_pass()
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
    result["profile"] = text.getvalue()
    return result


#: The real-networks issue's bound on host time per call, for every GPU solver (µs).
TARGET_US = 8.0


def print_summary(rows: list[dict[str, Any]]) -> None:
    """Median µs per call of each path, per solver (device µs for scale)."""
    columns = ("invoker_us", "run_solution_us", "immediate_us", "prepared_us", "run_at_us")
    by_solver: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if "error" not in row:
            key = row["solver"] if not row["solver"].startswith("cudnn.") else "cudnn.*"
            by_solver.setdefault(key, []).append(row)
    print(
        f"{'solver':22s} {'cases':>5s} {'device':>7s} "
        + " ".join(f"{c[:-3]:>12s}" for c in columns)
    )
    for name, group in sorted(by_solver.items()):
        device = statistics.median(r["device_ms"] * 1000 for r in group)
        cells = []
        for c in columns:
            values = [r[c] for r in group if c in r]
            cells.append(f"{statistics.median(values):12.1f}" if values else f"{'-':>12s}")
        print(f"{name:22s} {len(group):5d} {device:7.1f} " + " ".join(cells))
    # Against the target: at most TARGET_US per call, for every solver and problem.
    ok = [r for r in rows if "error" not in r]
    for c in (*columns[1:], "run_at_alternating_us"):
        values = [r[c] for r in ok if c in r]
        if values:
            within = sum(v <= TARGET_US for v in values)
            print(
                f"{c[:-3]:>22s}: median {statistics.median(values):5.1f} us, worst"
                f" {max(values):5.1f}, {within}/{len(values)} pairs at most {TARGET_US:g} us"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-network", action="store_true")
    parser.add_argument("--dtypes", nargs="+", default=["float16", "float32"])
    parser.add_argument("--cudnn-engines", type=int, default=2, help="cuDNN engines per problem")
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    with tempfile.TemporaryDirectory() as db:
        h = miocore.Handle("cuda", user_db_path=db, stream=torch.cuda.current_stream())
        result: dict[str, Any] = {"device": torch.cuda.get_device_name()}
        result["per_solver"] = per_solver(h, gen, tuple(args.dtypes), args.cudnn_engines)
        print_summary(result["per_solver"])
        if not args.skip_network:
            result["network"] = network(h, gen)
            print(result["network"]["profile"])
            print(json.dumps({k: v for k, v in result["network"].items() if k != "profile"}))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
