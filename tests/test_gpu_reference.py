"""find's accuracy check on the device (``GpuBackend.device_reference``; needs a GPU): the
float64 reference slice against numpy's float64 reference of the same inputs, and the
device-side comparison against the same comparison made on the host."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import miocore
from miocore import reference
from miocore.find.verify import _reduced_selection

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def handle() -> miocore.Handle:
    pytest.importorskip("cuda.bindings")
    try:
        return miocore.Handle("cuda")
    except miocore.MiocoreError as exc:
        pytest.skip(f"no CUDA device: {exc}")


CASES = [
    # direction, dtype, layout, n, c, k, spatial, filter, pads, strides, dilations, groups
    ("forward", "float32", "NCHW", 3, 8, 12, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ("forward", "float16", "NHWC", 2, 12, 8, (10, 7), (3, 2), (2, 0), (2, 1), (1, 2), 4),
    ("forward", "bfloat16", "NCDHW", 2, 4, 6, (5, 6, 7), (3, 1, 2), (1, 0, 1), (1, 2, 1),
     (1, 1, 2), 2),
    ("backward_data", "float32", "NHWC", 2, 6, 9, (12, 9), (5, 3), (2, 1), (2, 2), (1, 1), 3),
    ("backward_data", "float16", "NCHW", 3, 16, 16, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1), 16),
    ("backward_data", "bfloat16", "NDHWC", 1, 4, 4, (4, 5, 6), (2, 2, 2), (0, 1, 1), (2, 2, 1),
     (1, 1, 1), 1),
    ("backward_weights", "float32", "NCHW", 4, 6, 10, (9, 9), (3, 3), (1, 1), (2, 2), (1, 1), 2),
    ("backward_weights", "float16", "NHWC", 3, 16, 8, (8, 10), (1, 3), (0, 1), (1, 1), (1, 2), 1),
    ("backward_weights", "bfloat16", "NCDHW", 2, 3, 5, (4, 6, 5), (2, 3, 3), (1, 1, 1),
     (1, 1, 2), (1, 1, 1), 1),
]  # fmt: skip


def _problem(case: tuple[Any, ...]) -> miocore.ConvProblem:
    direction, dtype, layout, n, c, k, spatial, filt, pads, strides, dil, groups = case
    return miocore.ConvProblem.from_sizes(
        direction,
        n=n,
        c=c,
        k=k,
        in_spatial=spatial,
        filter_spatial=filt,
        pads=pads,
        strides=strides,
        dilations=dil,
        groups=groups,
        dtype=dtype,
        layout=layout,
    )


def _numpy_slice(p: miocore.ConvProblem, host: dict[str, np.ndarray], n: int, ch: int) -> Any:
    full = reference.convolution(
        p, **{k: v for k, v in host.items() if k != p.direction.output_tensor}
    )
    if p.direction.value == "backward_weights":
        return full[:ch]
    return full[:n, :ch]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_device_reference_matches_numpy_and_compares_like_the_host(
    handle: miocore.Handle, case: tuple[Any, ...]
) -> None:
    p = _problem(case).canonical
    backend = handle.backend
    rng = np.random.default_rng(3)
    arrays = {name: backend.random(getattr(p, name), rng) for name in ("x", "w", "y")}
    host = {name: backend.to_host(a).astype(np.float64) for name, a in arrays.items()}
    n, ch = _reduced_selection(p)
    if p.direction.value != "backward_weights":
        ch = min(ch, 3) if p.groups == 1 else ch  # a strict prefix of the channels too
    dev = backend.device_reference(p, arrays, n, ch)
    expected = _numpy_slice(p, host, n, ch)
    got = dev.values()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    # The comparison: the output buffer as a candidate left it (random data: far off).
    out_name = p.direction.output_tensor
    out_host = host[out_name]
    view = out_host[:ch] if p.direction.value == "backward_weights" else out_host[:n, :ch]
    diff, scale, bad, ref_nan = dev.compare()
    assert not bad and not ref_nan
    assert diff == pytest.approx(float(np.abs(view - expected).max()), rel=1e-12)
    assert scale == pytest.approx(float(np.abs(expected).max()), rel=1e-12)
    # A right answer, rounded to the dtype: the error is the output's rounding alone.
    full = reference.convolution(p, **{k: v for k, v in host.items() if k != out_name})
    backend.copy_from_host(arrays[out_name], full)
    diff, scale, bad, _ = dev.compare()
    unit = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}[p.dtype.value]
    assert not bad and 0 <= diff / scale <= unit * 1.01
    # Poisoned with NaN (a candidate that wrote nothing): flagged.
    backend.fill(arrays[out_name], getattr(p, out_name), float("nan"))
    assert dev.compare()[2] is True


def test_device_compare_accepts_an_infinity_only_where_the_exact_value_overflows(
    handle: miocore.Handle,
) -> None:
    """fp16 backward weights over positive data: one output channel's exact values pass
    65504, so the right fp16 answer there is infinity; the device check must accept it (it
    once flagged every right kernel as a wrong answer) and still flag a wrong infinity."""
    p = miocore.ConvProblem.from_sizes(
        "backward_weights", n=2, c=3, k=2, in_spatial=(48, 48), filter_spatial=(3, 3),
        pads=(1, 1), dtype="float16",
    ).canonical  # fmt: skip
    backend = handle.backend
    rng = np.random.default_rng(5)
    x = rng.uniform(4.0, 6.0, size=p.x.lengths)
    y = rng.standard_normal(p.y.lengths)
    y[:, 0] = rng.uniform(4.0, 6.0, size=y[:, 0].shape)
    arrays = {
        "x": backend.from_host(p.x, x.astype(np.float16)),
        "y": backend.from_host(p.y, y.astype(np.float16)),
        "w": backend.from_host(p.w, np.zeros(p.w.lengths, np.float16)),
    }
    host = {n: backend.to_host(a).astype(np.float64) for n, a in arrays.items()}
    exact = reference.convolution(p, x=host["x"], y=host["y"])
    assert np.abs(exact[0]).min() > 65504 and np.abs(exact[1]).max() < 65504
    n, ch = _reduced_selection(p)
    dev = backend.device_reference(p, arrays, n, ch)
    rounded = exact.astype(np.float16)  # infinity in channel 0
    backend.copy_from_host(arrays["w"], rounded)
    diff, scale, bad, ref_nan = dev.compare()
    assert not bad and not ref_nan
    assert diff / scale <= 2.0**-11 * 1.01
    wrong = rounded.copy()
    wrong[1, 0, 0, 0] = np.inf  # an infinity where the exact value is small
    backend.copy_from_host(arrays["w"], wrong)
    assert dev.compare()[2] is True
