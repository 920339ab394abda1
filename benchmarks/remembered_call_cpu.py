"""The Python part of a remembered ``run_solution`` / ``immediate`` call, measured on the CPU.

On a device backend ``run_solution`` and ``immediate`` remember each invoker's last call and,
when the arrays are the same, skip the checks (``miocore.find.runner``). This measures that path
without a GPU: a CPU handle with remembering switched on (as a device backend has it), torch
CPU tensors (as the torch front end and most callers pass), and the invoker replaced by a
no-op, so what is timed is miocore's own Python: the lookups, the four array signatures, the
comparison. Median of ``--repeats`` loops of ``--calls`` calls, µs per call.

    python benchmarks/remembered_call_cpu.py

To compare two trees, run it under each (``PYTHONPATH=<other tree>``) alternately.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

import miocore

sys.path.insert(0, str(Path(__file__).parent))
from host_overhead import per_call_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    p = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, in_spatial=(4, 4), filter_spatial=(1, 1)
    )
    with tempfile.TemporaryDirectory() as db:
        h = miocore.Handle("cpu", user_db_path=db)
        best = h.find_solutions(p, find_mode="NORMAL")[0]
        arrays = {
            name: torch.from_numpy(a.copy())
            for name, a in miocore.reference.random_inputs(p, 0).items()
        }
        h.run_solution(best, **arrays)  # builds and caches the invoker
        entry = h.invoker_cache.get(p.network_config, best.solver)
        object.__setattr__(entry, "invoker", lambda owner, params: None)
        h.runner._remember = True  # as on a device backend
        for _ in range(2):  # remembered from here on
            h.run_solution(best, **arrays)
            h.immediate(p, best.solver, **arrays)
        run_solution = per_call_us(lambda: h.run_solution(best, **arrays), args.calls, args.repeats)
        immediate = per_call_us(
            lambda: h.immediate(p, best.solver, **arrays), args.calls, args.repeats
        )
    print(f"remembered run_solution, Python part: {run_solution:.2f} us")
    print(f"remembered immediate, Python part:    {immediate:.2f} us")


if __name__ == "__main__":
    main()
