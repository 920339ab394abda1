"""Descriptors: validation names the field, strides follow the layout, shapes are inferred."""

from __future__ import annotations

import pytest

import miocore
from miocore import ConvolutionDescriptor, InvalidDescriptorError, MiocoreError, TensorDescriptor


def test_packed_strides_follow_layout() -> None:
    assert TensorDescriptor("float32", (2, 3, 4, 5)).strides == (60, 20, 5, 1)
    nhwc = TensorDescriptor("float16", (2, 3, 4, 5), layout="NHWC")
    assert nhwc.strides == (60, 1, 15, 3)
    ndhwc = TensorDescriptor("bfloat16", (2, 3, 4, 5, 6), layout="ndhwc")
    assert ndhwc.layout == "NDHWC" and ndhwc.strides == (360, 1, 90, 18, 3)


def test_layout_is_derived_from_explicit_strides() -> None:
    padded = TensorDescriptor("float32", (1, 3, 4, 4), strides=(100, 20, 5, 1))
    assert (
        padded.layout == "NCHW" and not padded.is_packed and padded.element_space == 1 + 40 + 15 + 3
    )
    channels_last = TensorDescriptor("float32", (2, 3, 4, 4), strides=(48, 1, 12, 3))
    assert channels_last.layout == "NHWC" and channels_last.is_packed


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dtype": "int8", "lengths": (1, 2, 3, 4)}, "dtype"),
        ({"dtype": "float32", "lengths": (1, 2, 3)}, "lengths"),
        ({"dtype": "float32", "lengths": (1, 0, 3, 4)}, "lengths"),
        ({"dtype": "float32", "lengths": (1, 2, 3.5, 4)}, "lengths"),
        ({"dtype": "float32", "lengths": (1, 2, 3, 4), "layout": "NCDHW"}, "layout"),
        ({"dtype": "float32", "lengths": (1, 2, 3, 4), "strides": (1, 2, 3)}, "strides"),
        ({"dtype": "float32", "lengths": (2, 2, 3, 4), "strides": (1, 2, 3, 4)}, "strides"),
        (
            {
                "dtype": "float32",
                "lengths": (1, 2, 3, 4),
                "layout": "NHWC",
                "strides": (24, 12, 4, 1),
            },
            "layout",
        ),
    ],
)
def test_bad_tensor_descriptor_names_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidDescriptorError) as info:
        TensorDescriptor(**kwargs)
    assert info.value.field == field
    assert field in str(info.value)
    assert isinstance(info.value, miocore.MiocoreError)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"pads": (-1, 0)}, "pads"),
        ({"strides": (0, 1)}, "strides"),
        ({"dilations": (1, 0)}, "dilations"),
        ({"groups": 0}, "groups"),
        ({"mode": "deconv"}, "mode"),
        ({"pads": (1, 1), "strides": (1, 1, 1)}, "pads/strides/dilations"),
        ({"pads": (0,)}, "pads"),
        ({"output_pads": (1, 1)}, "output_pads"),
        ({"mode": "transpose", "strides": (2, 2), "output_pads": (2, 0)}, "output_pads"),
    ],
)
def test_bad_convolution_descriptor_names_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidDescriptorError) as info:
        ConvolutionDescriptor(**kwargs)
    assert info.value.field == field


def test_output_descriptor_2d_3d_and_transpose() -> None:
    x = TensorDescriptor("float32", (8, 64, 56, 56), layout="NHWC")
    w = TensorDescriptor("float32", (128, 64, 3, 3))
    y = ConvolutionDescriptor(pads=(1, 1), strides=(2, 2)).output_descriptor(x, w)
    assert y.lengths == (8, 128, 28, 28) and y.layout == "NHWC"
    x3 = TensorDescriptor("float16", (1, 8, 9, 10, 11), layout="NCDHW")
    w3 = TensorDescriptor("float16", (4, 4, 3, 3, 3))
    conv3 = ConvolutionDescriptor(pads=(1, 0, 2), strides=(1, 2, 1), dilations=(2, 1, 1), groups=2)
    assert conv3.output_descriptor(x3, w3).lengths == (1, 4, 7, 4, 13)
    wt = TensorDescriptor("float32", (64, 16, 4, 4))  # (C_in, C_out/groups, Y, X)
    trans = ConvolutionDescriptor(pads=(1, 1), strides=(2, 2), mode="transpose", groups=2)
    assert trans.output_descriptor(TensorDescriptor("float32", (2, 64, 7, 7)), wt).lengths == (
        2,
        32,
        14,
        14,
    )


