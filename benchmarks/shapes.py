"""Layer shapes of the networks the benchmarks use (ImageNet input 224x224; the 3-D U-Net on a
64x64x64 crop)."""

from __future__ import annotations

from typing import NamedTuple

import miocore


class Layer(NamedTuple):
    """One convolution layer: channels, input size, filter, stride, padding (square or cubic,
    ``dims`` spatial dimensions)."""

    name: str
    c: int
    k: int
    hw: int
    f: int
    stride: int = 1
    pad: int = 0
    groups: int = 1
    dims: int = 2


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


def _mobilenet_v2() -> list[Layer]:
    """MobileNetV2 (width 1.0): every distinct depthwise 3x3 and pointwise 1x1 layer once."""
    # (expansion t, output channels c, repeats n, first stride s), as in the paper's table 2.
    blocks = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1)]
    blocks += [(6, 160, 3, 2), (6, 320, 1, 1)]
    layers: dict[tuple, Layer] = {}

    def add(layer: Layer) -> None:
        layers.setdefault(layer[1:], layer)

    c_in, hw = 32, 112
    for t, c_out, repeats, first_stride in blocks:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            hidden = c_in * t
            if t != 1:
                add(Layer(f"pw{c_in}-{hidden}@{hw}", c_in, hidden, hw, 1))
            add(Layer(f"dw{hidden}s{stride}@{hw}", hidden, hidden, hw, 3, stride, 1, hidden))
            hw //= stride
            add(Layer(f"pw{hidden}-{c_out}@{hw}", hidden, c_out, hw, 1))
            c_in = c_out
    add(Layer(f"pw{c_in}-1280@{hw}", c_in, 1280, hw, 1))
    return list(layers.values())


#: MobileNetV2's depthwise and pointwise layers, every distinct shape once (batch 64 in the
#: GPU benchmark).
MOBILENETV2 = _mobilenet_v2()

#: The 3-D U-Net's 3x3x3 convolutions (Cicek et al. 2016: 32-64 / 64-128 / 128-256 / 256-512
#: on the way down, concatenated skips on the way up), on a 64^3 crop.
UNET3D = [
    Layer("enc1a", 1, 32, 64, 3, 1, 1, dims=3),
    Layer("enc1b", 32, 64, 64, 3, 1, 1, dims=3),
    Layer("enc2a", 64, 64, 32, 3, 1, 1, dims=3),
    Layer("enc2b", 64, 128, 32, 3, 1, 1, dims=3),
    Layer("enc3a", 128, 128, 16, 3, 1, 1, dims=3),
    Layer("enc3b", 128, 256, 16, 3, 1, 1, dims=3),
    Layer("bottom_a", 256, 256, 8, 3, 1, 1, dims=3),
    Layer("bottom_b", 256, 512, 8, 3, 1, 1, dims=3),
    Layer("dec3a", 768, 256, 16, 3, 1, 1, dims=3),
    Layer("dec3b", 256, 256, 16, 3, 1, 1, dims=3),
    Layer("dec2a", 384, 128, 32, 3, 1, 1, dims=3),
    Layer("dec2b", 128, 128, 32, 3, 1, 1, dims=3),
    Layer("dec1a", 192, 64, 64, 3, 1, 1, dims=3),
    Layer("dec1b", 64, 64, 64, 3, 1, 1, dims=3),
]

#: MobileNetV2's depthwise layers only (the CPU depthwise benchmark).
MOBILENETV2_DW = [layer for layer in MOBILENETV2 if layer.groups > 1]


