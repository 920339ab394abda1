"""Layers with few input channels as convolutions of their depth images: the
``triton.depth_*`` solvers.

A network's first layers (ResNet's 7x7 stride 2 and EfficientNet's 3x3 stride 2 stems on 3
channels, ConvNeXt's 4x4 stride 4 patches, VGG's 3x3 on 3 channels, the 3-D U-Net's 3x3x3 on
one) give an implicit GEMM a reduction of a few channels per tap, which its 16-byte channel
loads and tensor-core slices waste (ResNet-50's stem ran at 0.50 of cuDNN, EfficientNet-B0's
at 0.52, VGG-16's first layer at 0.62, the U-Net's at 0.77; H200, fp16, channels-last,
2026-11-28). Their depth image moves some of the filter's reach into the channels (2-D and
3-D alike; a 2-D problem is one of depth 1):

* a strided layer folds the stride's phases (space to depth): an SH x SW stride over C
  channels becomes a stride-1 convolution over SH * SW * C channels with a filter of
  ceil(R / SH) x ceil(S / SW) taps (ResNet's stem: 4x4 over 12 channels, ConvNeXt's patches:
  1x1 over 48, one GEMM). Every element of x appears once in the image, so backward data
  copies dx back out of it;
* a stride-1 layer folds its taps (an im2col whose rows are the image's pixels): a 1x1
  convolution over R * S * C channels (VGG's first layer: 27). The taps overlap, so backward
  data (a sum over them) is not offered.

Channels are rounded up to whole slices of 16 (the rest zeros). The solution copies x and w
into the image in the workspace (``kernels/depth.py``), runs the direction's ordinary Triton
GEMM on it, and copies backward weights' dw (and backward data's dx) back.
"""

from __future__ import annotations

import math

from miocore import ConvolutionDescriptor, ConvProblem, Direction, TensorDescriptor
from miocore_triton.geometry import constants

#: Input channels below which a layer is offered its depth image (a 16-channel layer already
#: fills a tensor-core slice).
FEW_CHANNELS = 16
#: Depth channels at most (SH * SW * C or R * S * C): ConvNeXt's stem has 48.
MAX_DEPTH_CHANNELS = 64
#: Depth channels are padded to whole slices of this many.
SLICE = 16


def depth_declines(p: ConvProblem) -> str:
    """Why ``p`` has no depth image worth running ("" where it has one): 2-D or 3-D, one
    group, fewer than :data:`FEW_CHANNELS` input channels, at most :data:`MAX_DEPTH_CHANNELS`
    depth channels; a strided layer without dilation, or a stride-1 layer in forward or
    backward weights."""
    if p.spatial_dims not in (2, 3):
        return f"{p.spatial_dims}-D problem: depth images are 2-D and 3-D"
    if p.conv.mode != "conv":
        return f"mode {p.conv.mode!r}: depth images are of the canonical convolution"
    if p.groups != 1:
        return f"{p.groups} groups: depth images are of one group"
    c = p.x.lengths[1]
    if c >= FEW_CHANNELS:
        return f"{c} input channels: already a whole slice"
    if max(p.conv.strides) > 1:
        if max(p.conv.dilations) != 1:
            return f"dilation {p.conv.dilations}: a stride's phases need none"
        folded = math.prod(p.conv.strides) * c
    elif p.direction is Direction.BACKWARD_DATA:
        return "stride 1, backward data: dx would sum the image's overlapping taps"
    else:
        folded = math.prod(p.w.lengths[2:]) * c
    if folded > MAX_DEPTH_CHANNELS:
        return f"{folded} depth channels: past {MAX_DEPTH_CHANNELS}"
    return ""


def depth_sizes(p: ConvProblem) -> dict[str, int]:
    """The depth image's sizes (a 2-D problem's as 3-D of depth 1): channels C2, pixels
    D2 x H2 x W2 (the outputs' plus the depth filter's reach), filter T2 x R2 x S2; and the
    fold: FD x FH x FW input positions per depth pixel, MD / MH / MW apart (a stride's phases,
    1 apart; or a stride-1 layer's taps, the dilation apart)."""
    shape = constants(p)  # 3-D, a 2-D problem as depth 1
    c = shape["C"]
    strides = tuple(shape[key] for key in ("SD", "SH", "SW"))
    taps = tuple(shape[key] for key in ("T", "R", "S"))
    outputs = tuple(shape[key] for key in ("O", "P", "Q"))
    if max(strides) > 1:
        folds, mults = strides, (1, 1, 1)
        reach = tuple(-(-f // s) for f, s in zip(taps, strides, strict=True))
    else:
        folds, mults = taps, tuple(shape[key] for key in ("DD", "DH", "DW"))
        reach = (1, 1, 1)
    c2 = -(-math.prod(folds) * c // SLICE) * SLICE
    sizes = {"C2": c2}
    for axis, out, f2, fold, mult in zip("DHW", outputs, reach, folds, mults, strict=True):
        sizes.update({f"{axis}2": out + f2 - 1, f"F{axis}": fold, f"M{axis}": mult})
    sizes.update(zip(("T2", "R2", "S2"), reach, strict=True))
    return sizes


def depth_view(p: ConvProblem) -> ConvProblem:
    """``p`` as its depth image: packed channels-last x and filter of the depth sizes, the
    same y, stride 1, no padding."""
    n = p.x.lengths[0]
    k = p.w.lengths[0]
    d = depth_sizes(p)
    if p.spatial_dims == 3:
        pixels, taps, layout = (d["D2"], d["H2"], d["W2"]), (d["T2"], d["R2"], d["S2"]), "NDHWC"
    else:
        pixels, taps, layout = (d["H2"], d["W2"]), (d["R2"], d["S2"]), "NHWC"
    x = TensorDescriptor(p.dtype, (n, d["C2"], *pixels), layout=layout)
    w = TensorDescriptor(p.dtype, (k, d["C2"], *taps), layout=layout)
    pads = (0,) * p.spatial_dims
    return ConvProblem(p.direction, x=x, w=w, y=p.y, conv=ConvolutionDescriptor(pads=pads))


def is_image(p: ConvProblem) -> bool:
    """Whether ``p`` has the shape of a depth image (stride 1, no padding or dilation,
    channels in whole slices, packed channels-last x): the solvers' own questions about an
    image come back with it."""
    plain = max(p.conv.strides) == 1 and max(p.conv.pads) == 0 and max(p.conv.dilations) == 1
    return plain and p.x.lengths[1] % SLICE == 0 and p.x.strides[1] == 1
