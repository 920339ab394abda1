"""Host overhead of miocore's calls: the part of a call that is not the convolution itself.

Measures, on a tiny problem (so the convolution costs next to nothing):
- ``immediate`` with a cached invoker, minus the invoker alone;
- ``run_solution`` with a cached invoker, minus the invoker alone;
- ``find_solutions`` answered from the FindDb (a hit: no benchmark);
- ``get_solutions`` (immediate-mode listing) on a hit;
and, for context, one ``torch.nn.functional.conv2d`` call on the same problem when PyTorch
is installed.

Run: ``python benchmarks/host_overhead.py`` (with the plugins installed).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

import miocore
from miocore.solver import InvokeParams


def per_call_us(run: Callable[[], object], calls: int = 2000, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean time of ``calls`` back-to-back calls, in µs."""
    for _ in range(100):
        run()
    means = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        means.append((time.perf_counter() - start) / calls)
    return statistics.median(means) * 1e6


def main() -> None:
    from common import machine

    p = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, in_spatial=(4, 4), filter_spatial=(1, 1)
    )
    with tempfile.TemporaryDirectory() as db:
        h = miocore.Handle("cpu", user_db_path=db)
        sols = h.find_solutions(p, find_mode="NORMAL")
        best = sols[0]
        arrays = miocore.reference.random_inputs(p, 0)
        h.immediate(p, best.solver, **arrays)
        entry = h.invoker_cache.get(p.network_config, best.solver)
        ws = h.backend.allocate_workspace(entry.workspace_size)
        params = InvokeParams(problem=p.canonical, workspace=ws, **arrays)

        invoker_alone = per_call_us(lambda: entry.invoker(h, params))
        immediate = per_call_us(lambda: h.immediate(p, best.solver, **arrays))
        run_solution = per_call_us(lambda: h.run_solution(best, **arrays))
        find_hit = per_call_us(lambda: h.find_solutions(p), calls=200)
        listing = per_call_us(lambda: h.get_solutions(p), calls=200)

    print(f"machine: {machine()}")
    print(f"problem: {p.key}, solver {best.solver}")
    print(f"invoker alone (the convolution):     {invoker_alone:8.1f} us")
    print(
        f"immediate, cached invoker:           {immediate:8.1f} us  "
        f"(overhead {immediate - invoker_alone:.1f} us)"
    )
    print(
        f"run_solution, cached invoker:        {run_solution:8.1f} us  "
        f"(overhead {run_solution - invoker_alone:.1f} us)"
    )
    print(f"find_solutions, FindDb hit:          {find_hit:8.1f} us  (no convolution)")
    print(f"get_solutions, FindDb hit:           {listing:8.1f} us  (no convolution)")
    try:
        import torch
    except ImportError:
        print("torch not installed: no PyTorch comparison")
        return
    torch.set_num_threads(1)
    x = torch.from_numpy(arrays["x"].copy())
    w = torch.from_numpy(arrays["w"].copy())
    conv = per_call_us(lambda: torch.nn.functional.conv2d(x, w))
    print(f"torch.nn.functional.conv2d (whole):  {conv:8.1f} us  (PyTorch {torch.__version__})")


if __name__ == "__main__":
    main()
