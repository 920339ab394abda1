"""``direct.gpu_tiled`` against the float64 reference on corpus-derived problems (marked ``gpu``).

The tiled solver applies to about half of the corpus (2-D, filters up to 7x7), so more rows are
sampled than ``tests/test_gpu_solvers.py`` takes: every direction and dtype runs at least
``MIOCORE_GPU_TEST_PROBLEMS`` (200) problems it declares applicable. Outputs are poisoned with
NaN first. Each test precompiles its problems' kernels in parallel before running them. Also:
configs spread over the tuning space on a few shapes (strides, dilation, groups, NHWC, partial
tiles), and the workspace path of backward weights.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from test_gpu_solvers import DTYPES, PER_DIRECTION, _handle, run_on_device

import miocore
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.testing import TOLERANCES

pytestmark = pytest.mark.gpu

SOLVER = "direct.gpu_tiled"


@pytest.fixture
def handle() -> miocore.Handle:
    h = _handle()
    if h is None:
        pytest.skip("no GPU device")
    if SOLVER not in h.registry:
        pytest.skip(f"{SOLVER} is not installed")
    return h


@functools.cache
def _rows() -> list[dict]:
    if find_corpus() is None:
        return []
    return sample_rows(max(2 * PER_DIRECTION + 40, 10), seed=7)


def _applicable(h: miocore.Handle, direction: str, dtype: str) -> list[miocore.ConvProblem]:
    solver = h.registry.get(SOLVER).solver
    out = []
    for row in _rows():
        if row["dir"] != direction:
            continue
        p = shrink_row({**row, "dtype": dtype})
        if solver.is_applicable(h.context, p.canonical):
            out.append(p)
    return out


def _precompile(h: miocore.Handle, problems: list[miocore.ConvProblem]) -> None:
    solver = h.registry.get(SOLVER).solver
    kernels = []
    for p in problems:
        kernels.extend(solver.get_solution(h.context, p.canonical).kernels)
    failures = h.backend.precompile(kernels)
    assert not failures, next(iter(failures.values()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ("F", "B", "W"))
def test_tiled_matches_reference_on_corpus(
    handle: miocore.Handle, direction: str, dtype: str
) -> None:
    problems = _applicable(handle, direction, dtype)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    _precompile(handle, problems)
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    failures = []
    for i, problem in enumerate(problems):
        err, written = run_on_device(handle, SOLVER, problem, seed=i)
        if not written or not np.isfinite(err) or err > tol:
            failures.append(f"{problem.key}: error {err:.3g}, all written: {written}")
    print(f"{SOLVER} {direction} {dtype}: {len(problems)} problems checked")
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])
    assert len(problems) >= min(200, PER_DIRECTION)


_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations, groups, layout
    (2, 6, 10, (13, 19), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NCHW"),
    (1, 8, 8, (17, 11), (5, 3), (2, 0), (2, 3), (1, 2), 2, "NHWC"),
    (2, 4, 4, (9, 23), (7, 7), (3, 3), (1, 2), (1, 1), 4, "NCHW"),
    (1, 3, 20, (10, 10), (1, 7), (0, 3), (3, 1), (2, 1), 1, "NHWC"),
)


@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_tiled_configs(handle: miocore.Handle, direction: str, shape: int) -> None:
    n, c, k, hw, f, pads, strides, dils, groups, layout = _SHAPES[shape]
    problem = miocore.ConvProblem.from_sizes(
        direction,
        n=n,
        c=c,
        k=k,
        in_spatial=hw,
        filter_spatial=f,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=groups,
        layout=layout,
    )
    solver = handle.registry.get(SOLVER).solver
    canon = problem.canonical
    space = solver.perf_config_space(handle.context, canon)
    assert space
    configs = space[:: max(1, len(space) // 8)]  # about 8 configs spread over the space
    kernels = [
        k for cfg in configs for k in solver.get_solution(handle.context, canon, cfg).kernels
    ]
    assert not handle.backend.precompile(kernels)
    from miocore import reference

    inputs = reference.random_inputs(problem, 3)
    out_name = problem.direction.output_tensor
    expected = reference.convolution(
        problem, **{name: v for name, v in inputs.items() if name != out_name}
    )
    bad = []
    for cfg in configs:
        sol = solver.get_solution(handle.context, canon, cfg)
        compiled = handle.backend.compile(sol.kernels)
        dev = {}
        for name, values in inputs.items():
            desc = getattr(problem, name)
            fill = np.full(desc.lengths, np.nan, np.float32) if name == out_name else values
            dev[name] = handle.backend.from_host(desc, fill)
        ws = handle.backend.allocate_workspace(sol.workspace_size)
        invoker = sol.invoker_factory(compiled)
        invoker(
            handle,
            miocore.InvokeParams(problem=canon, x=dev["x"], w=dev["w"], y=dev["y"], workspace=ws),
        )
        got = handle.backend.to_host(dev[out_name])
        err = reference.relative_error(got, expected)
        if not np.isfinite(err) or err > 2e-5:
            bad.append(f"{dict(cfg)} ws={sol.workspace_size}: {err:.3g}")
    assert not bad, f"{len(bad)}/{len(configs)} configs failed:\n" + "\n".join(bad[:10])
