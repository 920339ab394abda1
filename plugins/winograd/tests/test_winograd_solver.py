"""The Winograd solver on real problems: the corpus, every perf config, a property test, the
workspace contract, applicability reasons and registration."""

from __future__ import annotations

import tracemalloc
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from miocore_winograd import BLOCKS, TILES, WinogradRxS
from miocore_winograd.engine import make_plan

import miocore
from miocore import (
    ConvProblem,
    InvalidArgumentError,
    InvokeParams,
    NotApplicableError,
    PerfConfig,
    WorkspaceError,
)
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.reference import random_inputs
from miocore.testing import check_solver, cpu_context

SOLVER = WinogradRxS()
CTX = cpu_context()
DIRECTIONS = ("forward", "backward_data", "backward_weights")
PER_DIRECTION = 300

#: Relative error bounds per dtype and output tile (see test_winograd_transforms for how they
#: were measured): fp32 grows with the tile; fp16/bf16 are bounded by their final rounding.
#: Split filters and stride phases sum more virtual channels, so fp32 gets headroom over the
#: pure 3x3 numbers.
TOLERANCE = {
    "float32": {2: 2e-6, 4: 3e-5, 6: 1e-4},
    "float16": {2: 2e-3, 4: 2e-3, 6: 2e-3},
    "bfloat16": {2: 1.6e-2, 4: 1.6e-2, 6: 1.6e-2},
}


def tolerance(problem: ConvProblem, config: PerfConfig | None = None) -> float:
    """The bound for ``problem`` under ``config`` (the default config when None)."""
    config = config or SOLVER.default_perf_config(CTX, problem.canonical)
    return TOLERANCE[problem.dtype.value][config["tile"]]


def _kind(p: ConvProblem) -> set[str]:
    c = p.canonical
    kinds = {c.dtype.value, c.x.layout, f"f{c.filter_spatial[0]}x{c.filter_spatial[1]}"}
    if any(f > 3 for f in c.filter_spatial):
        kinds.add("split")
    if 1 in c.filter_spatial:
        kinds.add("1xN")
    if any(s > 1 for s in c.conv.strides):
        kinds.add("strided")
    if c.is_depthwise:
        kinds.add("depthwise")
    elif c.groups > 1:
        kinds.add("grouped")
    return kinds


@pytest.fixture(scope="module")
def corpus_problems() -> dict[str, list[ConvProblem]]:
    if find_corpus() is None:
        pytest.skip("the problem corpus (shared/corpus/miopen_problems.jsonl.gz) was not found")
    rows = sample_rows(1500, seed=3)
    out: dict[str, list[ConvProblem]] = {d: [] for d in DIRECTIONS}
    for direction in DIRECTIONS:
        for row in rows:
            if len(out[direction]) >= PER_DIRECTION:
                break
            p = shrink_row(row, direction=direction)
            if SOLVER.is_applicable(CTX, p.canonical):
                out[direction].append(p)
    return out


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_corpus_problems(corpus_problems: dict[str, list[ConvProblem]], direction: str) -> None:
    problems = corpus_problems[direction]
    assert len(problems) >= PER_DIRECTION, f"only {len(problems)} applicable {direction} rows"
    seen = Counter(k for p in problems for k in _kind(p))
    for needed in (
        "f3x3",
        "split",
        "1xN",
        "strided",
        "grouped",
        "depthwise",
        "NCHW",
        "NHWC",
        "float32",
        "float16",
        "bfloat16",
    ):
        assert seen[needed], f"no applicable {needed} problem among the sampled {direction} rows"
    for i, p in enumerate(problems):
        check_solver(SOLVER, p, seed=i, tolerance=tolerance(p))


PERF_PROBLEMS = [
    dict(n=2, c=6, k=5, in_spatial=(13, 11), filter_spatial=(3, 3), pads=(1, 1)),
    dict(
        n=1,
        c=4,
        k=6,
        in_spatial=(12, 14),
        filter_spatial=(5, 5),
        pads=(2, 1),
        strides=(2, 2),
        groups=2,
        layout="NHWC",
    ),
    dict(
        n=2,
        c=6,
        k=6,
        in_spatial=(9, 10),
        filter_spatial=(1, 3),
        pads=(0, 1),
        groups=6,
        dtype="float16",
    ),
]


