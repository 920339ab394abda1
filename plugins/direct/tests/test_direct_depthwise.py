"""direct.depthwise: the contract suite, the corpus's depthwise rows, property tests and the
solver's plumbing (threads, staging, generated kernels); its kernels one by one are in
``test_direct_depthwise_kernels.py``, the NCHW paths in ``test_direct_depthwise_nchw.py``.

Tolerances (relative error = max abs error / max abs reference) are miocore.testing.TOLERANCES:
float32 2e-5, float16 2e-3, bfloat16 1.6e-2; the kernels accumulate in float32.
"""

from __future__ import annotations

import numpy as np
import pytest
from direct_depthwise_support import DIRECTIONS, depthwise_problem, twenty_channels
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from miocore_direct import DepthwiseDirectSolver

from miocore import ConvProblem, InvalidArgumentError
from miocore.corpus import find_corpus, load_rows, shrink_row
from miocore.testing import TOLERANCES, SolverContract, check_solver, cpu_context


class TestDepthwiseContract(SolverContract):
    """direct.depthwise on its own problems (the generic generator rarely draws groups == C)."""

    solver = DepthwiseDirectSolver()
    problems = tuple(
        depthwise_problem(d, layout, dtype, mult)
        for d in DIRECTIONS
        for layout, dtype, mult in (
            ("NCHW", "float32", 1),
            ("NHWC", "float16", 2),
            ("NHWC", "float32", 1),
            ("NCHW", "bfloat16", 3),
        )
    )


