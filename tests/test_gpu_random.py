"""Find's test data made on the device (``GpuBackend.random``; needs a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

import miocore

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def handle() -> miocore.Handle:
    pytest.importorskip("cuda.bindings")
    try:
        return miocore.Handle("cuda")
    except miocore.MiocoreError as exc:
        pytest.skip(f"no CUDA device: {exc}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_random_tensors_are_uniform_everywhere_and_follow_the_seed(
    handle: miocore.Handle, dtype: str, layout: str
) -> None:
    desc = miocore.TensorDescriptor(dtype, (3, 5, 7, 9), layout=layout)
    backend = handle.backend
    a = backend.random(desc, np.random.default_rng(1)).to_host().astype(np.float64)
    b = backend.random(desc, np.random.default_rng(1)).to_host().astype(np.float64)
    c = backend.random(desc, np.random.default_rng(2)).to_host().astype(np.float64)
    assert a.shape == desc.lengths and np.array_equal(a, b)  # the seed decides
    assert not np.array_equal(a, c)
    assert np.all(np.isfinite(a)) and a.min() >= -1.0 and a.max() <= 1.0
    assert abs(a.mean()) < 0.2 and 0.25 < a.var() < 0.42  # uniform on [-1, 1): var 1/3
    assert np.count_nonzero(a == 0.0) < a.size // 100