def test_output_descriptor_rejects_empty_output() -> None:
    x = TensorDescriptor("float32", (1, 3, 2, 2))
    w = TensorDescriptor("float32", (4, 3, 5, 5))
    with pytest.raises(InvalidDescriptorError, match="spatial size"):
        ConvolutionDescriptor().output_descriptor(x, w)


def test_descriptors_are_frozen_values() -> None:
    a = TensorDescriptor("float32", (1, 2, 3, 4))
    assert a == TensorDescriptor("fp32", [1, 2, 3, 4]) and hash(a) == hash(
        TensorDescriptor("float32", (1, 2, 3, 4))
    )
    with pytest.raises(AttributeError):
        a.layout = "NHWC"  # type: ignore[misc]


# -- output_descriptor refuses inconsistent channels and groups (issue 16.5, 17.6) -------------


def test_output_descriptor_refuses_x_channels_that_w_does_not_expect() -> None:
    x = TensorDescriptor("float32", (2, 4, 8, 8))
    w = TensorDescriptor("float32", (6, 3, 3, 3))
    with pytest.raises(MiocoreError, match=r"x has 4 channels.*expects 3") as info:
        ConvolutionDescriptor(pads=(1, 1)).output_descriptor(x, w)
    assert info.value.field == "x.lengths" and info.value.value == (2, 4, 8, 8)
    assert "logical order" not in str(info.value)  # no hint where nothing suggests one


def test_output_descriptor_refuses_groups_that_do_not_divide_the_channels() -> None:
    x = TensorDescriptor("float32", (2, 4, 8, 8))
    w = TensorDescriptor("float32", (6, 1, 3, 3))
    with pytest.raises(MiocoreError, match="do not split into groups=3") as info:
        ConvolutionDescriptor(groups=3).output_descriptor(x, w)
    assert info.value.field == "groups" and info.value.value == 3
    # Output channels that do not split are refused as well.
    with pytest.raises(MiocoreError, match="output channels") as info:
        ConvolutionDescriptor(groups=2).output_descriptor(
            x, TensorDescriptor("float32", (5, 2, 3, 3))
        )
    assert info.value.field == "w.lengths"


def test_channel_mismatch_from_nhwc_ordered_lengths_gets_a_layout_hint() -> None:
    # (N, H, W, C) given where logical (N, C, H, W) is meant: 12 "channels", w expects 3.
    x = TensorDescriptor("float32", (1, 12, 12, 3), layout="NHWC")
    w = TensorDescriptor("float32", (8, 3, 3, 3), layout="NHWC")
    with pytest.raises(MiocoreError, match=r"logical order \(N, C, H, W\).*NHWC"):
        ConvolutionDescriptor().output_descriptor(x, w)
    good = TensorDescriptor("float32", (1, 3, 12, 12), layout="NHWC")
    y = ConvolutionDescriptor().output_descriptor(good, w)
    assert y.lengths == (1, 8, 10, 10) and y.layout == "NHWC"


def test_transposed_output_descriptor_checks_channels_too() -> None:
    w = TensorDescriptor("float32", (4, 6, 3, 3))  # transpose: x has w's 4 channels, y 6
    conv = ConvolutionDescriptor(mode="transpose")
    y = conv.output_descriptor(TensorDescriptor("float32", (1, 4, 5, 5)), w)
    assert y.lengths == (1, 6, 7, 7)
    with pytest.raises(MiocoreError, match="transposed") as info:
        conv.output_descriptor(TensorDescriptor("float32", (1, 6, 5, 5)), w)
    assert info.value.field == "x.lengths"
