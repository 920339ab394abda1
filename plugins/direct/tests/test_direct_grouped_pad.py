"""The NHWC staging copy of ``direct.grouped``'s vector path
(:func:`miocore_direct.grouped_arrange.pad`): small inputs on the calling thread
(``nhwc_into_padded_serial``), larger ones in parallel (``nhwc_into_padded``); both place the
caller's packed float32 NHWC tensor inside the zeroed, pitched buffer exactly, on random
non-zero data, and the solver's results do not depend on which one ran."""

from __future__ import annotations

import numpy as np
import pytest
from miocore_direct import GroupedDirectSolver, grouped_arrange
from miocore_direct.grouped_vector import VectorPlan

from miocore import ConvProblem
from miocore.testing import check_solver

TOL_F32 = 3e-6


def _expected(x_nhwc: np.ndarray, shape: tuple[int, ...], top: int, left: int) -> np.ndarray:
    """The padded buffer as numpy builds it: zeros, the image at (top, left)."""
    out = np.zeros(shape, np.float32)
    _, h, w, c = x_nhwc.shape
    out[:, top : top + h, left : left + w, :c] = x_nhwc
    return out


@pytest.mark.parametrize("serial_bytes", [0, 1 << 30])  # parallel copy, copy on one thread
@pytest.mark.parametrize(("n", "h", "w", "c"), [(1, 5, 7, 16), (3, 4, 9, 48)])
def test_pad_places_an_nhwc_input_exactly(
    serial_bytes: int, n: int, h: int, w: int, c: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grouped_arrange, "SERIAL_PAD_BYTES", serial_bytes)
    rng = np.random.default_rng(n * 100 + c)
    x_nhwc = rng.standard_normal((n, h, w, c)).astype(np.float32) + 0.5
    x = x_nhwc.transpose(0, 3, 1, 2)  # the caller's logical (N, C, H, W) view
    top, left, pitch = 2, 1, c + 16
    shape = (n, h + 3, w + 2, pitch)
    dst = np.full(shape, np.nan, np.float32)  # every float must be written
    grouped_arrange.pad(x, dst, (top, left, 0))
    np.testing.assert_array_equal(dst, _expected(x_nhwc, shape, top, left))


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
@pytest.mark.parametrize("serial_bytes", [0, 1 << 30])
def test_solver_results_do_not_depend_on_the_copy(
    direction: str, serial_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grouped_arrange, "SERIAL_PAD_BYTES", serial_bytes)
    p = ConvProblem.from_sizes(
        direction,
        n=2,
        c=64,
        k=64,
        in_spatial=(6, 9),
        filter_spatial=(3, 3),
        pads=(1, 1),
        groups=4,
        layout="NHWC",
    )
    plan = VectorPlan(p)
    assert plan.fused is None and plan.table is None  # the staged passes that call pad
    check_solver(GroupedDirectSolver(), p, seed=7, tolerance=TOL_F32)
