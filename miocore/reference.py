"""Float64 reference convolution for every direction: what verification and tests compare to.

It is written independently of the solver plugins: it walks the filter taps and, for each tap,
contracts a strided slice of the padded input with that tap's weights (no im2col matrix, no
GEMM lowering). Slow but simple enough to trust.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from miocore.errors import InvalidArgumentError
from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.dtypes import VERIFY_TOLERANCE, DataType


def _f64(array: Any, name: str, lengths: tuple[int, ...]) -> np.ndarray:
    if array is None:
        raise InvalidArgumentError(
            f"the reference needs {name} for this direction", field=name, value=None
        )
    out = np.asarray(array).astype(np.float64)
    if out.shape != lengths:
        raise InvalidArgumentError(
            f"expected shape {lengths}", field=f"{name}.shape", value=out.shape
        )
    return out


def _tap_slices(problem: ConvProblem, tap: tuple[int, ...]) -> tuple[slice, ...]:
    conv = problem.conv
    out = []
    for i, t in enumerate(tap):
        start = t * conv.dilations[i]
        stop = start + conv.strides[i] * (problem.out_spatial[i] - 1) + 1
        out.append(slice(start, stop, conv.strides[i]))
    return (slice(None), slice(None), *out)


def _at_tap(tap: tuple[int, ...]) -> tuple[Any, ...]:
    """The index of one filter tap in the trailing (spatial) axes: ``(..., *tap)``."""
    return (Ellipsis, *tap)


def convolution(problem: ConvProblem, *, x: Any = None, w: Any = None, y: Any = None) -> np.ndarray:
    """Compute the tensor that ``problem``'s direction writes, in float64, logical order.

    Pass the two tensors the direction reads (forward: x and w; backward data: w and y, where
    y holds dy; backward weights: x and y). Nothing passed in is modified.
    """
    user = problem
    p = problem.canonical
    if user.is_transposed:  # the canonical convolution runs from the layer's y to its x
        x, y = y, x
    g = p.groups
    n, c, k = p.n, p.c, p.k
    cg, kg = c // g, k // g
    pads = p.conv.pads
    taps = list(itertools.product(*(range(f) for f in p.filter_spatial)))
    padded_shape = (n, c, *(s + 2 * q for s, q in zip(p.in_spatial, pads, strict=True)))
    crop: tuple[slice, ...] = (
        slice(None),
        slice(None),
        *(slice(q, q + s) for q, s in zip(pads, p.in_spatial, strict=True)),
    )
    spatial = "".join("dhw"[-len(p.out_spatial) :])

    if p.direction is Direction.FORWARD:
        xs = _f64(x, "x", p.x.lengths)
        ws = _f64(w, "w", p.w.lengths).reshape(g, kg, cg, *p.filter_spatial)
        xp = np.zeros(padded_shape)
        xp[crop] = xs
        out = np.zeros((n, g, kg, *p.out_spatial))
        for tap in taps:
            part = xp[_tap_slices(p, tap)].reshape(n, g, cg, *p.out_spatial)
            out += np.einsum(f"ngc{spatial},gkc->ngk{spatial}", part, ws[_at_tap(tap)])
        result = out.reshape(n, k, *p.out_spatial)
    elif p.direction is Direction.BACKWARD_DATA:
        dy = _f64(y, "y", p.y.lengths).reshape(n, g, kg, *p.out_spatial)
        ws = _f64(w, "w", p.w.lengths).reshape(g, kg, cg, *p.filter_spatial)
        dxp = np.zeros(padded_shape)
        for tap in taps:
            contrib = np.einsum(f"ngk{spatial},gkc->ngc{spatial}", dy, ws[_at_tap(tap)])
            dxp[_tap_slices(p, tap)] += contrib.reshape(n, c, *p.out_spatial)
        result = dxp[crop]
    else:
        xs = _f64(x, "x", p.x.lengths)
        dy = _f64(y, "y", p.y.lengths).reshape(n, g, kg, *p.out_spatial)
        xp = np.zeros(padded_shape)
        xp[crop] = xs
        dw = np.zeros((g, kg, cg, *p.filter_spatial))
        for tap in taps:
            part = xp[_tap_slices(p, tap)].reshape(n, g, cg, *p.out_spatial)
            dw[_at_tap(tap)] = np.einsum(f"ngc{spatial},ngk{spatial}->gkc", part, dy)
        result = dw.reshape(p.w.lengths)
    return np.ascontiguousarray(result)


def relative_error(result: Any, expected: np.ndarray) -> float:
    """Largest absolute difference, divided by the largest magnitude of ``expected``."""
    got = np.asarray(result).astype(np.float64)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    diff = float(np.max(np.abs(got - expected))) if expected.size else 0.0
    return diff / scale if scale > 0 else diff


def tolerance(dtype: DataType | str) -> float:
    """The relative error (see :func:`relative_error`) verification accepts for ``dtype``."""
    return VERIFY_TOLERANCE[DataType.parse(dtype)]


def random_inputs(
    problem: ConvProblem, seed: np.random.Generator | int | None = None
) -> dict[str, np.ndarray]:
    """Random x, w and y arrays for ``problem`` with the descriptors' dtypes and strides.

    Values are uniform in [-1, 1), never all zero. Arrays are in logical order, with the memory
    order the descriptors' layouts give (an NHWC tensor is an (N, H, W, C) buffer, transposed).
    """
    gen = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return {name: random_array(getattr(problem, name), gen) for name in ("x", "w", "y")}


def random_array(desc: Any, rng: np.random.Generator) -> np.ndarray:
    """One random array matching ``desc`` (dtype, lengths, strides)."""
    from miocore.backends.cpu import empty_for

    out = empty_for(desc)
    out[...] = rng.uniform(-1.0, 1.0, size=desc.lengths).astype(desc.dtype.numpy)
    return out
