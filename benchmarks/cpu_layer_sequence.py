"""A suite's layers run one after another, as a network's forward pass runs them: miocore's
Find-best of every layer against PyTorch's convolution (oneDNN), same inputs, same threads.

``cpu_vs_onednn.py`` times each layer in a loop of its own calls; a network alternates layers,
so each call follows another solver's (a BLAS GEMM after a numba kernel, a Winograd after a
GEMM), and thread pools that sleep between calls or spin into the next one show here and not
there.

    python benchmarks/cpu_layer_sequence.py --suite resnet50 --batch 1 --layout NHWC --threads 2

Prints the time of one pass over the suite on each side (median of ``--repeats`` rounds, the
sides alternating) and ``torch / miocore`` (> 1: miocore faster).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from thread_env import threads_from_argv

THREADS = threads_from_argv()

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from common import machine  # noqa: E402
from cpu_vs_onednn import torch_runner  # noqa: E402
from shapes import SUITES, problem  # noqa: E402

import miocore  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--layout", default="NHWC")
    parser.add_argument("--direction", default="forward")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(THREADS)
    with tempfile.TemporaryDirectory() as db:
        handle = miocore.Handle("cpu", user_db_path=db)
        handle.backend.set_threads(THREADS)
        ours, theirs, names = [], [], []
        for suite in args.suite:
            for layer in SUITES[suite]:
                p = problem(layer, args.batch, args.direction, "float32", args.layout)
                arrays = miocore.reference.random_inputs(p, 0)
                best = handle.find_solutions(p, find_mode="NORMAL")[0]
                ws = handle.backend.allocate_workspace(best.workspace_size)
                ours.append(lambda b=best, a=arrays, w=ws: handle.run_solution(b, **a, workspace=w))
                theirs.append(torch_runner(p, arrays))
                names.append(f"{layer.name}:{best.solver}")

        def one_pass(calls: list) -> float:
            start = time.perf_counter()
            for call in calls:
                call()
            return (time.perf_counter() - start) * 1e3

        one_pass(ours), one_pass(theirs)  # warm both
        a, b = [], []
        for _ in range(args.repeats):
            a.append(one_pass(ours))
            b.append(one_pass(theirs))
    mine, torch_ms = statistics.median(a), statistics.median(b)
    print(
        f"Machine: {machine()}. {'+'.join(args.suite)}, batch {args.batch}, {args.layout}, "
        f"{args.direction}, {THREADS} threads, {len(names)} layers in sequence: "
        f"torch {torch_ms:.3f} ms, miocore {mine:.3f} ms, torch / miocore {torch_ms / mine:.2f}"
    )


if __name__ == "__main__":
    main()
