"""The float64 reference: checked against a plain loop and against its own adjoints."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from miocore import ConvolutionDescriptor, ConvProblem, TensorDescriptor, reference


def _loop_forward(p: ConvProblem, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Textbook definition, one output element at a time (2-D only)."""
    cg, kg = p.c // p.groups, p.k // p.groups
    (ph, pw), (sh, sw), (dh, dw) = p.conv.pads, p.conv.strides, p.conv.dilations
    out = np.zeros(p.y.lengths)
    for n, k, oh, ow in itertools.product(*map(range, p.y.lengths)):
        group = k // kg
        total = 0.0
        for c, fy, fx in itertools.product(range(cg), *map(range, p.filter_spatial)):
            ih, iw = oh * sh - ph + fy * dh, ow * sw - pw + fx * dw
            if 0 <= ih < p.in_spatial[0] and 0 <= iw < p.in_spatial[1]:
                total += x[n, group * cg + c, ih, iw] * w[k, c, fy, fx]
        out[n, k, oh, ow] = total
    return out


@pytest.mark.parametrize("groups", [1, 2])
def test_forward_matches_loop(groups: int) -> None:
    p = ConvProblem.from_sizes(
        "F",
        n=2,
        c=2 * groups,
        k=3 * groups,
        in_spatial=(7, 6),
        filter_spatial=(3, 2),
        pads=(1, 2),
        strides=(2, 1),
        dilations=(2, 1),
        groups=groups,
    )
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(p.x.lengths), rng.standard_normal(p.w.lengths)
    np.testing.assert_allclose(
        reference.convolution(p, x=x, w=w), _loop_forward(p, x, w), atol=1e-12
    )


@pytest.mark.parametrize("spatial", [(7, 8), (4, 5, 6)])
def test_backward_directions_are_adjoints_of_forward(spatial: tuple) -> None:
    rank = len(spatial)
    f = ConvProblem.from_sizes(
        "F",
        n=2,
        c=6,
        k=4,
        in_spatial=spatial,
        filter_spatial=(3,) * rank,
        pads=(1,) * rank,
        strides=(2,) * rank,
        dilations=(1,) * (rank - 1) + (2,),
        groups=2,
    )
    b = ConvProblem("B", x=f.x, w=f.w, y=f.y, conv=f.conv)
    wr = ConvProblem("W", x=f.x, w=f.w, y=f.y, conv=f.conv)
    rng = np.random.default_rng(4)
    x, w, dy = (rng.standard_normal(d.lengths) for d in (f.x, f.w, f.y))
    y = reference.convolution(f, x=x, w=w)
    dx = reference.convolution(b, w=w, y=dy)
    dw = reference.convolution(wr, x=x, y=dy)
    # <conv(x, w), dy> = <x, conv_backward_data(dy, w)> = <w, conv_backward_weights(x, dy)>
    assert np.vdot(y, dy) == pytest.approx(np.vdot(x, dx), rel=1e-12)
    assert np.vdot(y, dy) == pytest.approx(np.vdot(w, dw), rel=1e-12)


def test_transposed_forward_is_backward_data() -> None:
    x = TensorDescriptor("float32", (1, 4, 3, 3))
    w = TensorDescriptor("float32", (4, 2, 3, 3))
    conv_t = ConvolutionDescriptor(pads=(1, 1), strides=(2, 2), mode="transpose")
    y = conv_t.output_descriptor(x, w)
    rng = np.random.default_rng(5)
    xa, wa = rng.standard_normal(x.lengths), rng.standard_normal(w.lengths)
    got = reference.convolution(ConvProblem("forward", x=x, w=w, y=y, conv=conv_t), x=xa, w=wa)
    plain = ConvProblem("B", x=y, w=w, y=x, conv=ConvolutionDescriptor(pads=(1, 1), strides=(2, 2)))
    np.testing.assert_allclose(got, reference.convolution(plain, w=wa, y=xa))


def test_random_inputs_follow_descriptor_strides() -> None:
    p = ConvProblem.from_sizes(
        "F",
        n=2,
        c=3,
        k=4,
        in_spatial=(5, 5),
        filter_spatial=(3, 3),
        dtype="bfloat16",
        layout="NHWC",
    )
    arrays = reference.random_inputs(p, 0)
    x = arrays["x"]
    assert x.shape == p.x.lengths and x.dtype == p.x.dtype.numpy
    assert tuple(s // x.itemsize for s in x.strides) == p.x.strides
    assert np.abs(x.astype(np.float32)).max() > 0


def test_relative_error_and_missing_input() -> None:
    expected = np.array([1.0, -2.0])
    assert reference.relative_error(np.array([1.0, -1.0]), expected) == pytest.approx(0.5)
    p = ConvProblem.from_sizes("F", n=1, c=1, k=1, in_spatial=(3, 3), filter_spatial=(1, 1))
    with pytest.raises(Exception, match="needs w"):
        reference.convolution(p, x=np.ones(p.x.lengths))
