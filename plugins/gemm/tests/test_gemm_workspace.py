"""Workspace: the invoker runs in exactly ``workspace_size`` bytes and refuses less."""

from __future__ import annotations

import numpy as np
import pytest
from miocore_gemm import Gemm1x1Solver, GemmIm2colSolver

import miocore
from miocore import ConvProblem, PerfConfig
from miocore.reference import convolution, random_inputs, relative_error
from miocore.testing import TOLERANCES, cpu_context, run_solver

CTX = cpu_context()
DIRECTIONS = ("forward", "backward_data", "backward_weights")


def _problem(direction: str, **kw) -> ConvProblem:
    sizes = dict(n=3, c=6, k=4, in_spatial=(7, 6), filter_spatial=(3, 3), pads=(1, 1))
    sizes.update(kw)
    return ConvProblem.from_sizes(direction, **sizes)


CASES = [
    dict(),
    dict(dtype="float16", layout="NHWC", groups=2),
    dict(dtype="bfloat16", strides=(2, 1), dilations=(1, 2)),
    dict(in_spatial=(5, 4, 6), filter_spatial=(3, 1, 2), pads=(1, 0, 1), layout="NDHWC"),
    dict(filter_spatial=(1, 1), pads=(0, 0), strides=(2, 2)),
]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("lines", [None, 2])
def test_runs_in_exactly_the_reported_workspace(direction, case, lines) -> None:
    problem = _problem(direction, **case)
    config = PerfConfig({"tile_lines": lines}) if lines else None
    for solver in (GemmIm2colSolver(), Gemm1x1Solver()):
        if not solver.is_applicable(CTX, problem):
            continue
        size = solver.workspace_size(CTX, problem, config)
        assert size == solver.get_solution(CTX, problem, config).workspace_size
        # Guard bytes after the workspace must survive: the invoker stays inside its bytes.
        backing = np.full(size + 64, 0xA5, dtype=np.uint8)
        inputs = random_inputs(problem, 3)
        got = run_solver(
            solver, problem, inputs, perf_config=config, workspace=backing[:size] if size else None
        )
        assert np.all(backing[size:] == 0xA5)
        out = problem.direction.output_tensor
        expected = convolution(problem, **{k: v for k, v in inputs.items() if k != out})
        assert relative_error(got, expected) <= TOLERANCES[problem.dtype]


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_too_small_or_missing_workspace_is_a_workspace_error(direction) -> None:
    problem = _problem(direction)
    solver = GemmIm2colSolver()
    size = solver.workspace_size(CTX, problem)
    assert size > 0
    inputs = random_inputs(problem, 0)
    with pytest.raises(miocore.WorkspaceError, match=f"needs {size} bytes"):
        run_solver(solver, problem, inputs, workspace=np.empty(size - 1, np.uint8))
    invoker = solver.get_solution(CTX, problem).invoker_factory(())
    params = miocore.InvokeParams(problem=problem, workspace=None, **inputs)
    with pytest.raises(miocore.WorkspaceError, match=f"needs {size} bytes of workspace"):
        invoker(None, params)
    with pytest.raises(miocore.WorkspaceError, match="C-contiguous"):
        run_solver(solver, problem, inputs, workspace=np.empty(2 * size, np.uint8)[::2])


@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "NCDHW", "NDHWC"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_pointwise_float32_runs_in_place(layout, direction) -> None:
    spatial = (5, 7) if len(layout) == 4 else (3, 4, 5)
    for n in (1, 4):
        problem = ConvProblem.from_sizes(
            direction,
            n=n,
            c=8,
            k=6,
            in_spatial=spatial,
            filter_spatial=(1,) * len(spatial),
            groups=2,
            layout=layout,
        )
        size = Gemm1x1Solver().workspace_size(CTX, problem)
        if direction != "backward_weights":
            assert size == 0, problem
        elif layout in ("NCHW", "NCDHW") and n > 1:
            # The batch cannot fold into the reduction in place: a column chunk is gathered.
            assert size > 4 * 6 * 4, problem
        else:  # only the float32 dW^T buffer, K x Cg, no column matrix
            assert size == 4 * 6 * 4, problem
        assert GemmIm2colSolver().workspace_size(CTX, problem) >= size
        inputs = random_inputs(problem, n)
        got = run_solver(Gemm1x1Solver(), problem, inputs)
        out = problem.direction.output_tensor
        expected = convolution(problem, **{k: v for k, v in inputs.items() if k != out})
        assert relative_error(got, expected) <= TOLERANCES[problem.dtype]


def test_strided_pointwise_gathers_one_subsampled_chunk() -> None:
    problem = ConvProblem.from_sizes(
        "forward", n=2, c=8, k=16, in_spatial=(8, 8), filter_spatial=(1, 1), strides=(2, 2)
    )
    # The column matrix is the subsampled input: 2 images x 8 channels x 4x4 pixels, float32.
    assert Gemm1x1Solver().workspace_size(CTX, problem) == 4 * 2 * 8 * 16


def test_workspace_is_bounded_by_tiling_not_batch() -> None:
    """A batch-512 ResNet layer does not get a batch-sized column matrix."""
    big = ConvProblem.from_sizes(
        "forward", n=512, c=256, k=256, in_spatial=(56, 56), filter_spatial=(3, 3), pads=(1, 1)
    )
    solver = GemmIm2colSolver()
    size = solver.workspace_size(CTX, big)
    assert size <= 32 * 2**20
    assert solver.plan(big).num_tiles > 100
    assert solver.workspace_size(CTX, big, PerfConfig({"tile_lines": 56})) == 4 * 56 * 56 * 256 * 9


def test_bad_perf_config_is_a_clear_error() -> None:
    problem = _problem("forward")
    with pytest.raises(miocore.InvalidArgumentError, match="tile_lines"):
        GemmIm2colSolver().workspace_size(CTX, problem, PerfConfig({"tile_lines": 0}))
    solver = GemmIm2colSolver()
    assert solver.is_valid_perf_config(CTX, problem, PerfConfig({"tile_lines": 3}))
    assert not solver.is_valid_perf_config(CTX, problem, PerfConfig({"tile_lines": -1}))
    space = list(solver.perf_config_space(CTX, problem))
    assert space[0] == solver.default_perf_config(CTX, problem)
    assert len(set(space)) == len(space)
