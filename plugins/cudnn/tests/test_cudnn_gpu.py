"""cuDNN's engines through miocore on a GPU (marked ``gpu``; skipped without a CUDA device or
without the cuDNN frontend).

* every direction x dtype x layout on small corpus-derived problems: each applicable engine
  (cuDNN's ranking, up to :data:`ENGINES_PER_PROBLEM`) against the float64 reference, the
  output poisoned with NaN first;
* the exact math mode never gets TF32 (the fp32 tolerance is 40x below TF32's error) and the
  ``"tf32"`` mode offers engines that run right within TF32's bound;
* find ranks cuDNN's engines with miocore's own, and the FindDb record round-trips: a new
  handle (and an emptied plan cache, as in a new process) runs the recorded engine + knobs.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import pytest

import miocore
from miocore import reference
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.errors import BackendUnavailableError
from miocore.testing import TOLERANCES

pytestmark = pytest.mark.gpu

ENGINES_PER_PROBLEM = int(os.environ.get("MIOCORE_CUDNN_TEST_ENGINES", "4"))
ROWS_PER_DIRECTION = int(os.environ.get("MIOCORE_CUDNN_TEST_ROWS", "5"))
#: TF32 keeps 10 mantissa bits: relative error up to a few 1e-4 on these sums.
TF32_TOLERANCE = 5e-3
LAYOUTS = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}

#: Problems of their own where no corpus is found: 3x3 pad 1, 1x1 stride 2, grouped and
#: dilated, 3-D.
BUILT_IN = [
    {"filt": [3, 3], "pad": [1, 1], "stride": [1, 1], "dil": [1, 1], "groups": 1},
    {"filt": [1, 1], "pad": [0, 0], "stride": [2, 2], "dil": [1, 1], "groups": 1},
    {"filt": [3, 3], "pad": [2, 2], "stride": [1, 1], "dil": [2, 2], "groups": 2},
    {"filt": [3, 3, 3], "pad": [1, 1, 1], "stride": [1, 1, 1], "dil": [1, 1, 1], "groups": 1},
]


@functools.cache
def _handle(math_mode: str = "exact") -> miocore.Handle | None:
    try:
        return miocore.Handle("cuda", math_mode=math_mode)
    except BackendUnavailableError:
        return None


@pytest.fixture
def handle() -> miocore.Handle:
    h = _handle()
    if h is None:
        pytest.skip("no CUDA device")
    from miocore_cudnn import _loader

    cudnn, reason = _loader.frontend()
    if cudnn is None:
        pytest.skip(reason)
    return h


LETTER = {"forward": "F", "backward_data": "B", "backward_weights": "W"}


@functools.cache
def _rows(direction: str) -> list[dict]:
    letter = LETTER[direction]
    if find_corpus() is None:
        rank_rows = []
        for spec in BUILT_IN:
            rank = len(spec["filt"])
            size = [9] * rank
            rank_rows.append({"dir": letter, "n": 2, "c": 8, "k": 8, "x": size, **spec})
        return rank_rows
    return [r for r in sample_rows(ROWS_PER_DIRECTION, seed=11) if r["dir"] == letter]


def problems(direction: str, dtype: str, layout_index: int) -> list[miocore.ConvProblem]:
    """Corpus rows of ``direction`` cut to test size, in ``dtype`` and the channels-first
    (0) or channels-last (1) layout of their rank."""
    out = []
    for row in _rows(direction):
        layout = LAYOUTS[len(row["x"])][layout_index]
        dtype_token = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}[dtype]
        out.append(
            shrink_row(
                {**row, "dtype": dtype_token, "layout": layout},
                max_channels_per_group=8,
            )
        )
    return out


def cudnn_engines(h: miocore.Handle, p: miocore.ConvProblem) -> list[str]:
    """cudnn.* solvers usable on ``p`` in cuDNN's order of preference: listed by the
    heuristics (``is_applicable``) and with a default setting cuDNN builds (asked after
    applicability, ``deferred_setup``: exact fp32 refuses tensor-core engines there)."""
    ctx = h.context
    found = []
    for reg in h.registry.solvers:
        if not reg.name.startswith("cudnn.") or not reg.solver.is_applicable(ctx, p):
            continue
        try:
            reg.solver.default_perf_config(ctx, p)
        except miocore.NotApplicableError:
            continue
        found.append((reg.solver.wti(ctx, p), reg.name))
    return [name for _, name in sorted(found, key=lambda t: (-t[0], t[1]))]


def run(h: miocore.Handle, solver: str, p: miocore.ConvProblem, seed: int) -> tuple[float, bool]:
    """(relative error against the float64 reference, every output element written)."""
    inputs = reference.random_inputs(p, seed)
    out_name = p.direction.output_tensor
    dev = {}
    for name, values in inputs.items():
        desc = getattr(p, name)
        poisoned = np.full(desc.lengths, np.nan, dtype=desc.dtype.numpy)
        dev[name] = h.backend.from_host(desc, poisoned if name == out_name else values)
    workspace = h.backend.allocate_workspace(h.get_solution_workspace_size(p, solver))
    h.immediate(p, solver, workspace=workspace, **dev)
    got = h.backend.to_host(dev[out_name]).astype(np.float64)
    expected = reference.convolution(p, **{k: v for k, v in inputs.items() if k != out_name})
    return reference.relative_error(got, expected), bool(np.isfinite(got).all())


def bound(h: miocore.Handle, solver: str, p: miocore.ConvProblem) -> float:
    declared = h.registry.get(solver).solver.expected_error(h.context, p)
    return max(TOLERANCES[p.dtype], declared or 0.0)


@pytest.mark.parametrize("layout_index", [0, 1], ids=["channels_first", "channels_last"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_engines_match_the_reference(
    handle: miocore.Handle, direction: str, dtype: str, layout_index: int
) -> None:
    checked, failures, declined = 0, [], []
    for p in problems(direction, dtype, layout_index):
        engines = cudnn_engines(handle, p)[:ENGINES_PER_PROBLEM]
        if not engines:
            reason = handle.registry.get("cudnn.eng0").solver.is_applicable(handle.context, p)
            declined.append((p.key, reason.reason))
            continue
        for solver in engines:
            err, written = run(handle, solver, p, seed=checked)
            checked += 1
            if not written or not err <= bound(handle, solver, p):
                failures.append((solver, p.key, err, written))
    assert not failures, failures
    assert checked, f"no cuDNN engine applied to any problem: {declined}"


def test_every_config_of_the_space_runs_right_or_is_rejected(handle: miocore.Handle) -> None:
    p = miocore.ConvProblem.from_sizes(
        "forward", n=4, c=32, k=64, in_spatial=(14, 14), filter_spatial=(3, 3), pads=(1, 1),
        dtype="float16", layout="NHWC",
    )  # fmt: skip
    ctx = handle.context
    solver = handle.registry.get(cudnn_engines(handle, p)[0]).solver
    inputs = reference.random_inputs(p, 5)
    expected = reference.convolution(p, x=inputs["x"], w=inputs["w"])
    ran, failures = 0, []
    for config in solver.perf_config_space(ctx, p):
        if not solver.is_valid_perf_config(ctx, p, config):
            continue
        solution = solver.get_solution(ctx, p, config)
        dev = {k: handle.backend.from_host(getattr(p, k), v) for k, v in inputs.items()}
        ws = handle.backend.allocate_workspace(solution.workspace_size)
        params = miocore.InvokeParams(problem=p, workspace=ws, **dev)
        solution.invoker_factory(())(handle, params)
        got = handle.backend.to_host(dev["y"]).astype(np.float64)
        err = reference.relative_error(got, expected)
        ran += 1
        if not err <= TOLERANCES[p.dtype]:
            failures.append((dict(config), err))
    assert ran and not failures, (solver.name, ran, failures)


def test_tf32_mode_offers_engines_that_run_within_tf32_bounds(handle: miocore.Handle) -> None:
    h = _handle("tf32")
    assert h is not None
    p = miocore.ConvProblem.from_sizes(
        "forward", n=4, c=64, k=64, in_spatial=(14, 14), filter_spatial=(3, 3), pads=(1, 1),
        dtype="float32", layout="NHWC",
    )  # fmt: skip
    engines = cudnn_engines(h, p)
    assert engines
    for solver in engines[:ENGINES_PER_PROBLEM]:
        err, written = run(h, solver, p, seed=1)
        assert written and err < TF32_TOLERANCE, (solver, err)
    # The exact mode offers no more engines than the tf32 mode (TF32 ones are barred there).
    assert set(cudnn_engines(handle, p)) <= set(engines)


def test_find_ranks_cudnn_with_miocore_and_the_record_round_trips(
    handle: miocore.Handle, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from miocore_cudnn import _plans

    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path / "user-db"))
    h = miocore.Handle("cuda")
    p = miocore.ConvProblem.from_sizes(
        "forward", n=8, c=64, k=64, in_spatial=(28, 28), filter_spatial=(3, 3), pads=(1, 1),
        dtype="float16", layout="NHWC",
    )  # fmt: skip
    found = h.find_solutions(p, find_mode="NORMAL")
    names = [s.solver for s in found]
    assert any(n.startswith("cudnn.") for n in names), names
    assert all(s.source == "measured" for s in found)
    recorded = next(s for s in found if s.solver.startswith("cudnn."))
    assert recorded.perf_config is not None

    _plans.clear_cache()  # as a new process: plans are rebuilt from the record
    h2 = miocore.Handle("cuda")
    again = h2.find_solutions(p, find_mode="FAST")
    twin = next(s for s in again if s.solver == recorded.solver)
    assert twin.source == "find-db" and twin.perf_config == recorded.perf_config
    inputs = reference.random_inputs(p, 3)
    dev = {k: h2.backend.from_host(getattr(p, k), v) for k, v in inputs.items()}
    h2.run_solution(twin, **dev)
    got = h2.backend.to_host(dev["y"]).astype(np.float64)
    expected = reference.convolution(p, x=inputs["x"], w=inputs["w"])
    assert reference.relative_error(got, expected) < TOLERANCES[p.dtype]
