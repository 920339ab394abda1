"""The generated Toom-Cook matrices: exact in rational arithmetic, and their float error per
dtype and tile size measured against the float64 reference."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest
from miocore_winograd import WinogradRxS, kron_transforms, toom_cook

from miocore import ConvProblem, InvalidArgumentError, PerfConfig
from miocore.testing import check_solver

#: (m, r) pairs the solver uses: forward F(m, r) for r = 1, 2, 3 (pieces and stride phases) and
#: backward-weights F(r, m) with the roles swapped.
PAIRS = [(m, r) for m in (2, 4, 6) for r in (1, 2, 3)] + [(3, m) for m in (2, 4, 6)] + [(1, 3)]


def _mat_vec(mat, vec):
    return [sum((a * b for a, b in zip(row, vec, strict=True)), Fraction(0)) for row in mat]


def _rand_fracs(rng: random.Random, count: int) -> list[Fraction]:
    return [Fraction(rng.randint(-50, 50), rng.randint(1, 9)) for _ in range(count)]


@pytest.mark.parametrize(("m", "r"), PAIRS)
def test_1d_correlation_is_exact(m: int, r: int) -> None:
    a_t, g_mat, b_t = toom_cook(m, r)
    alpha = m + r - 1
    assert (len(a_t), len(a_t[0]), len(g_mat), len(g_mat[0]), len(b_t)) == (
        m,
        alpha,
        alpha,
        r,
        alpha,
    )
    rng = random.Random(m * 10 + r)
    for _ in range(5):
        g, d = _rand_fracs(rng, r), _rand_fracs(rng, alpha)
        prod = [u * v for u, v in zip(_mat_vec(g_mat, g), _mat_vec(b_t, d), strict=True)]
        got = _mat_vec(a_t, prod)
        want = [sum(g[k] * d[j + k] for k in range(r)) for j in range(m)]
        assert got == want


@pytest.mark.parametrize(("m", "r"), [(2, 3), (4, 3), (6, 3), (4, 2), (3, 4)])
def test_2d_correlation_is_exact(m: int, r: int) -> None:
    a_t, g_mat, b_t = toom_cook(m, r)
    alpha = m + r - 1
    rng = random.Random(7 * m + r)
    g = [_rand_fracs(rng, r) for _ in range(r)]
    d = [_rand_fracs(rng, alpha) for _ in range(alpha)]

    def mm(a, b):
        return [
            [sum((a[i][k] * b[k][j] for k in range(len(b))), Fraction(0)) for j in range(len(b[0]))]
            for i in range(len(a))
        ]

    def t(a):
        return [list(c) for c in zip(*a, strict=True)]

    u = mm(mm(g_mat, g), t(g_mat))
    v = mm(mm(b_t, d), t(b_t))
    had = [[u[i][j] * v[i][j] for j in range(alpha)] for i in range(alpha)]
    got = mm(mm(a_t, had), t(a_t))
    want = [
        [sum(g[p][q] * d[i + p][j + q] for p in range(r) for q in range(r)) for j in range(m)]
        for i in range(m)
    ]
    assert got == want


def test_matches_published_f4x3_input_transform() -> None:
    # Lavin & Gray (2016), F(4x4, 3x3): the first row of B^T is the monic polynomial vanishing on
    # +-1, +-2, i.e. x^4 - 5x^2 + 4 -> (4, 0, -5, 0, 1, 0); G's first row is 1/4 (= 1/f_0).
    _, g_mat, b_t = toom_cook(4, 3)
    assert b_t[0] == tuple(Fraction(v) for v in (4, 0, -5, 0, 1, 0))
    assert g_mat[0] == (Fraction(1, 4), 0, 0)
    assert g_mat[-1] == (0, 0, 1)  # the point at infinity picks the last tap


def test_kron_forms_are_float32_products() -> None:
    a_t, g_mat, b_t = kron_transforms(4, 3, 2, 3)
    assert a_t.shape == (4 * 2, 6 * 4) and g_mat.shape == (6 * 4, 9) and b_t.shape == (24, 24)
    assert a_t.dtype == np.float32 and not a_t.flags.writeable


def test_bad_sizes_raise() -> None:
    with pytest.raises(InvalidArgumentError, match="m, r"):
        toom_cook(0, 3)
    with pytest.raises(InvalidArgumentError, match="finite points"):
        toom_cook(20, 3)


#: Relative error bounds (max abs error / max abs reference) of the Winograd solver per dtype and
#: output tile. fp32 error grows with the tile (larger transform entries: F(6,3) uses +-2,
#: +-1/2); fp16/bf16 are computed in float32 and rounded once at the end, so their rounding
#: (2^-11, 2^-8) dominates whatever the tile.
ERROR_BOUNDS = {
    "float32": {2: 1e-6, 4: 2e-5, 6: 6e-5},
    "float16": {2: 2e-3, 4: 2e-3, 6: 2e-3},
    "bfloat16": {2: 1.6e-2, 4: 1.6e-2, 6: 1.6e-2},
}


@pytest.mark.parametrize("dtype", sorted(ERROR_BOUNDS))
def test_numerical_error_per_dtype_and_tile(dtype: str) -> None:
    solver = WinogradRxS()
    errors = {}
    for tile, bound in ERROR_BOUNDS[dtype].items():
        p = ConvProblem.from_sizes(
            "forward",
            n=2,
            c=32,
            k=16,
            in_spatial=(24, 24),
            filter_spatial=(3, 3),
            pads=(1, 1),
            dtype=dtype,
        )
        errors[tile] = check_solver(
            solver, p, seed=tile, perf_config=PerfConfig(tile=tile, block=512), tolerance=bound
        )
    if dtype == "float32":  # bigger tiles lose precision (and fp32 shows it)
        assert errors[2] < errors[4] < errors[6]
