"""``igemm.gpu_mma`` main loop before/after an edit of ``kernels/igemm_mma.cu``, against cuDNN.

Times the solver's default config on ResNet-50's 3x3 layers and conv1 (NHWC, batch 32,
forward and backward data) twice: compiled from ``igemm_mma.cu`` (after) and from another
source of the same kernel folder given by ``--before`` (a copy of the previous kernel, same
parameter struct), both checked against cuDNN's result; plus cuDNN itself. Device time:
``torch.cuda._sleep`` ahead of the timed runs, CUDA events, median (``benchmarks/gpu_vs_cudnn``).

    git show REV:plugins/igemm/src/miocore_igemm/kernels/igemm_mma.cu \
        > plugins/igemm/src/miocore_igemm/kernels/igemm_mma_before.cu   # delete it after
    python plugins/igemm/bench/bench_igemm_addr.py --before igemm/igemm_mma_before.cu
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import dataclasses  # noqa: E402

import torch  # noqa: E402  (imported at module import time, see gpu_common)
from gpu_igemm_bench import _cudnn  # noqa: E402
from gpu_vs_cudnn import device_ms, geomean  # noqa: E402
from shapes import RESNET50, problem  # noqa: E402

import miocore  # noqa: E402

SOLVER = "igemm.gpu_mma"
LAYERS = ["conv1"] + [lay.name for lay in RESNET50 if lay.f == 3]


def runner(handle: Any, p: Any, source: str | None, x: Any, w: Any, y: Any) -> Any:
    """The default config of the solver, its kernels compiled from ``source`` if given."""
    solver = handle.registry.get(SOLVER).solver
    canon = p.canonical
    sol = solver.get_solution(handle.context, canon, None)
    kernels = sol.kernels
    if source:
        kernels = tuple(dataclasses.replace(k, source=source) for k in kernels)
    invoker = sol.invoker_factory(handle.backend.compile(kernels))
    ws = handle.backend.allocate_workspace(sol.workspace_size)
    views = {
        name: handle.backend.check_array(getattr(p, name), t, name)
        for name, t in (("x", x), ("w", w), ("y", y))
    }
    params = miocore.InvokeParams(problem=canon, workspace=ws, **views)
    return lambda: invoker(handle, params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="kernel source of the 'before' build")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    handle = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    cl = torch.channels_last
    ratios: dict[str, list[tuple[float, float, float]]] = {}
    for direction in ("forward", "backward_data"):
        for layer in [lay for lay in RESNET50 if lay.name in LAYERS]:
            p = problem(layer, args.batch, direction, dtype="float16", layout="NHWC")
            x = torch.randn(p.x.lengths, device="cuda", dtype=torch.float16).to(memory_format=cl)
            w = (torch.randn(p.w.lengths, device="cuda", dtype=torch.float16) * 0.05).to(
                memory_format=cl
            )
            y = torch.randn(p.y.lengths, device="cuda", dtype=torch.float16).to(memory_format=cl)
            out = x if direction == "backward_data" else y
            fn = _cudnn(direction, x, w, y, layer.stride, layer.pad)
            expected = fn().float()
            scale = float(expected.abs().max())
            cudnn = device_ms(fn, 3, args.runs)
            ms, errs = {}, {}
            runs = {"before": runner(handle, p, args.before, x, w, y)}
            runs["after"] = runner(handle, p, None, x, w, y)
            for name, run in runs.items():
                out.fill_(float("nan"))
                run()
                errs[name] = float((out.float() - expected).abs().max()) / scale
            # interleaved twice, median of each: the two builds see the same clocks
            times: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(2):
                for name, run in runs.items():
                    times[name].append(device_ms(run, 3, args.runs))
            ms = {name: min(t) for name, t in times.items()}
            ratios.setdefault(direction, []).append(
                (cudnn / ms["before"], cudnn / ms["after"], ms["before"] / ms["after"])
            )
            print(
                f"{direction[:8]:8s} {layer.name:9s} cudnn {cudnn:.4f}  before {ms['before']:.4f}"
                f" ({cudnn / ms['before']:.2f})  after {ms['after']:.4f} "
                f"({cudnn / ms['after']:.2f})  speedup {ms['before'] / ms['after']:.2f}  "
                f"err {errs['before']:.1e} {errs['after']:.1e}",
                flush=True,
            )
    for direction, rows in ratios.items():
        b, a, sp = (geomean([r[i] for r in rows]) for i in range(3))
        print(f"{direction}: geomean cudnn/miocore before {b:.3f} after {a:.3f}; speedup {sp:.3f}")


if __name__ == "__main__":
    main()
