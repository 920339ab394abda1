"""Performance configurations: every one in the space is correct; invalid ones are refused."""

from __future__ import annotations

import pytest
from miocore_igemm import SOLVERS

from miocore import ConvProblem, InvalidArgumentError, PerfConfig
from miocore.testing import check_solver, cpu_context

# Tolerances as in test_igemm_corpus (float32 sums, one rounding to the output dtype).
TOLERANCE = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}

# Batch 3 makes the last tap chunk partial for chunk sizes 2; sizes give several row blocks.
SHAPES = [
    dict(n=3, c=6, k=8, in_spatial=(9, 11), filter_spatial=(3, 3), pads=(1, 1), layout="NCHW"),
    dict(
        n=3,
        c=6,
        k=8,
        in_spatial=(9, 11),
        filter_spatial=(3, 3),
        pads=(1, 1),
        layout="NHWC",
        dtype="float16",
    ),
    dict(n=3, c=8, k=4, in_spatial=(7, 6), filter_spatial=(1, 1), layout="NHWC"),
    dict(n=2, c=8, k=4, in_spatial=(7, 6), filter_spatial=(1, 1), layout="NCHW", groups=2),
    dict(
        n=2,
        c=4,
        k=6,
        in_spatial=(4, 5, 6),
        filter_spatial=(3, 1, 3),
        pads=(1, 0, 2),
        dilations=(1, 1, 2),
        layout="NDHWC",
        dtype="bfloat16",
        groups=2,
    ),
    dict(
        n=3,
        c=6,
        k=6,
        in_spatial=(12, 10),
        filter_spatial=(3, 3),
        pads=(1, 1),
        strides=(2, 2),
        layout="NCHW",
        groups=3,
    ),
    dict(
        n=2,
        c=4,
        k=4,
        in_spatial=(8, 8),
        filter_spatial=(3, 3),
        pads=(1, 1),
        layout="NHWC",
        groups=4,
    ),
]


def _problem(direction, shape):
    return ConvProblem.from_sizes(direction, **shape)


@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_every_config_is_correct(solver, shape) -> None:
    ctx = cpu_context()
    problem = _problem(solver.direction, SHAPES[shape])
    space = list(solver.perf_config_space(ctx, problem))
    assert space[0] == solver.default_perf_config(ctx, problem)
    assert len(space) == len(set(space))
    strategies = {c["strategy"] for c in space}
    assert "block" in strategies
    for config in space:
        assert solver.is_valid_perf_config(ctx, problem, config)
        assert PerfConfig.from_string(config.to_string()) == config
        check_solver(solver, problem, perf_config=config, tolerance=TOLERANCE[problem.dtype.value])


def test_space_has_tap_only_for_unit_strides_and_non_depthwise() -> None:
    ctx = cpu_context()
    fwd = SOLVERS[0]
    dense = _problem("forward", SHAPES[0])
    strided = _problem("forward", SHAPES[5])
    depthwise = _problem("forward", SHAPES[6])
    assert any(c["strategy"] == "tap" for c in fwd.perf_config_space(ctx, dense))
    for p in (strided, depthwise):
        assert all(c["strategy"] == "block" for c in fwd.perf_config_space(ctx, p))


BAD = [
    PerfConfig(strategy="tap"),  # missing block
    PerfConfig(strategy="block", block=1000),  # not a searched size
    PerfConfig(strategy="block", block=0),
    PerfConfig(strategy="tap", block=16),  # more images than the batch
    PerfConfig(strategy="winograd", block=1),
    PerfConfig(strategy="block", block=1024, extra=1),
    PerfConfig(strategy="block", block="1024"),
]


@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
@pytest.mark.parametrize("bad", BAD, ids=lambda c: c.to_string())
def test_invalid_configs_rejected(solver, bad) -> None:
    ctx = cpu_context()
    problem = _problem(solver.direction, SHAPES[0])
    assert not solver.is_valid_perf_config(ctx, problem, bad)
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        solver.get_solution(ctx, problem, bad)
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        solver.workspace_size(ctx, problem, bad)


@pytest.mark.parametrize("shape", [5, 6])
def test_tap_refused_with_reason_on_strided_and_depthwise(shape) -> None:
    ctx = cpu_context()
    problem = _problem("forward", SHAPES[shape])
    tap = PerfConfig(strategy="tap", block=1)
    assert not SOLVERS[0].is_valid_perf_config(ctx, problem, tap)
    reason = "strides" if shape == 5 else "depthwise"
    with pytest.raises(InvalidArgumentError, match=reason):
        SOLVERS[0].get_solution(ctx, problem, tap)


def test_default_rule() -> None:
    ctx = cpu_context()
    fwd, bwd, wrw = SOLVERS

    def p(direction, **kw):
        base = dict(n=8, c=64, k=64, in_spatial=(56, 56), filter_spatial=(1, 1))
        return ConvProblem.from_sizes(direction, **{**base, **kw})

    # 1x1 unit stride: tap, one image per chunk at 56x56, whole batch at 7x7
    assert fwd.default_perf_config(ctx, p("forward")) == {"strategy": "tap", "block": 1}
    assert fwd.default_perf_config(ctx, p("forward", in_spatial=(7, 7)))["block"] == 8
    # 3x3 on a large image: tap forward and backward data, column blocks for weights
    big = dict(filter_spatial=(3, 3), pads=(1, 1))
    assert fwd.default_perf_config(ctx, p("forward", **big))["strategy"] == "tap"
    assert bwd.default_perf_config(ctx, p("backward_data", **big))["strategy"] == "tap"
    assert wrw.default_perf_config(ctx, p("backward_weights", **big))["strategy"] == "block"
    # small image (grid waste 1.31) and strided layers: column blocks
    small = dict(filter_spatial=(3, 3), pads=(1, 1), in_spatial=(14, 14))
    assert fwd.default_perf_config(ctx, p("forward", **small))["strategy"] == "block"
    assert fwd.default_perf_config(ctx, p("forward", strides=(2, 2)))["strategy"] == "block"
