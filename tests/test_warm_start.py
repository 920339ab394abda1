"""A FindDb hit in a new process loads none of the libraries solvers compute with.

A second process must start warm (design guide, section 1): answering from the FindDb costs
what reading the record costs. numpy, SciPy, numba, torch and the vendor bindings load when a
solver is timed or run, never to register the solvers or to answer from the database (their
imports cost a new process 0.1-0.7 s on the development machine). Timing is left to
``benchmarks/host_overhead.py --warm-start``; this test guards the imports, without timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import miocore

#: Top-level modules a FindDb hit must not import.
HEAVY = (
    "numpy",
    "ml_dtypes",
    "scipy",
    "numba",
    "llvmlite",
    "torch",
    "threadpoolctl",
    "sklearn",
    "dask",
    "cupy",
    "cuda",
    "hip",
)

SIZES = {"n": 1, "c": 4, "k": 4, "in_spatial": (6, 6), "filter_spatial": (3, 3), "pads": (1, 1)}

_FIND = f"""
import miocore
p = miocore.ConvProblem.from_sizes("forward", **{SIZES!r})
print(miocore.Handle("cpu").find_solutions(p, find_mode="NORMAL")[0].solver)
"""

#: Standard-library modules only some solvers need (Winograd's exact transforms).
STDLIB_HEAVY = ("fractions", "decimal")

#: miocore's own modules a hit of measured records does not need (their classes cost a new
#: process ~0.2 ms each to build): MIOpen's text format, the results of an import or a merge,
#: the entries of a deny list where none exists.
UNNEEDED = ("miocore.db.text", "miocore.db.outcomes", "miocore.db.deny_entries")

_HIT = f"""
import json, sys
import miocore
h = miocore.Handle("cpu")
p = miocore.ConvProblem.from_sizes("forward", **{SIZES!r})
found = h.find_solutions(p)
after_find = set(sys.modules)
heavy = sorted({{m.partition(".")[0] for m in sys.modules}} & set({HEAVY!r}))
listed = h.get_solutions(p)
heavy_listing = sorted({{m.partition(".")[0] for m in sys.modules}} & set({HEAVY!r}))
print(json.dumps({{
    "found": sorted({{s.source for s in found}}),
    "listed": listed[0].source,
    "listed_sources": sorted({{s.source for s in listed}}),
    "solver": found[0].solver,
    "heavy": heavy,
    "heavy_listing": heavy_listing,
    "after_find": sorted(after_find),
}}))
"""

pytestmark = pytest.mark.skipif(
    not any("cpu" in reg.backends for reg in miocore.solvers()),
    reason="needs a plugin with a CPU solver installed",
)


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ),  # this test's empty databases (tests/conftest.py)
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_finddb_hit_in_a_new_process_imports_no_heavy_library() -> None:
    winner = _python(_FIND)
    hit = json.loads(_python(_HIT))
    assert hit["found"] == ["find-db"], hit  # find answered from the record alone
    assert hit["listed"] == "find-db", hit  # so did the immediate-mode listing, first
    assert hit["solver"] == winner
    assert hit["heavy"] == [], (
        f"a FindDb hit imported {hit['heavy']}: import them where a solver runs (see "
        "docs/performance-cpu-host.md, 'Warm start')"
    )
    # The listing adds the applicable solvers the record lacks, ranked by WTI, which may
    # calibrate the device (numpy on the CPU): a solver the find measured and then left out
    # (the accuracy policy skipping Winograd on this data, depending on the CPU's rounding)
    # is such a solver. A listing answered by the record alone imports nothing either.
    if hit["listed_sources"] == ["find-db"]:
        assert hit["heavy_listing"] == [], hit["heavy_listing"]


def _gpu_solver_modules() -> set[str]:
    """The modules of the installed plugins' GPU-only solvers (declared lazily: the factory
    names the module)."""
    return {
        reg.factory.partition(":")[0]
        for reg in miocore.solvers()
        if "cpu" not in reg.backends and isinstance(reg.factory, str)
    }


def test_a_cpu_finddb_hit_imports_no_gpu_solver_nor_unused_solver_modules() -> None:
    """A CPU hit asks only the recorded CPU solvers: no GPU solver module (the compiler and
    kernel cache with them), no fractions/decimal (Winograd's plans), none of miocore's
    modules it has no use for."""
    _python(_FIND)
    hit = json.loads(_python(_HIT))
    assert hit["found"] == ["find-db"], hit
    loaded = set(hit["after_find"])
    assert not loaded & _gpu_solver_modules(), sorted(loaded & _gpu_solver_modules())
    assert not loaded & set(STDLIB_HEAVY), sorted(loaded & set(STDLIB_HEAVY))
    assert not loaded & set(UNNEEDED), sorted(loaded & set(UNNEEDED))
    assert not {m for m in loaded if m.startswith("miocore_cudnn.solvers")}


_RUN = f"""
import miocore
h = miocore.Handle("cpu")
p = miocore.ConvProblem.from_sizes("forward", **{SIZES!r})
best = h.find_solutions(p)[0]
arrays = miocore.reference.random_inputs(p, 0)
h.run_solution(best, **arrays)
expected = miocore.reference.convolution(p, x=arrays["x"], w=arrays["w"])
print(best.source, float(abs(arrays["y"] - expected).max()) < 1e-4)
"""


def test_the_answer_of_a_warm_start_runs() -> None:
    """What the hit left unloaded loads when its answer runs."""
    _python(_FIND)
    assert _python(_RUN) == "find-db True"
