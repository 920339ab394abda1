"""Workspace: exact, taken from params.workspace, and what the invoker touches is the formula."""

from __future__ import annotations

import itertools
import math
import tracemalloc

import numpy as np
import pytest
from miocore_fft import FftOverlapSave, FftPlan
from miocore_fft.plan import COMPLEX, REAL

from miocore import ConvProblem, InvokeParams, PerfConfig, WorkspaceError
from miocore.backends.cpu import empty_for
from miocore.reference import random_inputs
from miocore.testing import cpu_context

DIRECTIONS = ("forward", "backward_data", "backward_weights")
SOLVER = FftOverlapSave()
CTX = cpu_context()

CASES = [
    dict(n=2, c=6, k=4, in_spatial=(30, 27), filter_spatial=(5, 3), pads=(2, 1), groups=2),
    dict(n=1, c=4, k=4, in_spatial=(40, 33), filter_spatial=(3, 3), pads=(1, 1), groups=4),
    dict(n=2, c=3, k=5, in_spatial=(9, 10, 11), filter_spatial=(3, 2, 3), dilations=(1, 2, 1)),
]


def _run(problem: ConvProblem, config: PerfConfig, workspace: object) -> np.ndarray:
    sol = SOLVER.get_solution(CTX, problem, config)
    arrays = random_inputs(problem, 3)
    out = empty_for(getattr(problem, problem.direction.output_tensor))
    arrays[problem.direction.output_tensor] = out
    sol.invoker_factory(())(None, InvokeParams(problem=problem, workspace=workspace, **arrays))
    return out


def _configs(problem: ConvProblem) -> list[PerfConfig]:
    return [c for c in SOLVER.perf_config_space(CTX, problem)][:3]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fft_workspace_is_exactly_what_the_invoker_touches(case: int, direction: str) -> None:
    """Bytes written in the workspace are exactly the plan's regions, every byte of them.

    Two runs on workspaces pre-filled with 0x00 and 0xFF: a byte written by the invoker
    differs from the fill in at least one run, a byte never written differs in neither.
    """
    problem = ConvProblem.from_sizes(direction, **CASES[case])
    for config in _configs(problem):
        plan = FftPlan(problem=problem, fft_len=config["fft_len"])
        size = SOLVER.workspace_size(CTX, problem, config)
        assert size == SOLVER.get_solution(CTX, problem, config).workspace_size
        assert size == plan.workspace_bytes > 0
        extra = 4096  # a larger buffer: the tail must stay untouched
        touched = np.zeros(size + extra, bool)
        for fill in (0x00, 0xFF):
            ws = np.full(size + extra, fill, np.uint8)
            _run(problem, config, ws)
            touched |= ws != fill
        expected = np.zeros(size + extra, bool)
        for offset, nbytes in plan.regions.values():
            expected[offset : offset + nbytes] = True
        assert np.array_equal(touched, expected), {
            name: int(touched[o : o + n].sum()) - n for name, (o, n) in plan.regions.items()
        }


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_fft_workspace_formula(direction: str) -> None:
    """The regions follow the documented formula (spectra in complex64, stages in float32)."""
    problem = ConvProblem.from_sizes(direction, **CASES[0])
    plan = FftPlan(problem=problem, fft_len=16)
    p, g = problem, problem.groups
    bins = plan.lengths[0] * (plan.lengths[1] // 2 + 1)
    rows = p.n * math.prod(
        -(-e // (length - f + 1))
        for e, length, f in zip(plan.extent, plan.lengths, plan.fd, strict=True)
    )
    assert (plan.bins, plan.rows) == (bins, rows)
    r = plan.regions
    a_ch = p.c if direction == "forward" else p.k
    assert r["a_spec"][1] == bins * rows * a_ch * COMPLEX
    if direction == "backward_weights":
        assert r["b_spec"][1] == bins * rows * p.c * COMPLEX
        assert r["out_spec"][1] == bins * p.k * (p.c // g) * COMPLEX
    else:
        assert r["b_spec"][1] == bins * p.k * (p.c // g) * COMPLEX
        assert r["out_spec"][1] == bins * rows * (p.k + p.c - a_ch) * COMPLEX
    stage = max(math.prod(plan.x_stage_shape), math.prod(plan.tile_stage_shape)) * REAL
    assert r["stage"][1] == stage
    ends = sorted((o, o + n) for o, n in r.values())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ends))  # no overlap
    assert plan.workspace_bytes == ends[-1][1]


def test_fft_missing_or_short_workspace_is_an_error() -> None:
    """The invoker refuses a missing or short workspace instead of allocating its own."""
    problem = ConvProblem.from_sizes("forward", **CASES[0])
    config = SOLVER.default_perf_config(CTX, problem)
    size = SOLVER.workspace_size(CTX, problem, config)
    with pytest.raises(WorkspaceError, match="workspace"):
        _run(problem, config, None)
    with pytest.raises(WorkspaceError, match="workspace"):
        _run(problem, config, np.empty(size - 1, np.uint8))


def test_fft_hidden_allocations_are_bounded_by_one_chunk() -> None:
    """Memory the invoker allocates outside the workspace (the FFT library's output arrays)
    stays within a few chunks, however large the problem: the spectra live in the workspace.
    """
    problem = ConvProblem.from_sizes(
        "forward", n=8, c=32, k=48, in_spatial=(64, 64), filter_spatial=(5, 5), pads=(2, 2)
    )
    config = PerfConfig(fft_len=0)
    plan = FftPlan(problem=problem, fft_len=0)
    sol = SOLVER.get_solution(CTX, problem, config)
    arrays = random_inputs(problem, 0)
    arrays["y"] = empty_for(problem.y)
    ws = np.empty(sol.workspace_size, np.uint8)
    invoker = sol.invoker_factory(())
    params = InvokeParams(problem=problem, workspace=ws, **arrays)
    invoker(None, params)
    tracemalloc.start()
    try:
        invoker(None, params)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    chunk = max(plan.regions["rchunk"][1], plan.regions["cchunk"][1])
    assert peak <= 3 * chunk + (1 << 20), (peak, chunk)
    assert peak < sol.workspace_size / 4, (peak, sol.workspace_size)