def depthwise_layers(rows: tuple[tuple[int, int, int, int], ...]) -> list[Layer]:
    """Plain depthwise layers, "same" padding, from (channels, plane, filter, stride) rows."""
    return [Layer(f"dw{c}k{f}s{s}@{hw}", c, c, hw, f, s, f // 2, c) for c, hw, f, s in rows]


#: EfficientNet-B0's depthwise layers (MBConv, Tan & Le 2019 table 1), every distinct shape once.
EFFICIENTNET_B0_DW = depthwise_layers(
    (
        (32, 112, 3, 1),
        (96, 112, 3, 2),
        (144, 56, 3, 1),
        (144, 56, 5, 2),
        (240, 28, 5, 1),
        (240, 28, 3, 2),
        (480, 14, 3, 1),
        (480, 14, 5, 1),
        (672, 14, 5, 1),
        (672, 14, 5, 2),
        (1152, 7, 5, 1),
        (1152, 7, 3, 1),
    )
)

#: MobileNetV3-Large's depthwise layers (Howard et al. 2019 table 1, 224 input), every distinct
#: shape once: channel counts (16, 72, 120, 184, 200) that no other suite has.
MOBILENETV3_LARGE_DW = depthwise_layers(
    (
        (16, 112, 3, 1),
        (64, 112, 3, 2),
        (72, 56, 3, 1),
        (72, 56, 5, 2),
        (120, 28, 5, 1),
        (240, 28, 3, 2),
        (200, 14, 3, 1),
        (184, 14, 3, 1),
        (480, 14, 3, 1),
        (672, 14, 3, 1),
        (672, 14, 5, 2),
        (960, 7, 5, 1),
    )
)

#: ConvNeXt-T's 7x7 depthwise layers, one per stage.
CONVNEXT_T_DW = [
    Layer(f"dw{c}k7@{hw}", c, c, hw, 7, 1, 3, c)
    for c, hw in ((96, 56), (192, 28), (384, 14), (768, 7))
]

#: ConvNeXt-B's and ConvNeXt-L's 7x7 depthwise layers (Liu et al. 2022: 128 and 192 channels
#: in the first stage, doubling each), held out from the fits made on ConvNeXt-T's.
CONVNEXT_BL_DW = [
    Layer(f"dw{c}k7@{hw}", c, c, hw, 7, 1, 3, c)
    for base in (128, 192)
    for c, hw in ((base, 56), (2 * base, 28), (4 * base, 14), (8 * base, 7))
]

#: ResNeXt-50 (32x4d)'s grouped 3x3 layers: 32 groups of 4 to 32 channels.
RESNEXT50_GROUPED = [
    Layer(f"g32c{c}s{s}@{hw}", c, c, hw, 3, s, 1, 32)
    for c, hw, s in (
        (128, 56, 1),
        (256, 56, 2),
        (256, 28, 1),
        (512, 28, 2),
        (512, 14, 1),
        (1024, 14, 2),
        (1024, 7, 1),
    )
]

SUITES = {
    "resnet50": RESNET50,
    "vgg16": VGG16,
    "mobilenetv2": MOBILENETV2,
    "unet3d": UNET3D,
    "mobilenetv2_dw": MOBILENETV2_DW,
    "efficientnet_b0_dw": EFFICIENTNET_B0_DW,
    "convnext_t_dw": CONVNEXT_T_DW,
    "convnext_bl_dw": CONVNEXT_BL_DW,
    "mobilenetv3_large_dw": MOBILENETV3_LARGE_DW,
    "resnext50_grouped": RESNEXT50_GROUPED,
}


def problem(
    layer: Layer,
    batch: int,
    direction: str = "forward",
    dtype: str = "float32",
    layout: str = "NCHW",
) -> miocore.ConvProblem:
    """The miocore problem of one layer at ``batch`` (``layout`` NCHW or NHWC; a 3-D layer
    takes the matching NCDHW / NDHWC)."""
    d = layer.dims
    if d == 3:
        layout = {"NCHW": "NCDHW", "NHWC": "NDHWC"}.get(layout, layout)
    return miocore.ConvProblem.from_sizes(
        direction,
        n=batch,
        c=layer.c,
        k=layer.k,
        in_spatial=(layer.hw,) * d,
        filter_spatial=(layer.f,) * d,
        pads=(layer.pad,) * d,
        strides=(layer.stride,) * d,
        groups=layer.groups,
        dtype=dtype,
        layout=layout,
    )
