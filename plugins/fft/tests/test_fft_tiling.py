"""Every perf config (FFT tile length) is correct, including images far larger than a tile."""

from __future__ import annotations

import pytest
from miocore_fft import FftOverlapSave, FftPlan
from miocore_fft.accuracy import TOLERANCES

from miocore import ConvProblem, InvalidArgumentError, PerfConfig
from miocore.testing import check_solver, cpu_context

DIRECTIONS = ("forward", "backward_data", "backward_weights")
SOLVER = FftOverlapSave()
CTX = cpu_context()

CASES = {
    # 2-D image 6x longer than a 16-point tile, odd sizes so the last tile is partial
    "2d-large-3x3": dict(n=2, c=3, k=4, in_spatial=(97, 83), filter_spatial=(3, 3), pads=(1, 1)),
    # large filter, dilation, asymmetric pads, NHWC float16
    "2d-7x5-dilated": dict(
        n=1,
        c=4,
        k=2,
        in_spatial=(70, 61),
        filter_spatial=(7, 5),
        pads=(3, 0),
        dilations=(1, 2),
        layout="NHWC",
        dtype="float16",
    ),
    # grouped and depthwise
    "2d-grouped": dict(
        n=2, c=6, k=4, in_spatial=(50, 40), filter_spatial=(5, 5), pads=(2, 2), groups=2
    ),
    "2d-depthwise-bf16": dict(
        n=1,
        c=3,
        k=3,
        in_spatial=(45, 66),
        filter_spatial=(3, 3),
        pads=(1, 1),
        groups=3,
        dtype="bfloat16",
    ),
    # 3-D volume larger than a tile in every axis
    "3d": dict(n=1, c=2, k=3, in_spatial=(33, 18, 30), filter_spatial=(3, 3, 3), pads=(1, 1, 1)),
}


def _all_configs(problem: ConvProblem) -> list[PerfConfig]:
    return list(SOLVER.perf_config_space(CTX, problem))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_fft_every_perf_config_is_correct(case: str, direction: str) -> None:
    """Each config of the space, and the untiled one, matches the reference."""
    problem = ConvProblem.from_sizes(direction, **CASES[case])
    configs = _all_configs(problem)
    assert len(configs) >= 2  # no tiling and at least one tile length
    tiled = [c for c in configs if c["fft_len"]]
    assert tiled, "a large image must offer tiled configs"
    # the smallest tile leaves the image many tiles long
    smallest = FftPlan(problem=problem, fft_len=min(c["fft_len"] for c in tiled))
    assert max(smallest.counts) >= 3, smallest.counts
    for config in configs:
        check_solver(SOLVER, problem, perf_config=config, tolerance=TOLERANCES[problem.dtype])


def test_fft_space_lists_default_first_and_no_duplicates() -> None:
    """The default leads; every config is valid; no two give the same FFT lengths."""
    problem = ConvProblem.from_sizes("forward", **CASES["2d-large-3x3"])
    configs = _all_configs(problem)
    assert configs[0] == SOLVER.default_perf_config(CTX, problem)
    lengths = [FftPlan(problem=problem, fft_len=c["fft_len"]).lengths for c in configs]
    assert len(set(lengths)) == len(lengths)
    assert all(SOLVER.is_valid_perf_config(CTX, problem, c) for c in configs)
    assert PerfConfig(fft_len=0) in configs


def test_fft_default_rule() -> None:
    """Tiles >= 4x the dilated filter (>= 16) unless depthwise or the image fits one tile."""

    def default(**kw: object) -> int:
        p = ConvProblem.from_sizes("forward", n=1, c=2, k=2, **kw)  # type: ignore[arg-type]
        return SOLVER.default_perf_config(CTX, p)["fft_len"]

    assert default(in_spatial=(8, 8), filter_spatial=(3, 3), pads=(1, 1)) == 0  # fits
    assert default(in_spatial=(56, 56), filter_spatial=(3, 3), pads=(1, 1)) == 16
    assert default(in_spatial=(200, 200), filter_spatial=(7, 7), pads=(3, 3)) == 32
    assert default(in_spatial=(99, 99), filter_spatial=(11, 11), pads=(5, 5)) == 48
    dilated = default(in_spatial=(99, 99), filter_spatial=(3, 3), dilations=(4, 4))
    assert dilated == 48  # the dilated extent (9) decides
    grouped = ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, groups=2, in_spatial=(56, 56), filter_spatial=(7, 7)
    )
    assert SOLVER.default_perf_config(CTX, grouped)["fft_len"] == 32
    dw = ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, groups=4, in_spatial=(99, 99), filter_spatial=(7, 7)
    )
    assert SOLVER.default_perf_config(CTX, dw)["fft_len"] == 0


@pytest.mark.parametrize(
    "config",
    [
        PerfConfig(fft_len=17),  # not a listed length
        PerfConfig(fft_len=-1),
        PerfConfig(fft_len="32"),
        PerfConfig(tile=32),
        PerfConfig(fft_len=32, extra=1),
        PerfConfig(fft_len=16),  # shorter than the 21-tap dilated filter: no output per tile
    ],
)
def test_fft_invalid_perf_config_is_rejected_by_name(config: PerfConfig) -> None:
    """A bad config is refused with an error naming perf_config, never run."""
    problem = ConvProblem.from_sizes(
        "forward",
        n=1,
        c=1,
        k=1,
        in_spatial=(40, 40),
        filter_spatial=(11, 11),
        pads=(5, 5),
        dilations=(2, 2),
    )
    assert not SOLVER.is_valid_perf_config(CTX, problem, config)
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        SOLVER.get_solution(CTX, problem, config)
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        SOLVER.workspace_size(CTX, problem, config)
