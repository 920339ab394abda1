"""Host overhead of miocore's calls: the part of a call that is not the convolution itself.

Measures, on a tiny problem (so the convolution costs next to nothing):
- ``immediate`` with a cached invoker, minus the invoker alone;
- ``run_solution`` with a cached invoker, minus the invoker alone;
- ``find_solutions`` answered from the FindDb (a hit: no benchmark);
- ``get_solutions`` (immediate-mode listing) on a hit;
and, for context, one ``torch.nn.functional.conv2d`` call on the same problem when PyTorch
is installed.

Then the **warm start**: a FindDb hit in a new process. A first process finds the problem in
NORMAL mode into a fresh user database (the default location under ``XDG_CACHE_HOME``, set to
a temporary folder; the shipped system database stays in use, as for a user); then several
fresh processes each time ``import miocore``, ``miocore.Handle("cpu")`` and
``find_solutions(p)`` (the hit), and list the heavy modules (numpy, SciPy, numba, torch, ...)
the hit left in ``sys.modules``. The median of each part is
printed. The processes cache bytecode (in a temporary folder) as an installed package does;
``--no-bytecode`` makes every process compile what it imports.

Run: ``python benchmarks/host_overhead.py`` (with the plugins installed);
``--warm-start`` measures the warm start only, ``--processes N`` sets how many.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
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


#: The problem of both measurements (sizes for ``ConvProblem.from_sizes``).
SIZES = {"n": 1, "c": 4, "k": 4, "in_spatial": (4, 4), "filter_spatial": (1, 1)}

#: Modules a FindDb hit should never need: the libraries solvers compute with.
HEAVY = ("numpy", "ml_dtypes", "scipy", "numba", "llvmlite", "torch", "cupy", "cuda", "hip")

#: Run in each fresh process: the hit, timed by parts, and the heavy modules it loaded.
_HIT = f"""
import sys, time, json
t0 = time.perf_counter()
import miocore
t1 = time.perf_counter()
h = miocore.Handle("cpu")
t2 = time.perf_counter()
p = miocore.ConvProblem.from_sizes("forward", **{SIZES!r})
sols = h.find_solutions(p)
t3 = time.perf_counter()
assert sols[0].source == "find-db", sols[0].source
print(json.dumps({{
    "import": t1 - t0, "handle": t2 - t1, "hit": t3 - t2, "total": t3 - t0,
    "solver": sols[0].solver,
    "heavy": sorted({{m.partition(".")[0] for m in sys.modules}} & set({HEAVY!r})),
}}))
"""

#: Run once first: NORMAL find into the fresh database, so the processes above hit.
_FIND = f"""
import miocore
p = miocore.ConvProblem.from_sizes("forward", **{SIZES!r})
miocore.Handle("cpu").find_solutions(p, find_mode="NORMAL")
"""


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """Medians over fresh processes of the parts of a FindDb hit, in seconds."""

    import_s: float
    handle_s: float
    hit_s: float
    total_s: float
    fastest_s: float
    slowest_s: float
    solver: str
    heavy: tuple[str, ...]
    processes: int
    bytecode: bool


def warm_start(processes: int = 9, *, bytecode: bool = True) -> WarmStart:
    """A FindDb hit in ``processes`` fresh processes (see the module doc).

    With ``bytecode`` the processes cache compiled modules (in a temporary
    ``PYTHONPYCACHEPREFIX``, so nothing is written next to the sources), as an installed
    package has them; without, every process compiles every module it imports, as under
    ``PYTHONDONTWRITEBYTECODE``.
    """
    with tempfile.TemporaryDirectory() as folder:
        environ = dict(os.environ)
        # A user's default configuration: every per-user file (database, kernel binaries,
        # plugin scan) in the default cache folder, here a fresh one, and the shipped system
        # database beside it.
        environ["XDG_CACHE_HOME"] = os.path.join(folder, "cache")
        for name in (
            "MIOCORE_USER_DB_PATH",
            "MIOCORE_SYSTEM_DB_PATH",
            "MIOPEN_USER_DB_PATH",
            "MIOPEN_SYSTEM_DB_PATH",
            "MIOCORE_KERNEL_CACHE_PATH",
            "MIOCORE_FIND_MODE",
            "MIOCORE_FIND_ENFORCE",
            "PYTHONDONTWRITEBYTECODE",
        ):
            environ.pop(name, None)
        if bytecode:
            environ["PYTHONPYCACHEPREFIX"] = os.path.join(folder, "pycache")
        else:
            environ["PYTHONDONTWRITEBYTECODE"] = "1"
        subprocess.run([sys.executable, "-c", _FIND], env=environ, check=True)
        runs = []
        for _ in range(processes):
            done = subprocess.run(
                [sys.executable, "-c", _HIT],
                env=environ,
                check=True,
                capture_output=True,
                text=True,
            )
            runs.append(json.loads(done.stdout.splitlines()[-1]))

    def median(part: str) -> float:
        return statistics.median(r[part] for r in runs)

    return WarmStart(
        import_s=median("import"),
        handle_s=median("handle"),
        hit_s=median("hit"),
        total_s=median("total"),
        fastest_s=min(r["total"] for r in runs),
        slowest_s=max(r["total"] for r in runs),
        solver=runs[0]["solver"],
        heavy=tuple(sorted({m for r in runs for m in r["heavy"]})),
        processes=processes,
        bytecode=bytecode,
    )


def print_warm_start(processes: int, *, bytecode: bool = True) -> None:
    """Print the warm-start figure (median of ``processes`` fresh processes)."""
    ws = warm_start(processes, bytecode=bytecode)
    cached = "bytecode cached" if ws.bytecode else "no bytecode cache: every module compiled"
    print(f"warm start, FindDb hit in a new process ({cached}; median of {ws.processes}):")
    print(f"  import miocore:        {ws.import_s * 1e3:8.1f} ms")
    print(f"  Handle('cpu'):         {ws.handle_s * 1e3:8.1f} ms")
    print(f"  find_solutions (hit):  {ws.hit_s * 1e3:8.1f} ms  ({ws.solver})")
    print(
        f"  total:                 {ws.total_s * 1e3:8.1f} ms  "
        f"(fastest {ws.fastest_s * 1e3:.1f}, slowest {ws.slowest_s * 1e3:.1f})"
    )
    print(f"  heavy modules loaded:  {', '.join(ws.heavy) or 'none'}")


def print_front_end(x: object, w: object, solver: str, invoker_us: float) -> None:
    """The torch front end's whole call on the same tensors (``miocore.torch.Conv2d``), with
    and without autograd recording; its overhead where it runs the same solver as above."""
    import torch

    import miocore.torch as mt
    from miocore.torch import runtime

    layer = mt.Conv2d(4, 4, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(w)  # type: ignore[arg-type]
        layer(x)
    chosen = {s.solver for s in runtime._solutions.values()}
    with torch.no_grad():
        plain = per_call_us(lambda: layer(x))
    recorded = per_call_us(lambda: layer(x))  # the weight requires grad: autograd records
    same = chosen == {solver}
    for label, us in (("no grad", plain), ("autograd records", recorded)):
        note = f"(overhead {us - invoker_us:.1f} us)" if same else f"(runs {sorted(chosen)})"
        print(f"miocore.torch.Conv2d, {label + ':':18s}{us:8.1f} us  {note}")


def main() -> None:
    from common import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-start", action="store_true", help="measure the warm start only")
    parser.add_argument("--processes", type=int, default=9, help="fresh processes (warm start)")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="warm start without cached bytecode (as under PYTHONDONTWRITEBYTECODE)",
    )
    args = parser.parse_args()
    if args.warm_start:
        print(f"machine: {machine()}")
        print_warm_start(args.processes, bytecode=not args.no_bytecode)
        return

    p = miocore.ConvProblem.from_sizes("forward", **SIZES)  # type: ignore[arg-type]
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
    else:
        torch.set_num_threads(1)
        x = torch.from_numpy(arrays["x"].copy())
        w = torch.from_numpy(arrays["w"].copy())
        conv = per_call_us(lambda: torch.nn.functional.conv2d(x, w))
        print(f"torch.nn.functional.conv2d (whole):  {conv:8.1f} us  (PyTorch {torch.__version__})")
        print_front_end(x, w, best.solver, invoker_alone)
    print_warm_start(args.processes, bytecode=not args.no_bytecode)


if __name__ == "__main__":
    main()
