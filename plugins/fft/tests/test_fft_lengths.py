"""The plan's own FFT length rule answers what ``scipy.fft.next_fast_len`` answers."""

from __future__ import annotations

import pytest
import scipy.fft
from miocore_fft.plan import full_length, next_fast_len

LARGE = (10**9 + 7, 2**40 + 1, 3**20 + 5, 123_456_789, 7 * 11 * 13 * 17 * 19)


@pytest.mark.parametrize("real", [True, False])
def test_next_fast_len_matches_scipy(real: bool) -> None:
    for target in (*range(1, 5000), *LARGE):
        assert next_fast_len(target, real=real) == scipy.fft.next_fast_len(target, real=real)


def test_full_length_is_a_fast_length_covering_the_filter() -> None:
    assert full_length(56, 3, last=True) == 60  # 58 -> 2^2 * 3 * 5
    assert full_length(56, 3, last=False) == 60  # 58 = 2 * 29, 59 is prime
    assert full_length(7, 5, last=False) == 11  # complex transforms are fast at 11 too
    assert full_length(7, 5, last=True) == 12


def test_next_fast_len_refuses_a_non_positive_target() -> None:
    with pytest.raises(ValueError, match="positive"):
        next_fast_len(0, real=True)