@pytest.mark.skipif(find_corpus() is None, reason="the problem corpus is not available")
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_matches_reference_on_corpus_depthwise_rows(direction: str, layout: str) -> None:
    """Every distinct 2-D depthwise geometry of the corpus (filter, pads, strides, dilations,
    multiplier, dtype), shrunk, in each direction and both layouts."""
    solver, ctx = DepthwiseDirectSolver(), cpu_context()
    seen: dict[tuple, dict] = {}
    for row in load_rows():
        if len(row["x"]) == 2 and row["groups"] == row["c"] > 1:
            geometry = (*map(tuple, (row["filt"], row["pad"], row["stride"], row["dil"])),)
            seen.setdefault((geometry, row["k"] // row["groups"], row["dtype"]), row)
    assert len(seen) >= 10
    for i, row in enumerate(seen.values()):
        problem = shrink_row(
            {**row, "layout": layout}, direction=direction, max_batch=2, max_spatial=12
        )
        assert solver.is_applicable(ctx, problem), problem
        check_solver(solver, problem, seed=i, tolerance=TOLERANCES[problem.dtype])


@st.composite
def depthwise_problems(draw: st.DrawFn) -> ConvProblem:
    """Size-1 dimensions, even filters, dilations that reach into the padding."""
    filt = tuple(draw(st.integers(1, 8)) for _ in range(2))
    dils = tuple(draw(st.integers(1, 3)) for _ in range(2))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(2))
    pads = tuple(draw(st.integers(0, (f - 1) * d + 1)) for f, d in zip(filt, dils, strict=True))
    ins = []
    for f, d, p in zip(filt, dils, pads, strict=True):
        smallest = max(1, d * (f - 1) + 1 - 2 * p)
        ins.append(draw(st.integers(smallest, smallest + 6)))
    channels = draw(st.integers(2, 9))
    return ConvProblem.from_sizes(
        draw(st.sampled_from(DIRECTIONS)),
        n=draw(st.integers(1, 3)),
        c=channels,
        k=channels * draw(st.integers(1, 3)),
        in_spatial=tuple(ins),
        filter_spatial=filt,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=channels,
        dtype=draw(st.sampled_from(["float32", "float16", "bfloat16"])),
        layout=draw(st.sampled_from(["NCHW", "NHWC"])),
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depthwise_problems(), st.integers(0, 2**16))
def test_random_depthwise_problems_match_reference(problem: ConvProblem, seed: int) -> None:
    ctx = cpu_context()
    solver = DepthwiseDirectSolver()
    assert solver.is_applicable(ctx, problem)
    check_solver(solver, problem, seed=seed, tolerance=TOLERANCES[problem.dtype])
    assert 0 < solver.wti(ctx, problem) <= 1


def test_declines_non_depthwise_with_a_reason() -> None:
    ctx, solver = cpu_context(), DepthwiseDirectSolver()
    grouped = ConvProblem.from_sizes(
        "forward", n=1, c=8, k=8, in_spatial=(5, 5), filter_spatial=(3, 3), groups=2
    )
    answer = solver.is_applicable(ctx, grouped)
    assert not answer and "not depthwise" in answer.reason
    with pytest.raises(InvalidArgumentError, match="not depthwise"):
        solver.get_solution(ctx, grouped)


def test_float32_nhwc_runs_in_place_without_staging() -> None:
    """Packed float32 tensors in the kernel's order need only the weights in the workspace."""
    ctx, solver = cpu_context(), DepthwiseDirectSolver()
    problem = depthwise_problem("forward", "NHWC", "float32")
    taps = 3 * 5
    assert solver.workspace_size(ctx, problem) == 64 * -(-4 * problem.k * taps // 64)
    half = depthwise_problem("forward", "NHWC", "float16")
    assert solver.workspace_size(ctx, half) > solver.workspace_size(ctx, problem)
    assert np.isfinite(solver.wti(ctx, problem))


def test_kernels_use_the_backends_thread_count() -> None:
    """numba's pool follows CpuBackend(threads=...), as the BLAS pools do."""
    import types

    import numba
    from threadpoolctl import threadpool_info, threadpool_limits

    from miocore import InvokeParams
    from miocore.backends.cpu import CpuBackend
    from miocore.reference import random_inputs

    original = {lib["prefix"]: lib["num_threads"] for lib in threadpool_info()}
    before = numba.get_num_threads()
    try:
        problem = depthwise_problem("forward", "NHWC", "float32")
        solution = DepthwiseDirectSolver().get_solution(cpu_context(), problem)
        invoker = solution.invoker_factory(())
        workspace = np.empty(solution.workspace_size, np.uint8)
        params = InvokeParams(problem=problem, **random_inputs(problem, 0), workspace=workspace)
        invoker(types.SimpleNamespace(backend=CpuBackend(threads=1)), params)
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(before)
        threadpool_limits(limits=original)


def test_compiles_for_tells_whether_a_generated_kernel_is_cached(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compiles_for (DYNAMIC_HYBRID's question) is True while a generated kernel the problem
    needs is neither loaded nor in numba's disk cache, False once its cache index is there,
    and False for the generic kernels (compiled once per machine for every problem). It
    builds nothing."""
    import sys

    from miocore_direct.depthwise import _Plan

    from miocore.backends.cpu_generated import generated_folder as _folder
    from miocore.backends.cpu_generated import module_name as _module_name

    monkeypatch.setenv("MIOCORE_KERNEL_CACHE_PATH", str(tmp_path / "kernels"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    ctx, solver = cpu_context(), DepthwiseDirectSolver()
    # 29 channels at 5x5: a tile kernel per channel count, not loaded by any other test
    tiles = ConvProblem.from_sizes(
        "forward", n=1, c=29, k=29, in_spatial=(9, 9), filter_spatial=(5, 5), pads=(2, 2),
        groups=29, layout="NHWC",
    )  # fmt: skip
    names = [_module_name(*spec) for spec in _Plan(tiles).generated()]
    assert len(names) == 1 and "tiles_5x5" in names[0] and names[0] not in sys.modules
    assert solver.compiles_for(ctx, tiles)
    cache = _folder() / "__pycache__"
    cache.mkdir(parents=True)
    (cache / f"{names[0]}.kernel-9.py311.nbi").touch()
    assert not solver.compiles_for(ctx, tiles)
    generic = ConvProblem.from_sizes(  # a channel multiplier of 2: the generic kernel
        "backward_weights", n=1, c=6, k=12, in_spatial=(9, 9), filter_spatial=(3, 3),
        pads=(1, 1), groups=6, layout="NHWC",
    )  # fmt: skip
    assert _Plan(generic).generated() == [] and not solver.compiles_for(ctx, generic)


@pytest.mark.parametrize(
    ("direction", "filt", "strides", "layout"),
    [
        ("forward", (3, 3), (1, 1), "NHWC"),
        ("forward", (5, 5), (1, 1), "NHWC"),
        ("forward", (5, 5), (2, 2), "NHWC"),
        ("backward_data", (5, 5), (2, 2), "NHWC"),
        ("forward", (5, 5), (2, 2), "NCHW"),
        ("backward_weights", (3, 3), (1, 1), "NCHW"),
    ],
)
def test_generated_lists_what_the_invoker_loads(direction, filt, strides, layout) -> None:
    """Every kernel a run loads is one _Plan.generated() names, so compiles_for is False after
    a first run in the same process."""
    import sys

    from miocore_direct.depthwise import _Plan

    from miocore.backends.cpu_generated import module_name as _module_name

    pads = (filt[0] // 2, filt[1] // 2)
    problem = twenty_channels(direction, 1, filt, pads, strides, (1, 1), (12, 13), "float32",
                               layout)  # fmt: skip
    before = {m for m in sys.modules if m.startswith("miocore_dw_")}
    check_solver(DepthwiseDirectSolver(), problem, seed=19, tolerance=TOLERANCES[problem.dtype])
    loaded = {m for m in sys.modules if m.startswith("miocore_dw_")}
    names = {_module_name(*spec) for spec in _Plan(problem).generated()}
    assert names and names <= loaded and (loaded - before) <= names
    assert not DepthwiseDirectSolver().compiles_for(cpu_context(), problem)
