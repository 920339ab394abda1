"""miocore on the CPU against PyTorch's CPU convolution (oneDNN), in the same run.

For every layer of a suite and every direction: find (NORMAL mode, fresh database) picks the
best solution among the installed solvers, optionally of one family only; then the winner and
PyTorch's convolution are timed by the same loop (median after warm-up), and the ratio
``torch time / miocore time`` is printed (> 1: miocore is faster), with the winning solver and
a geometric mean per direction (and per kind of layer: depthwise, grouped, dense).

    python benchmarks/cpu_vs_onednn.py --suite resnet50 --batch 1 8 --family gemm
    python benchmarks/cpu_vs_onednn.py --suite convnext_t_dw --batch 1 8 --threads 2

PyTorch is a benchmark-only dependency: ``pip install torch`` (the CPU build). Both sides get
the same thread count (``--threads``, default 1): set in the environment before any BLAS loads,
on miocore's handle (``CpuBackend.set_threads``: every BLAS pool and numba's) and in torch. The
two sides are timed alternately, ``--repeats`` rounds of a median each, and the median round
kept, because the machine is shared and its load drifts within seconds.

The header names the kernels numpy's OpenBLAS runs. oneDNN picks its code from the CPU's
feature flags, OpenBLAS from the CPU model: on a virtual machine that hides an AVX-512 CPU's
model, run with ``OPENBLAS_CORETYPE=SkylakeX`` (docs/environment.md), or the GEMM-based
solvers run AVX2 code against oneDNN's AVX-512 (ResNet-50 at one thread on the development VM,
2026-11-27: 0.80 against 1.37 forward).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from thread_env import threads_from_argv

THREADS = threads_from_argv()

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from common import geomean, machine, median_ms  # noqa: E402
from shapes import SUITES, problem  # noqa: E402

import miocore  # noqa: E402

DIRECTIONS = {"F": "forward", "B": "backward_data", "W": "backward_weights"}


def torch_runner(problem: miocore.ConvProblem, arrays: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    """A zero-argument callable running the same convolution in PyTorch."""
    import torch

    memory = torch.channels_last if problem.x.layout == "NHWC" else torch.contiguous_format

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a).astype(np.float32)).to(memory_format=memory)

    x, w, dy = tensor(arrays["x"]), tensor(arrays["w"]), tensor(arrays["y"])
    conv = problem.conv
    args = dict(
        stride=list(conv.strides),
        padding=list(conv.pads),
        dilation=list(conv.dilations),
        groups=conv.groups,
    )
    if problem.direction is miocore.Direction.FORWARD:
        return lambda: torch.nn.functional.conv2d(x, w, **args)
    mask = (
        [True, False, False]
        if problem.direction is miocore.Direction.BACKWARD_DATA
        else [False, True, False]
    )

    def backward() -> object:
        return torch.ops.aten.convolution_backward(
            dy,
            x,
            w,
            None,
            args["stride"],
            args["padding"],
            args["dilation"],
            False,
            [0, 0],
            args["groups"],
            mask,
        )

    return backward


def interleaved(ours: object, theirs: object, repeats: int) -> tuple[float, float]:
    """Median milliseconds of both callables, timed in alternating rounds (median of rounds)."""
    a, b = [], []
    for _ in range(repeats):
        a.append(median_ms(ours, min_total_s=0.1))  # type: ignore[arg-type]
        b.append(median_ms(theirs, min_total_s=0.1))  # type: ignore[arg-type]
    return statistics.median(a), statistics.median(b)


def kind_of(layer: object) -> str:
    """``depthwise`` (groups == channels), ``grouped`` (1 < groups < channels) or ``dense``."""
    groups, channels = layer.groups, layer.c  # type: ignore[attr-defined]
    return "depthwise" if groups == channels > 1 else "grouped" if groups > 1 else "dense"


def run(args: argparse.Namespace) -> list[dict]:
    """Benchmark every requested layer and direction; return one row per case."""
    import torch

    torch.set_num_threads(THREADS)
    registry = miocore.default_registry()
    if args.family:
        wanted = miocore.Algorithm.parse(args.family)
        kept = [r.solver for r in registry.solvers if r.algorithm is wanted]
        registry = miocore.Registry.from_solvers(kept)
    rows = []
    with tempfile.TemporaryDirectory() as db:
        handle = miocore.Handle("cpu", registry=registry, user_db_path=db)
        handle.backend.set_threads(THREADS)
        for suite, batches in args.suites:
            for batch in batches:
                for layer in SUITES[suite]:
                    if args.only and layer.name not in args.only:
                        continue
                    for letter in args.directions:
                        p = problem(layer, batch, DIRECTIONS[letter], args.dtype, args.layout)
                        arrays = miocore.reference.random_inputs(p, 0)
                        sols = handle.find_solutions(
                            p, find_mode="NORMAL", exhaustive=args.exhaustive
                        )
                        best = sols[0]
                        ws = handle.backend.allocate_workspace(best.workspace_size)
                        ours, theirs = interleaved(
                            lambda b=best, a=arrays, w=ws: handle.run_solution(b, **a, workspace=w),
                            torch_runner(p, arrays),
                            args.repeats,
                        )
                        row = dict(
                            suite=suite,
                            batch=batch,
                            layer=layer.name,
                            kind=kind_of(layer),
                            dir=letter,
                            torch_ms=theirs,
                            miocore_ms=ours,
                            ratio=theirs / ours,
                            solver=best.solver,
                            family=best.algorithm.value,
                            gflops=p.flops / (ours * 1e6),
                        )
                        rows.append(row)
                        print(
                            f"{suite:8} b{batch:<3} {layer.name:9} {letter}  "
                            f"torch {theirs:9.3f} ms  "
                            f"miocore {ours:9.3f} ms  ratio {row['ratio']:5.2f}  {best.solver}",
                            flush=True,
                        )
    return rows


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    """The results as markdown tables: per case, then geometric means per suite and direction."""
    import torch

    scope = f"family {args.family}" if args.family else "all installed families (Find-best)"
    out = [
        f"Machine: {machine()}, PyTorch {torch.__version__} ({torch.get_num_threads()} threads). "
        f"Date: {dt.date.today().isoformat()}. miocore: {scope}, {args.dtype}, {args.layout}.",
        "",
    ]
    out.append("| suite | batch | layer | dir | oneDNN ms | miocore ms | oneDNN/miocore | winner |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        out.append(
            f"| {r['suite']} | {r['batch']} | {r['layer']} | {r['dir']} | {r['torch_ms']:.3f} | "
            f"{r['miocore_ms']:.3f} | {r['ratio']:.2f} | {r['solver']} |"
        )
    out += ["", "| suite | batch | dir | geomean oneDNN/miocore | cases |", "|---|---|---|---|---|"]
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["suite"], r["batch"], r["dir"]), []).append(r["ratio"])
        groups.setdefault((r["kind"], "-", r["dir"]), []).append(r["ratio"])
        groups.setdefault(("all", "-", r["dir"]), []).append(r["ratio"])
    for (suite, batch, letter), ratios in groups.items():
        out.append(f"| {suite} | {batch} | {letter} | {geomean(ratios):.2f} | {len(ratios)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), default=None)
    parser.add_argument(
        "--batch",
        action="append",
        nargs="+",
        type=int,
        default=None,
        help="batch sizes, one --batch per --suite",
    )
    parser.add_argument("--dir", dest="directions", default="FBW", help="letters of F, B, W")
    parser.add_argument("--family", default=None, help="restrict miocore to one algorithm family")
    parser.add_argument("--only", nargs="*", default=None, help="layer names to run")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--layout", default="NCHW")
    parser.add_argument(
        "--exhaustive", action="store_true", help="tune tunable solvers during find"
    )
    parser.add_argument("--markdown", type=Path, default=None, help="also write the tables here")
    parser.add_argument("--repeats", type=int, default=3, help="alternating timing rounds")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for both sides (BLAS pools and torch); default 1 because "
        "spinning 2-thread pools on a shared 2-vCPU machine time erratically",
    )
    args = parser.parse_args(argv)
    suites = args.suite or ["resnet50"]
    batches = args.batch or [[1]] * len(suites)
    if len(batches) != len(suites):
        parser.error("give one --batch per --suite")
    args.suites = list(zip(suites, batches, strict=True))
    rows = run(args)
    text = markdown(rows, args)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
