"""Layers with few input channels as convolutions of their depth images: the
``triton.depth_*`` solvers.

A network's first layers (ResNet's 7x7 stride 2 and EfficientNet's 3x3 stride 2 stems on 3
channels, ConvNeXt's 4x4 stride 4 patches, VGG's 3x3 on 3 channels) give an implicit GEMM a
reduction of a few channels per tap, which its 16-byte channel loads and tensor-core slices
waste (ResNet-50's stem ran at 0.50 of cuDNN, EfficientNet-B0's at 0.52, VGG-16's first layer
at 0.62; H200, fp16, channels-last, 2026-11-28). Their depth image moves some of the filter's
reach into the channels:

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

from miocore import ConvolutionDescriptor, ConvProblem, Direction, TensorDescriptor

#: Input channels below which a layer is offered its depth image (a 16-channel layer already
#: fills a tensor-core slice).
FEW_CHANNELS = 16
#: Depth channels at most (SH * SW * C or R * S * C): ConvNeXt's stem has 48.
MAX_DEPTH_CHANNELS = 64
#: Depth channels are padded to whole slices of this many.
SLICE = 16


def depth_declines(p: ConvProblem) -> str:
    """Why ``p`` has no depth image worth running ("" where it has one): 2-D, one group, fewer
    than :data:`FEW_CHANNELS` input channels, at most :data:`MAX_DEPTH_CHANNELS` depth
    channels; a strided layer without dilation, or a stride-1 layer in forward or backward
    weights."""
    if p.spatial_dims != 2:
        return f"{p.spatial_dims}-D problem: depth images are 2-D"
    if p.conv.mode != "conv":
        return f"mode {p.conv.mode!r}: depth images are of the canonical convolution"
    if p.groups != 1:
        return f"{p.groups} groups: depth images are of one group"
    c = p.x.lengths[1]
    if c >= FEW_CHANNELS:
        return f"{c} input channels: already a whole slice"
    sh, sw = p.conv.strides
    r, s = p.w.lengths[2:]
    if max(sh, sw) > 1:
        if max(p.conv.dilations) != 1:
            return f"dilation {p.conv.dilations}: a stride's phases need none"
        folded = sh * sw * c
    elif p.direction is Direction.BACKWARD_DATA:
        return "stride 1, backward data: dx would sum the image's overlapping taps"
    else:
        folded = r * s * c
    if folded > MAX_DEPTH_CHANNELS:
        return f"{folded} depth channels: past {MAX_DEPTH_CHANNELS}"
    return ""


def depth_sizes(p: ConvProblem) -> dict[str, int]:
    """The depth image's sizes: channels C2, pixels H2 x W2 (the outputs' rows and columns
    plus the depth filter's reach), filter R2 x S2; and the fold: FH x FW input positions per
    depth pixel, MH / MW apart (the stride's phases, 1 apart; or the taps, the dilation
    apart)."""
    c = p.x.lengths[1]
    r, s = p.w.lengths[2:]
    sh, sw = p.conv.strides
    oh, ow = p.y.lengths[2:]
    if max(sh, sw) > 1:
        fh, fw, mh, mw = sh, sw, 1, 1
        r2, s2 = -(-r // sh), -(-s // sw)
    else:
        (fh, fw), (mh, mw) = (r, s), p.conv.dilations
        r2 = s2 = 1
    c2 = -(-fh * fw * c // SLICE) * SLICE
    return {
        **{"C2": c2, "H2": oh + r2 - 1, "W2": ow + s2 - 1, "R2": r2, "S2": s2},
        **{"FH": fh, "FW": fw, "MH": mh, "MW": mw},
    }


def depth_view(p: ConvProblem) -> ConvProblem:
    """``p`` as its depth image: packed channels-last x and filter of the depth sizes, the
    same y, stride 1, no padding."""
    n = p.x.lengths[0]
    k = p.w.lengths[0]
    d = depth_sizes(p)
    x = TensorDescriptor(p.dtype, (n, d["C2"], d["H2"], d["W2"]), layout="NHWC")
    w = TensorDescriptor(p.dtype, (k, d["C2"], d["R2"], d["S2"]), layout="NHWC")
    return ConvProblem(p.direction, x=x, w=w, y=p.y, conv=ConvolutionDescriptor(pads=(0, 0)))


def is_image(p: ConvProblem) -> bool:
    """Whether ``p`` has the shape of a depth image (stride 1, no padding or dilation,
    channels in whole slices, packed channels-last x): the solvers' own questions about an
    image come back with it."""
    plain = max(p.conv.strides) == 1 and max(p.conv.pads) == 0 and max(p.conv.dilations) == 1
    return plain and p.x.lengths[1] % SLICE == 0 and p.x.strides[1] == 1
