"""Winograd (Toom-Cook) transform matrices generated from interpolation points.

``F(m, r)`` computes ``m`` outputs of a correlation with an ``r``-tap filter from
``alpha = m + r - 1`` inputs using ``alpha`` multiplications: ``y = A^T [(G g) * (B^T d)]``.
The matrices come from the Toom-Cook construction over ``alpha - 1`` finite points and the point
at infinity, in exact rational arithmetic (:class:`fractions.Fraction`):

* ``V_n`` is the ``alpha x n`` evaluation (Vandermonde) matrix of a degree ``n - 1`` polynomial at
  the points (the infinity row picks the leading coefficient).
* Linear convolution ``s = g * h`` is ``s = V_alpha^-1 [(V_r g) * (V_m h)]``; correlation is its
  transpose, hence ``A^T = V_m^T``, ``G = V_r``, ``B^T = V_alpha^-T``.
* Row ``i`` of ``B^T`` is then scaled by ``f_i = prod_{k != i} (a_i - a_k)`` (and row ``i`` of ``G``
  divided by it), which makes ``B^T`` hold the coefficients of the monic polynomial that vanishes on
  the other points: small integers for integer points (Lavin and Gray's form).

Nothing here is a typed-in table: change :data:`POINTS` and every matrix follows.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING

from miocore import InvalidArgumentError

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    import numpy as np

#: Finite interpolation points in the order they are used: small magnitudes first keeps the
#: transforms well conditioned (F(2,3): 0, +-1; F(4,3): adds +-2; F(6,3): adds +-1/2).
POINTS: tuple[Fraction, ...] = tuple(
    Fraction(v)
    for v in ("0", "1", "-1", "2", "-2", "1/2", "-1/2", "3", "-3", "1/3", "-1/3", "4", "-4")
)

Matrix = tuple[tuple[Fraction, ...], ...]


def _vandermonde(points: tuple[Fraction, ...], columns: int) -> list[list[Fraction]]:
    """Rows ``[1, a, a^2, ...]`` for each finite point, then ``[0, ..., 0, 1]`` for infinity."""
    rows = [[p**j for j in range(columns)] for p in points]
    rows.append([Fraction(0)] * (columns - 1) + [Fraction(1)])
    return rows


def _inverse(matrix: list[list[Fraction]]) -> list[list[Fraction]]:
    """Exact Gauss-Jordan inverse of a square rational matrix."""
    n = len(matrix)
    aug = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if aug[r][col] != 0)
        aug[col], aug[pivot] = aug[pivot], aug[col]
        inv = 1 / aug[col][col]
        aug[col] = [v * inv for v in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                factor = aug[r][col]
                aug[r] = [a - factor * b for a, b in zip(aug[r], aug[col], strict=True)]
    return [row[n:] for row in aug]


def _transpose(matrix: list[list[Fraction]]) -> list[list[Fraction]]:
    return [list(col) for col in zip(*matrix, strict=True)]


def _freeze(matrix: list[list[Fraction]]) -> Matrix:
    return tuple(tuple(row) for row in matrix)


#: Finite points of :mod:`miocore_winograd.fused`: 2 and -1/2 after 0 and +-1 (rather than
#: +-2) balance the transforms' growth: F(4,3)'s float32 error on random data fell 3x (3.5e-6
#: to 1.1e-6 at 64 channels, 5.1e-6 to 1.9e-6 at 256), inside find's default accuracy bound
#: (6e-6 and 1.2e-5 there), which the +-2 points' F(4,3) crossed on ResNet-50's layers.
BALANCED_POINTS: tuple[Fraction, ...] = tuple(
    Fraction(v) for v in ("0", "1", "-1", "2", "-1/2", "1/2", "-2", "3", "-1/3")
)


@functools.cache
def toom_cook(
    m: int, r: int, points: tuple[Fraction, ...] = POINTS
) -> tuple[Matrix, Matrix, Matrix]:
    """Exact ``(A^T, G, B^T)`` of ``F(m, r)``, shaped ``m x alpha``, ``alpha x r``, ``alpha^2``,
    from the first ``alpha - 1`` of ``points`` and infinity.

    ``F(m, 1)`` and ``F(1, r)`` degenerate to identities and sums (no multiplication saved); they
    are built directly so that they stay exact in floating point too.
    """
    if m < 1 or r < 1:
        raise InvalidArgumentError("tile and filter sizes must be >= 1", field="m, r", value=(m, r))
    alpha = m + r - 1
    one, zero = Fraction(1), Fraction(0)
    if r == 1:  # y_j = g_0 d_j
        eye = [[one if i == j else zero for j in range(m)] for i in range(m)]
        return _freeze(eye), _freeze([[one]] * m), _freeze(eye)
    if m == 1:  # y_0 = sum_j g_j d_j
        eye = [[one if i == j else zero for j in range(r)] for i in range(r)]
        return _freeze([[one] * r]), _freeze(eye), _freeze(eye)
    if alpha - 1 > len(points):
        raise InvalidArgumentError(
            f"F({m}, {r}) needs {alpha - 1} finite points, only {len(points)} are defined",
            field="m",
            value=m,
        )
    points = points[: alpha - 1]
    a_t = _transpose(_vandermonde(points, m))
    g = _vandermonde(points, r)
    b_t = _transpose(_inverse(_vandermonde(points, alpha)))
    for i, p in enumerate(points):
        f = Fraction(1)
        for k, q in enumerate(points):
            if k != i:
                f *= p - q
        b_t[i] = [v * f for v in b_t[i]]
        g[i] = [v / f for v in g[i]]
    return _freeze(a_t), _freeze(g), _freeze(b_t)


def to_array(matrix: Matrix) -> np.ndarray:
    """A rational matrix as float64 (converted once; the solvers cast to float32)."""
    import numpy as np

    return np.array([[float(v) for v in row] for row in matrix], dtype=np.float64)


@functools.cache
def kron_transforms(
    my: int, ry: int, mx: int, rx: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """2-D transforms as single matrices acting on a flattened tile (row-major ``(y, x)``).

    Returns float32 ``(A^T_y (x) A^T_x, G_y (x) G_x, B^T_y (x) B^T_x)``: the output transform
    ``(my*mx) x (ay*ax)``, the filter transform ``(ay*ax) x (ry*rx)`` and the input transform
    ``(ay*ax) x (ay*ax)``. Applying a Kronecker product to a flattened tile is the same as the
    separable ``A^T M A`` but turns each stage into one large BLAS GEMM.
    """
    import numpy as np

    aty, gy, bty = (to_array(t) for t in toom_cook(my, ry))
    atx, gx, btx = (to_array(t) for t in toom_cook(mx, rx))
    out = tuple(
        np.ascontiguousarray(np.kron(a, b), dtype=np.float32)
        for a, b in ((aty, atx), (gy, gx), (bty, btx))
    )
    for array in out:
        array.flags.writeable = False
    return out  # type: ignore[return-value]


@functools.cache
def axis_transforms(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read-only float32 ``(A^T, G, B^T)`` of ``F(m, r)`` for the separable (per-axis) stages."""
    import numpy as np

    out = tuple(np.ascontiguousarray(to_array(t), dtype=np.float32) for t in toom_cook(m, r))
    for array in out:
        array.flags.writeable = False
    return out  # type: ignore[return-value]
