"""The property tests' error measure (miocore.testing.strategies): relative to the result,
but never to less than the terms' magnitude where a short random sum cancels."""

from __future__ import annotations

import math

import numpy as np

from miocore import ConvProblem, reference
from miocore.testing.strategies import cancellation_floor, strict_relative_error


def _expected(problem: ConvProblem, inputs: dict[str, np.ndarray]) -> np.ndarray:
    out = problem.direction.output_tensor
    return reference.convolution(problem, **{k: v for k, v in inputs.items() if k != out})


def test_a_cancelling_two_tap_sum_is_judged_against_its_terms() -> None:
    # Found by the Winograd property test: one output of two taps, 0.0075 from terms near 0.5.
    # An fp32 sum of such terms may err by eps x 1.0 / 0.0075 (~8e-6) relative to the result;
    # winograd.rxs, whose transforms form values of the terms' size, erred by 6.5e-6.
    problem = ConvProblem.from_key("1-2-1-2x4-1-1-1-1-0x2-2x2-1x1-0-NCHW-FP32-F")
    inputs = reference.random_inputs(problem, 205)
    expected = _expected(problem, inputs)
    floor = cancellation_floor(problem, inputs)
    assert floor > 10 * float(np.max(np.abs(expected)))
    off_by_terms = expected + 6.5e-6 * float(np.max(np.abs(expected)))
    assert strict_relative_error(off_by_terms, expected) > 2e-6
    assert strict_relative_error(off_by_terms, expected, floor) < 2e-6


def test_sums_that_do_not_cancel_keep_the_result_as_the_measure() -> None:
    problem = ConvProblem.from_sizes(
        "forward", n=2, c=16, k=8, in_spatial=(8, 8), filter_spatial=(3, 3), pads=(1, 1)
    )
    inputs = reference.random_inputs(problem, 0)
    expected = _expected(problem, inputs)
    assert cancellation_floor(problem, inputs) < float(np.max(np.abs(expected)))


def test_an_all_zero_reference_still_takes_no_noise() -> None:
    zeros = np.zeros((1, 1, 2, 2))
    assert strict_relative_error(zeros + 1e-9, zeros, 1.0) == math.inf
    assert strict_relative_error(zeros, zeros, 1.0) == 0.0