@pytest.mark.parametrize("spec", PERF_PROBLEMS, ids=["3x3", "5x5s2g2", "1x3dw"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_every_perf_config(spec: dict, direction: str) -> None:
    p = ConvProblem.from_sizes(direction, **spec)
    space = list(SOLVER.perf_config_space(CTX, p))
    assert space[0] == SOLVER.default_perf_config(CTX, p)
    assert len(space) == len(set(space)) == len(TILES) * len(BLOCKS)
    for config in space:
        assert SOLVER.is_valid_perf_config(CTX, p, config)
        sol = SOLVER.get_solution(CTX, p, config)
        assert sol.perf_config == config
        check_solver(SOLVER, p, perf_config=config, tolerance=tolerance(p, config))


def test_bad_perf_config_is_refused() -> None:
    p = ConvProblem.from_sizes("forward", n=1, c=2, k=2, in_spatial=(6, 6), filter_spatial=(3, 3))
    assert not SOLVER.is_valid_perf_config(CTX, p, PerfConfig(tile=5, block=512))
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        SOLVER.get_solution(CTX, p, PerfConfig(tile=5, block=512))
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        SOLVER.workspace_size(CTX, p, PerfConfig(tile=4))


@st.composite
def problems(draw: st.DrawFn) -> ConvProblem:
    rank = draw(st.sampled_from([2, 2, 2, 3]))
    fil = tuple(draw(st.integers(1, 7)) for _ in range(rank))
    dil = tuple(draw(st.sampled_from([1, 1, 1, 2])) for _ in range(rank))
    stride = tuple(draw(st.sampled_from([1, 1, 2, 3, 5])) for _ in range(rank))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(rank))
    size = tuple(
        max(draw(st.integers(1, 12)), d * (f - 1) + 1 - 2 * q)
        for f, d, q in zip(fil, dil, pads, strict=True)
    )
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c = groups * draw(st.integers(1, 3))
    k = groups * draw(st.integers(1, 3))
    layout = draw(st.sampled_from(["NCHW", "NHWC"] if rank == 2 else ["NCDHW", "NDHWC"]))
    return ConvProblem.from_sizes(
        draw(st.sampled_from(DIRECTIONS)),
        n=draw(st.integers(1, 2)),
        c=c,
        k=k,
        in_spatial=size,
        filter_spatial=fil,
        pads=pads,
        strides=stride,
        dilations=dil,
        groups=groups,
        dtype=draw(st.sampled_from(["float32", "float16", "bfloat16"])),
        layout=layout,
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(), tile=st.sampled_from(TILES), block=st.sampled_from(BLOCKS))
def test_applicable_means_correct(problem: ConvProblem, tile: int, block: int) -> None:
    answer = SOLVER.is_applicable(CTX, problem)
    if answer:
        config = PerfConfig(tile=tile, block=block)
        check_solver(SOLVER, problem, perf_config=config, tolerance=tolerance(problem, config))
        assert 0 < SOLVER.wti(CTX, problem) <= 1
    else:
        assert answer.reason
        assert SOLVER.wti(CTX, problem) < 0
        with pytest.raises(NotApplicableError, match=r"winograd\.rxs"):
            SOLVER.get_solution(CTX, problem)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (dict(in_spatial=(6, 6, 6), filter_spatial=(3, 3, 3)), "3-D"),
        (dict(in_spatial=(9, 9), filter_spatial=(3, 3), dilations=(2, 2)), "dilation"),
        (dict(in_spatial=(9, 9), filter_spatial=(1, 1)), "1x1"),
        (dict(in_spatial=(9, 9), filter_spatial=(2, 2), strides=(2, 2)), "1x1 phase"),
        (dict(in_spatial=(19, 19), filter_spatial=(3, 3), strides=(5, 5)), "stride"),
    ],
)
def test_reasons(spec: dict, reason: str) -> None:
    p = ConvProblem.from_sizes("forward", n=1, c=2, k=2, **spec)
    answer = SOLVER.is_applicable(CTX, p)
    assert not answer and reason in answer.reason


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("config", [PerfConfig(tile=2, block=128), PerfConfig(tile=6, block=8192)])
def test_workspace_is_exact_and_used(direction: str, config: PerfConfig) -> None:
    p = ConvProblem.from_sizes(
        direction,
        n=3,
        c=8,
        k=16,
        in_spatial=(30, 26),
        filter_spatial=(5, 3),
        pads=(2, 1),
        strides=(2, 1),
        groups=2,
        layout="NHWC",
    )
    size = SOLVER.workspace_size(CTX, p, config)
    sol = SOLVER.get_solution(CTX, p, config)
    assert sol.workspace_size == size > 0
    inputs = random_inputs(p, 1)
    invoker = sol.invoker_factory(())
    out = direction_output = {"forward": "y", "backward_data": "x", "backward_weights": "w"}[
        direction
    ]
    arrays = dict(inputs)
    arrays[out] = np.full_like(inputs[out], np.nan)
    for short in (None, np.empty(size - 1, np.uint8)):
        with pytest.raises(WorkspaceError, match="workspace"):
            invoker(None, InvokeParams(problem=p, workspace=short, **arrays))
    # Exactly ``size`` bytes suffice, and the run allocates no scratch of that order itself.
    workspace = np.full(size, 0xFF, np.uint8)  # NaN-ish garbage: buffers must be overwritten
    tracemalloc.start()
    invoker(None, InvokeParams(problem=p, workspace=workspace, **arrays))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < size / 4, f"the invoker allocated {peak} bytes beside a {size}-byte workspace"
    expected = miocore.reference.convolution(p, **{k: v for k, v in inputs.items() if k != out})
    assert miocore.reference.relative_error(arrays[direction_output], expected) < 1e-4


