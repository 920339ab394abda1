"""Layer shapes of the networks the benchmarks use (ImageNet input, 224x224)."""

from __future__ import annotations

from typing import NamedTuple

import miocore


class Layer(NamedTuple):
    """One convolution layer: channels, input size, filter, stride, padding (square)."""

    name: str
    c: int
    k: int
    hw: int
    f: int
    stride: int = 1
    pad: int = 0
    groups: int = 1


#: ResNet-50 (v1.5: the stride sits on the 3x3 convolution), every distinct layer once.
RESNET50 = [
    Layer("conv1", 3, 64, 224, 7, 2, 3),
    Layer("l1.1x1a", 64, 64, 56, 1),
    Layer("l1.3x3", 64, 64, 56, 3, 1, 1),
    Layer("l1.1x1b", 64, 256, 56, 1),
    Layer("l1.1x1c", 256, 64, 56, 1),
    Layer("l2.1x1a", 256, 128, 56, 1),
    Layer("l2.3x3s2", 128, 128, 56, 3, 2, 1),
    Layer("l2.1x1b", 128, 512, 28, 1),
    Layer("l2.down", 256, 512, 56, 1, 2),
    Layer("l2.1x1c", 512, 128, 28, 1),
    Layer("l2.3x3", 128, 128, 28, 3, 1, 1),
    Layer("l3.1x1a", 512, 256, 28, 1),
    Layer("l3.3x3s2", 256, 256, 28, 3, 2, 1),
    Layer("l3.1x1b", 256, 1024, 14, 1),
    Layer("l3.down", 512, 1024, 28, 1, 2),
    Layer("l3.1x1c", 1024, 256, 14, 1),
    Layer("l3.3x3", 256, 256, 14, 3, 1, 1),
    Layer("l4.1x1a", 1024, 512, 14, 1),
    Layer("l4.3x3s2", 512, 512, 14, 3, 2, 1),
    Layer("l4.1x1b", 512, 2048, 7, 1),
    Layer("l4.down", 1024, 2048, 14, 1, 2),
    Layer("l4.1x1c", 2048, 512, 7, 1),
    Layer("l4.3x3", 512, 512, 7, 3, 1, 1),
]

#: VGG-16's 3x3 layers, every distinct shape once.
VGG16 = [
    Layer("conv1_1", 3, 64, 224, 3, 1, 1),
    Layer("conv1_2", 64, 64, 224, 3, 1, 1),
    Layer("conv2_1", 64, 128, 112, 3, 1, 1),
    Layer("conv2_2", 128, 128, 112, 3, 1, 1),
    Layer("conv3_1", 128, 256, 56, 3, 1, 1),
    Layer("conv3_2", 256, 256, 56, 3, 1, 1),
    Layer("conv4_1", 256, 512, 28, 3, 1, 1),
    Layer("conv4_2", 512, 512, 28, 3, 1, 1),
    Layer("conv5_1", 512, 512, 14, 3, 1, 1),
]

SUITES = {"resnet50": RESNET50, "vgg16": VGG16}


def problem(
    layer: Layer,
    batch: int,
    direction: str = "forward",
    dtype: str = "float32",
    layout: str = "NCHW",
) -> miocore.ConvProblem:
    """The miocore problem of one layer at ``batch``."""
    return miocore.ConvProblem.from_sizes(
        direction,
        n=batch,
        c=layer.c,
        k=layer.k,
        in_spatial=(layer.hw, layer.hw),
        filter_spatial=(layer.f, layer.f),
        pads=(layer.pad, layer.pad),
        strides=(layer.stride, layer.stride),
        groups=layer.groups,
        dtype=dtype,
        layout=layout,
    )
