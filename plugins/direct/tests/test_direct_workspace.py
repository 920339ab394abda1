"""Workspace: the reported size is exact, it is what the invoker uses, and nothing big is
allocated behind the caller's back."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from miocore_direct import NaiveDirectSolver, TapsDirectSolver

from miocore import ConvProblem, InvokeParams, WorkspaceError
from miocore.backends.cpu import allocate_workspace
from miocore.reference import random_inputs
from miocore.testing import check_solver, cpu_context


def _align(n: int) -> int:
    return -(-n // 16) * 16


def _problem(direction: str, **kw) -> ConvProblem:
    base = dict(n=2, c=4, k=6, in_spatial=(5, 5), filter_spatial=(3, 3), pads=(1, 1))
    base.update(kw)
    return ConvProblem.from_sizes(direction, **base)


# (problem, expected bytes): float32 elements of W + P + Q (+ scratch), each 64-byte aligned.
CASES = [
    # 3x3 pad 1: grid 7x7, one phase. W 9*6*4, P 2*49*4, Q 2*49*6.
    (_problem("forward"), 4 * (_align(216) + _align(392) + _align(588))),
    # fp16 backward data, same geometry: the same float32 staging.
    (_problem("backward_data", dtype="float16"), 4 * (_align(216) + _align(392) + _align(588))),
    # 1x1 stride 2 NHWC float32: P keeps one phase of 3x3 (the decimated x), Q *is* y.
    (
        _problem("forward", filter_spatial=(1, 1), pads=(0, 0), strides=(2, 2), layout="NHWC"),
        4 * (_align(24) + _align(2 * 9 * 4)),
    ),
    # 1x1 stride 1 NHWC float32, no padding: P is x and Q is y; only the weights are staged.
    (
        _problem("backward_weights", filter_spatial=(1, 1), pads=(0, 0), layout="NHWC"),
        4 * _align(24),
    ),
    # 3x3 stride 2 pad 1 on 5x5: out 3x3, 2x2 phases of grid 3+1=4: P 4*2*16*4, Q 2*16*6.
    (_problem("forward", strides=(2, 2)), 4 * (_align(216) + _align(512) + _align(192))),
    # depthwise (groups 4) 3x3, default block = whole: W 4*9, P 4*2*49, Q 4*2*49, scratch 4*L.
    (
        _problem("forward", k=4, groups=4),
        4 * (_align(36) + _align(392) + _align(392) + _align(4 * (49 + 4 * 7 + 5))),
    ),
]


@pytest.mark.parametrize(("problem", "expected"), CASES, ids=[p.key for p, _ in CASES])
def test_taps_workspace_is_exact(problem: ConvProblem, expected: int) -> None:
    solver, ctx = TapsDirectSolver(), cpu_context()
    assert solver.workspace_size(ctx, problem) == expected
    solution = solver.get_solution(ctx, problem)
    assert solution.workspace_size == expected
    check_solver(solver, problem)
    invoker = solution.invoker_factory(())
    data = random_inputs(problem, 0)
    too_small = np.zeros(expected - 1, np.uint8)
    for workspace in (None, too_small):
        with pytest.raises(WorkspaceError, match="workspace"):
            invoker(None, InvokeParams(problem=problem, workspace=workspace, **data))


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
@pytest.mark.parametrize("groups", [1, 8])
def test_scratch_comes_from_the_workspace(direction: str, groups: int) -> None:
    """Python-side allocations while running stay far below the staged tensors' size."""
    problem = ConvProblem.from_sizes(
        direction,
        n=2,
        c=32,
        k=32,
        in_spatial=(24, 24),
        filter_spatial=(3, 3),
        pads=(1, 1),
        groups=groups,
        dtype="float16",
    )
    ctx = cpu_context()
    data = random_inputs(problem, 0)
    for solver in (TapsDirectSolver(), NaiveDirectSolver()):
        solution = solver.get_solution(ctx, problem)
        invoker = solution.invoker_factory(())
        params = InvokeParams(
            problem=problem, workspace=allocate_workspace(solution.workspace_size), **data
        )
        invoker(None, params)
        tracemalloc.start()
        invoker(None, params)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        staged = 4 * (problem.x.element_count + problem.y.element_count)
        if solver.name == "direct.taps":
            assert solution.workspace_size >= staged
            assert peak < 64 * 1024, f"{solver.name} allocated {peak} bytes"
        else:  # the naive solver has no workspace; its transient blocks are bounded
            assert solution.workspace_size == 0
            assert peak < 8 * staged