def test_registered_through_the_entry_point() -> None:
    found = {s.name: s for s in miocore.solvers()}
    assert "winograd.rxs" in found
    assert found["winograd.rxs"].plugin == "winograd"
    assert found["winograd.rxs"].solver.algorithm is miocore.Algorithm.WINOGRAD


def test_wti_prefers_wide_layers() -> None:
    def wti(c: int) -> float:
        p = ConvProblem.from_sizes(
            "forward", n=1, c=c, k=c, in_spatial=(28, 28), filter_spatial=(3, 3), pads=(1, 1)
        )
        return SOLVER.wti(CTX, p)

    assert 0 < wti(4) < wti(256) <= 1


#: NCHW float32 stride-1 shapes that take the channel-major path: one fused chunk, several chunks
#: with several transform blocks per chunk (wide channels), cropped and exact tiles, batch > 1.
CHANNEL_MAJOR = [
    dict(n=1, c=100, k=100, in_spatial=(7, 9)),  # one chunk: filter transform fused per K block
    dict(n=3, c=8, k=5, in_spatial=(30, 26)),  # several chunks, cropped tiles
    dict(n=2, c=300, k=40, in_spatial=(16, 16)),  # several transform blocks per chunk
    dict(n=1, c=4, k=300, in_spatial=(64, 60)),  # several output blocks, exact tiles
]


@pytest.mark.parametrize("spec", CHANNEL_MAJOR, ids=["fused", "chunks", "cblocks", "kblocks"])
@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("config", [PerfConfig(tile=t, block=128) for t in TILES])
def test_channel_major_path(spec: dict, direction: str, config: PerfConfig) -> None:
    p = ConvProblem.from_sizes(direction, filter_spatial=(3, 3), pads=(1, 1), **spec)
    plan = make_plan(p.canonical, config["tile"], config["block"])
    assert plan.channel_major
    check_solver(SOLVER, p, perf_config=config, tolerance=tolerance(p, config))


def test_channel_major_strided_backward_data() -> None:
    p = ConvProblem.from_sizes(
        "backward_data", n=2, c=6, k=7, in_spatial=(15, 12), filter_spatial=(3, 3),
        pads=(1, 1), strides=(2, 2),
    )  # fmt: skip
    assert make_plan(p.canonical, 4, 128).channel_major  # one run per dx phase
    check_solver(SOLVER, p, perf_config=PerfConfig(tile=4, block=128), tolerance=3e-5)


def test_default_tile_follows_the_tile_count() -> None:
    def tile(n: int, hw: int) -> int:
        p = ConvProblem.from_sizes(
            "forward", n=n, c=64, k=64, in_spatial=(hw, hw), filter_spatial=(3, 3), pads=(1, 1)
        )
        return SOLVER.default_perf_config(CTX, p)["tile"]

    assert (tile(1, 7), tile(1, 14), tile(8, 7), tile(1, 28), tile(1, 224)) == (2, 2, 4, 4, 4)


def test_expected_error_covers_wide_reductions() -> None:
    """The solver's declared float32 error bound holds on a 512-channel layer, where the error
    is several times that of the small corpus problems (what ``miocore conv -V 1`` checks)."""
    ctx = cpu_context()
    p = ConvProblem.from_sizes(
        "forward", n=1, c=512, k=16, in_spatial=(12, 12), filter_spatial=(3, 3), pads=(1, 1)
    )
    config = PerfConfig(tile=4, block=128)
    bound = SOLVER.expected_error(ctx, p.canonical, config)
    assert bound is not None and bound > TOLERANCE["float32"][4]
    err = check_solver(SOLVER, p, perf_config=config, tolerance=bound)
    assert err > 1e-6  # a real Winograd error, not an exact result
    half = ConvProblem.from_sizes(
        "forward",
        n=1,
        c=8,
        k=4,
        in_spatial=(6, 6),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float16",
    )
    assert SOLVER.expected_error(ctx, half.canonical) is None
