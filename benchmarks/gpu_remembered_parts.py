"""Where a remembered ``run_solution`` / ``immediate`` call's host time goes on the GPU.

On a tiny fp16 problem, for each timed solver: the whole ``run_solution`` and ``immediate``
calls (remembered: the same arrays again, their graph replayed), the graph replay alone, the
call with the replay swapped for a no-op (the Python part) and its pieces (the four array
signatures, the handle's remembered lookup, the runner's call), and the signature of one CUDA
tensor as the runner reads it, beside cheaper forms of the same facts. µs of host time per
call with the GPU held busy (median of 5 loops of 200 calls: more would fill the launch
queue, and the loop would wait for the device).

    python benchmarks/gpu_remembered_parts.py --out parts.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from gpu_call_cost import tensor
from gpu_timing import host_ms

import miocore
from miocore.find import runner as runner_module

SOLVERS = ("direct.gpu_naive", "gemm.gpu_nhwc", "igemm.gpu_mma")


def per_call_us(fn: Any, calls: int = 200) -> float:
    """Host time per call, µs, the GPU busy (``gpu_timing.host_ms``: median of 5 loops)."""
    return host_ms(fn, calls) * 1e3


def signature_forms(t: torch.Tensor) -> dict[str, float]:
    """One CUDA tensor's signature as the runner reads it, and cheaper forms of it."""
    forms = {
        "signature_of": lambda: runner_module.signature_of(t),
        "ptr_shape_stride_dtype_device": lambda: (
            t.data_ptr(),
            t.shape,
            t.stride(),
            t.dtype,
            t.device,
        ),
        "ptr_shape_stride_dtype_get_device": lambda: (
            t.data_ptr(),
            t.shape,
            t.stride(),
            t.dtype,
            t.get_device(),
        ),
        "data_ptr": t.data_ptr,
        "shape": lambda: t.shape,
        "stride": t.stride,
        "device": lambda: t.device,
        "get_device": t.get_device,
        "dtype": lambda: t.dtype,
    }
    return {name: per_call_us(fn) for name, fn in forms.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    h = miocore.Handle("cuda")
    p = miocore.ConvProblem.from_sizes(
        "forward",
        n=2,
        c=64,
        k=64,
        in_spatial=(14, 14),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float16",
        layout="NHWC",
    )
    gen = torch.Generator(device="cuda").manual_seed(0)
    arrays = {name: tensor(getattr(p, name), gen) for name in ("x", "w", "y")}
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "problem": p.key}
    result["signature"] = signature_forms(arrays["x"])
    listed = {s.solver: s for s in h.get_solutions(p)}
    rows = []
    for solver in SOLVERS:
        sol = listed.get(solver)
        if sol is None:
            continue
        ws = torch.empty(max(sol.workspace_size, 1), dtype=torch.uint8, device="cuda")
        for _ in range(3):  # remembered, then recorded, then replayed
            h.run_solution(sol, workspace=ws, **arrays)
        row: dict[str, Any] = {"solver": solver}
        row["run_solution"] = per_call_us(lambda: h.run_solution(sol, workspace=ws, **arrays))  # noqa: B023
        row["immediate"] = per_call_us(lambda: h.immediate(p, solver, workspace=ws, **arrays))  # noqa: B023
        remembered = h.runner._remembered
        graph = next((r[4] for r in remembered.values() if r[0].solver == solver), None)
        if graph is not None:
            row["replay"] = per_call_us(graph.replay)
            real = graph.replay
            graph.replay = lambda: True
            try:
                for label in ("run_solution_no_replay", "run_solution_no_replay_again"):
                    row[label] = per_call_us(
                        lambda: h.run_solution(sol, workspace=ws, **arrays)  # noqa: B023
                    )
                entry = h._known_lookup(id(sol), sol)
                row["runner_run_no_replay"] = per_call_us(
                    lambda: h.runner.run(p, entry, workspace=ws, **arrays)  # noqa: B023
                )
            finally:
                graph.replay = real
        signature_of = runner_module.signature_of
        x, w, y = arrays["x"], arrays["w"], arrays["y"]
        row["four_signatures"] = per_call_us(
            lambda: (signature_of(x), signature_of(w), signature_of(y), signature_of(ws))  # noqa: B023
        )
        row["known_lookup"] = per_call_us(lambda: h._known_lookup(id(sol), sol))  # noqa: B023
        rows.append(row)
        print(json.dumps(row), flush=True)
    result["rows"] = rows
    print(json.dumps(result["signature"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
