"""``ConvProblem.from_tensors``: a problem read off numpy arrays and torch tensors (shape, dtype,
layout from the strides), equal to the one ``from_sizes`` builds, and clear errors."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from miocore import ConvProblem, InvalidProblemError, MiocoreError


def _nhwc(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A channels-last numpy buffer passed in logical order, as the design guide says."""
    n, c, *spatial = shape
    buffer = np.zeros((n, *spatial, c), dtype)
    return buffer.transpose(0, len(shape) - 1, *range(1, len(shape) - 1))


def test_numpy_nchw_matches_from_sizes() -> None:
    x = np.zeros((2, 3, 12, 11), np.float32)
    w = np.zeros((8, 3, 3, 3), np.float32)
    p = ConvProblem.from_tensors(x, w, stride=2, padding=1, dilation=(1, 2))
    assert p == ConvProblem.from_sizes(
        "forward",
        n=2,
        c=3,
        k=8,
        in_spatial=(12, 11),
        filter_spatial=(3, 3),
        pads=(1, 1),
        strides=(2, 2),
        dilations=(1, 2),
    )
    assert p.key == "3-12-11-3x3-8-6-5-2-1x1-2x2-1x2-0-NCHW-FP32-F"


@pytest.mark.parametrize(
    ("dtype", "token"),
    [(np.float32, "FP32"), (np.float16, "FP16"), (ml_dtypes.bfloat16, "BF16")],
)
def test_numpy_channels_last_views_give_nhwc(dtype: Any, token: str) -> None:
    x, w = _nhwc((2, 4, 9, 9), dtype), _nhwc((6, 4, 3, 3), dtype)
    p = ConvProblem.from_tensors(x, w, padding=1, direction="backward_weights")
    assert p.key == f"6-9-9-3x3-4-9-9-2-1x1-1x1-1x1-0-NHWC-NHWC-NHWC-{token}-W"
    assert (p.x.layout, p.w.layout, p.y.layout) == ("NHWC", "NHWC", "NHWC")
    assert p.x.is_packed and p.y.lengths == (2, 6, 9, 9)


def test_three_d_and_groups() -> None:
    x = _nhwc((1, 8, 4, 6, 6))
    w = _nhwc((4, 2, 3, 3, 3))
    p = ConvProblem.from_tensors(x, w, groups=4, padding=(0, 1, 1))
    assert p.key == "8-4-6-6-3x3x3-4-2-6-6-1-0x1x1-1x1x1-1x1x1-0-NDHWC-NDHWC-NDHWC-FP32-F_g4"


def test_a_filter_packed_in_both_layouts_follows_x() -> None:
    # A 1x1 filter (K, C, 1, 1) is packed in NCHW and NHWC alike: it takes x's layout.
    p = ConvProblem.from_tensors(_nhwc((1, 4, 5, 5)), np.zeros((8, 4, 1, 1), np.float32))
    assert (p.x.layout, p.w.layout, p.y.layout) == ("NHWC", "NHWC", "NHWC")
    # And an x of one pixel follows a channels-last filter.
    p = ConvProblem.from_tensors(np.zeros((1, 4, 1, 1), np.float32), _nhwc((8, 4, 3, 3)), padding=1)
    assert p.key.endswith("-NHWC-FP32-F")


def test_arrays_in_different_layouts_keep_their_own() -> None:
    p = ConvProblem.from_tensors(_nhwc((1, 4, 5, 5)), np.zeros((8, 4, 3, 3), np.float32))
    assert p.key.endswith("-NHWC-NCHW-NHWC-FP32-F")


def test_a_strided_view_keeps_its_strides() -> None:
    base = np.zeros((2, 6, 8, 8), np.float32)
    p = ConvProblem.from_tensors(base[:, :3], np.zeros((4, 3, 3, 3), np.float32))
    assert p.x.strides == (384, 64, 8, 1) and not p.x.is_packed and p.x.layout == "NCHW"
    assert p.y.is_packed


def test_y_is_checked_and_lends_its_layout() -> None:
    x, w = np.zeros((2, 3, 8, 8), np.float32), np.zeros((4, 3, 3, 3), np.float32)
    p = ConvProblem.from_tensors(x, w, y=np.zeros((2, 4, 6, 6), np.float32), direction="B")
    assert p.key == "4-6-6-3x3-3-8-8-2-0x0-1x1-1x1-0-NCHW-FP32-B"
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem.from_tensors(x, w, y=np.zeros((2, 4, 8, 8), np.float32))
    assert info.value.field == "y.lengths" and "(6, 6)" in str(info.value)


def test_layout_given_must_be_followed() -> None:
    x, w = _nhwc((1, 4, 5, 5)), _nhwc((8, 4, 3, 3))
    assert ConvProblem.from_tensors(x, w, layout="nhwc").key.endswith("-NHWC-FP32-F")
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem.from_tensors(x, w, layout="NCHW")
    assert info.value.field == "x.strides" and "follow layout NHWC" in str(info.value)
    with pytest.raises(InvalidProblemError) as info:
        ConvProblem.from_tensors(x, w, layout="NDHWC")
    assert info.value.field == "layout" and info.value.value == "NDHWC"


