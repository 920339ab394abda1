"""``igemm.gpu_fma`` (exact fp32 on CUDA cores) against the float64 reference, all three
directions (marked ``gpu``).

Problems are corpus-derived: 2-D rows of every direction (filters, pads, strides, dilations,
groups kept), as fp32, alternately in the row's own layout and in NHWC, shrunk to 3, 4, 8 or 16
channels per group so that both the scalar gathers (NCHW, channel counts not a multiple of 4)
and the 16-byte loads run; ``MIOCORE_GPU_TEST_PROBLEMS`` (60) per direction. Outputs are
poisoned with NaN first. Tolerance: ``miocore.testing.TOLERANCES[float32]`` on the relative
error (max abs error / max abs reference): plain fp32 products and fp32 accumulation. Plus
explicit odd shapes (stride 2, dilation 2, groups 2, 7x7, 1x1, channels not a multiple of 4)
over configs spread through the tuning space, split-K included.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from test_gpu_solvers import _handle

import miocore
from miocore import reference
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.testing import TOLERANCES

pytestmark = pytest.mark.gpu

FMA = "igemm.gpu_fma"
PER_DIR = int(os.environ.get("MIOCORE_GPU_TEST_PROBLEMS", "60"))
TOL = TOLERANCES[miocore.DataType.FLOAT32]
OUTPUT = {"forward": "y", "backward_data": "x", "backward_weights": "w"}


def _need() -> miocore.Handle:
    h = _handle()
    if h is None:
        pytest.skip("no GPU device")
    if FMA not in h.registry:
        pytest.skip(f"{FMA} is not installed")
    return h


@functools.cache
def _rows() -> list[dict]:
    if find_corpus() is None:
        return []
    return [r for r in sample_rows(2 * PER_DIR + 40, seed=5) if len(r["x"]) == 2]


def _problems(h: miocore.Handle, direction: str) -> list[miocore.ConvProblem]:
    sol = h.registry.get(FMA).solver
    code = {"forward": "F", "backward_data": "B", "backward_weights": "W"}[direction]
    out = []
    for i, row in enumerate(r for r in _rows() if r["dir"] == code):
        layout = row["layout"] if i % 2 else "NHWC"
        p = shrink_row(
            {**row, "dtype": "FP32", "layout": layout},
            max_channels_per_group=(4, 8, 3, 16)[i % 4],
        ).canonical
        if sol.is_applicable(h.context, p):
            out.append(p)
        if len(out) >= PER_DIR:
            break
    return out


def _run(h: miocore.Handle, problem: miocore.ConvProblem, seed: int, cfg=None) -> str | None:
    """Run on the device with a NaN-poisoned output; None when it matches the reference."""
    reg = h.registry.get(FMA).solver
    sol = reg.get_solution(h.context, problem, cfg)
    compiled = h.backend.compile(sol.kernels)
    inputs = reference.random_inputs(problem, seed)
    out = OUTPUT[problem.direction.value]
    dev = {}
    for name in ("x", "w", "y"):
        desc = getattr(problem, name)
        values = np.full(desc.lengths, np.nan, np.float32) if name == out else inputs[name]
        dev[name] = h.backend.from_host(desc, values)
    ws = h.backend.allocate_workspace(sol.workspace_size)
    sol.invoker_factory(compiled)(h, miocore.InvokeParams(problem=problem, workspace=ws, **dev))
    got = h.backend.to_host(dev[out]).astype(np.float64)
    expected = reference.convolution(problem, **{k: v for k, v in inputs.items() if k != out})
    if not np.isfinite(got).all():
        return f"{int(np.isnan(got).sum())} elements not written (NaN left)"
    err = reference.relative_error(got, expected)
    return None if err <= TOL else f"relative error {err:.3g} > {TOL}"


def _precompile(h: miocore.Handle, problems: list, configs: list | None = None) -> None:
    reg = h.registry.get(FMA).solver
    kernels = [
        k
        for i, p in enumerate(problems)
        for k in reg.get_solution(h.context, p, configs[i] if configs else None).kernels
    ]
    failures = h.backend.precompile(kernels)
    assert not failures, next(iter(failures.values()))


@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
def test_igemm_fma_matches_reference_on_corpus(direction: str) -> None:
    h = _need()
    problems = _problems(h, direction)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    _precompile(h, problems)
    failures = []
    for i, p in enumerate(problems):
        why = _run(h, p, seed=i)
        if why:
            failures.append(f"{p.key}: {why}")
    print(f"{FMA} {direction}: {len(problems)} corpus problems checked")
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])
    assert len(problems) >= min(40, PER_DIR)


_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations, groups, layout
    (2, 64, 96, (13, 19), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NHWC"),
    (3, 32, 40, (17, 11), (5, 3), (2, 0), (2, 2), (2, 2), 2, "NHWC"),
    (2, 6, 10, (21, 20), (7, 7), (3, 3), (2, 2), (1, 1), 1, "NHWC"),
    (2, 132, 260, (7, 7), (1, 1), (0, 0), (1, 1), (1, 1), 1, "NHWC"),
    (1, 24, 20, (10, 10), (1, 7), (0, 3), (3, 1), (2, 1), 1, "NCHW"),
    (2, 30, 18, (12, 9), (3, 3), (1, 1), (2, 2), (1, 1), 2, "NCHW"),
    (2, 136, 144, (9, 9), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NHWC"),
)


@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_igemm_fma_configs(direction: str, shape: int) -> None:
    h = _need()
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
        dtype="float32",
        layout=layout,
    ).canonical
    reg = h.registry.get(FMA).solver
    space = reg.perf_config_space(h.context, problem)
    assert space
    configs = [reg.default_perf_config(h.context, problem), *space[:: max(1, len(space) // 5)]]
    configs += [c for c in space if c["split"] > 1][-1:]
    _precompile(h, [problem] * len(configs), configs)
    bad = []
    for i, cfg in enumerate(configs):
        why = _run(h, problem, seed=i, cfg=cfg)
        if why:
            bad.append(f"{dict(cfg)}: {why}")
    assert not bad, f"{len(bad)}/{len(configs)} configs failed:\n" + "\n".join(bad[:10])


def test_find_picks_igemm_fma_for_exact_fp32() -> None:
    h = _need()
    problem = miocore.ConvProblem.from_sizes(
        "forward",
        n=4,
        c=64,
        k=64,
        in_spatial=(14, 14),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float32",
        layout="NHWC",
    )
    sols = h.find_solutions(problem, find_mode="NORMAL", exhaustive=True)
    assert FMA in {s.solver for s in sols}