class _DeviceArray:
    """Stands for a GPU array: shape, dtype and byte strides, no host memory (CuPy-like), or
    no strides at all (always packed row-major, JAX-like)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, strides: Any) -> None:
        self.shape, self.dtype, self.strides = shape, np.dtype(dtype), strides


def test_any_array_with_shape_dtype_and_strides() -> None:
    x = _DeviceArray((2, 3, 8, 8), np.float16, (384, 2, 48, 6))  # NHWC, byte strides
    w = _DeviceArray((4, 3, 3, 3), np.float16, None)  # packed row-major: NCHW
    p = ConvProblem.from_tensors(x, w)
    assert p.key.endswith("-NHWC-NCHW-NHWC-FP16-F")


@pytest.mark.parametrize(
    ("x", "w", "kwargs", "field", "words"),
    [
        ([[1.0]], np.zeros((4, 3, 3, 3), np.float32), {}, "x", "expected an array"),
        (
            np.zeros((2, 3, 8), np.float32),
            np.zeros((4, 3, 3), np.float32),
            {},
            "x.shape",
            "4-D (N, C, H, W)",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32),
            np.zeros((4, 3, 3, 3, 3), np.float32),
            {},
            "w.shape",
            "x is 4-D but w is 5-D",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float64),
            np.zeros((4, 3, 3, 3), np.float64),
            {},
            "x.dtype",
            "unsupported data type",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32),
            np.zeros((4, 3, 3, 3), np.float16),
            {},
            "w.dtype",
            "x is float32 but w is float16",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32)[:, :, ::-1],
            np.zeros((4, 3, 3, 3), np.float32),
            {},
            "x.strides",
            "negative or zero strides",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32).transpose(0, 1, 3, 2),
            np.zeros((4, 3, 3, 3), np.float32),
            {},
            "x.strides",
            "follow none of the layouts",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32),
            np.zeros((4, 3, 3, 3), np.float32),
            {"stride": 0},
            "stride",
            "integer >= 1",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32),
            np.zeros((4, 3, 3, 3), np.float32),
            {"padding": (1, 1, 1)},
            "padding",
            "2 of them",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32),
            np.zeros((4, 3, 3, 3), np.float32),
            {"dilation": "same"},
            "dilation",
            "one per spatial dimension",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32),
            np.zeros((4, 3, 3, 3), np.float32),
            {"groups": 2},
            "groups",
            "do not split into groups=2",
        ),
        (
            np.zeros((2, 3, 8, 8), np.float32),
            np.zeros((4, 3, 3, 3), np.float32),
            {"direction": "sideways"},
            "direction",
            "expected one of",
        ),
    ],
)
def test_bad_inputs_name_the_field(
    x: Any, w: Any, kwargs: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(MiocoreError) as info:
        ConvProblem.from_tensors(x, w, **kwargs)
    assert info.value.field == field
    assert words in str(info.value) and str(info.value).startswith(f"{field}=")


def test_memory_ordered_shape_gets_the_logical_order_hint() -> None:
    # An NHWC buffer passed as (N, H, W, C) instead of its (N, C, H, W) view.
    x = np.zeros((1, 12, 12, 3), np.float32)
    with pytest.raises(MiocoreError) as info:
        ConvProblem.from_tensors(x, np.zeros((8, 3, 3, 3), np.float32))
    assert "x has 12 channels" in str(info.value) and "logical order" in str(info.value)


# -- torch tensors (CPU, channels_last, bfloat16; meta tensors stand for GPU ones) --------


def test_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 8, 10, 10).to(torch.bfloat16, memory_format=torch.channels_last)
    w = torch.randn(16, 8, 3, 3).to(torch.bfloat16, memory_format=torch.channels_last)
    p = ConvProblem.from_tensors(x, w, padding=1, stride=(2, 2))
    assert p.key == "8-10-10-3x3-16-5-5-2-1x1-2x2-1x1-0-NHWC-NHWC-NHWC-BF16-F"
    contiguous = ConvProblem.from_tensors(torch.randn(2, 8, 10, 10), torch.randn(16, 8, 3, 3))
    assert contiguous.key.endswith("-NCHW-FP32-F")
    # 3-D channels_last_3d, half precision, and a weight that requires grad.
    x3 = torch.randn(1, 4, 3, 6, 6, dtype=torch.half).to(memory_format=torch.channels_last_3d)
    w3 = torch.randn(4, 4, 1, 1, 1, dtype=torch.half, requires_grad=True)
    assert ConvProblem.from_tensors(x3, w3).key.endswith("-NDHWC-FP16-F")


def test_torch_tensors_without_memory_like_gpu_ones() -> None:
    # Only shape, dtype and strides are read: a meta tensor (no storage, as a GPU tensor has
    # no host storage) builds the same problem as a CPU one.
    torch = pytest.importorskip("torch")
    x = torch.empty(2, 8, 10, 10, device="meta").to(memory_format=torch.channels_last)
    w = torch.empty(16, 8, 3, 3, device="meta").to(memory_format=torch.channels_last)
    cpu_x = torch.empty(2, 8, 10, 10).to(memory_format=torch.channels_last)
    cpu_w = torch.empty(16, 8, 3, 3).to(memory_format=torch.channels_last)
    assert ConvProblem.from_tensors(x, w) == ConvProblem.from_tensors(cpu_x, cpu_w)


def test_torch_errors_name_the_field() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(MiocoreError) as info:
        ConvProblem.from_tensors(torch.zeros(1, 3, 8, 8, dtype=torch.int8), torch.zeros(4, 3, 1, 1))
    assert info.value.field == "x.dtype" and "torch.int8" in str(info.value)
    with pytest.raises(MiocoreError) as info:
        ConvProblem.from_tensors(torch.zeros(1, 3, 8, 8), torch.zeros(4, 3, 3, 3), layout="NHWC")
    assert info.value.field == "x.strides"
