"""Strided layers with few input channels as stride-1 convolutions of their space-to-depth
images: the ``triton.s2d_*`` solvers.

A network's stem (ResNet's 7x7 stride 2 and EfficientNet's 3x3 stride 2 on 3 channels,
ConvNeXt's 4x4 stride 4 patches) gives an implicit GEMM a reduction of a few channels per tap,
which its 16-byte channel loads and tensor-core slices waste (ResNet-50's stem ran at 0.50 of
cuDNN, EfficientNet-B0's at 0.52; H200, fp16, channels-last, 2026-11-28). Regrouped by the
stride, an SH x SW stride over C channels is a stride-1 convolution over SH * SW * C channels
(rounded up to whole slices of 16) with a filter of ceil(R / SH) x ceil(S / SW) taps: ResNet's
stem becomes 4x4 over 16 channels, EfficientNet's 2x2 over 16, ConvNeXt's 1x1 over 48 (one
GEMM). The solution copies x and w into that form in the workspace (``kernels/depth.py``),
runs the direction's ordinary Triton GEMM on it, and copies a backward pass's output back.
The copies are exact (every element of x appears once in the depth image, the rest is zeros),
so the result is the layer's own.
"""

from __future__ import annotations

from miocore import ConvolutionDescriptor, ConvProblem, TensorDescriptor

#: Input channels below which a strided layer is offered its depth image (a 16-channel layer
#: already fills a tensor-core slice).
FEW_CHANNELS = 16
#: Depth channels at most (SH * SW * C): ConvNeXt's stem has 48.
MAX_DEPTH_CHANNELS = 64
#: Depth channels are padded to whole slices of this many.
SLICE = 16


def depth_declines(p: ConvProblem) -> str:
    """Why ``p`` has no depth image worth running ("" where it has one): 2-D, one group, no
    dilation, a stride above 1, fewer than :data:`FEW_CHANNELS` input channels and at most
    :data:`MAX_DEPTH_CHANNELS` depth channels."""
    if p.spatial_dims != 2:
        return f"{p.spatial_dims}-D problem: depth images are 2-D"
    if p.conv.mode != "conv":
        return f"mode {p.conv.mode!r}: depth images are of the canonical convolution"
    if p.groups != 1:
        return f"{p.groups} groups: depth images are of one group"
    if max(p.conv.dilations) != 1:
        return f"dilation {p.conv.dilations}: depth images need none"
    sh, sw = p.conv.strides
    if max(sh, sw) == 1:
        return "stride 1: nothing to regroup"
    c = p.x.lengths[1]
    if c >= FEW_CHANNELS:
        return f"{c} input channels: already a whole slice"
    if sh * sw * c > MAX_DEPTH_CHANNELS:
        return f"{sh * sw * c} depth channels: past {MAX_DEPTH_CHANNELS}"
    return ""


def depth_sizes(p: ConvProblem) -> dict[str, int]:
    """The depth image's sizes: channels C2, pixels H2 x W2 (the outputs' rows and columns
    plus the depth filter's reach), filter R2 x S2."""
    c = p.x.lengths[1]
    r, s = p.w.lengths[2:]
    sh, sw = p.conv.strides
    oh, ow = p.y.lengths[2:]
    r2, s2 = -(-r // sh), -(-s // sw)
    c2 = -(-sh * sw * c // SLICE) * SLICE
    return {"C2": c2, "H2": oh + r2 - 1, "W2": ow + s2 - 1, "R2": r2, "S2": s2}


def depth_view(p: ConvProblem) -> ConvProblem:
    """``p`` as its depth image: packed channels-last x and filter of the depth sizes, the
    same y, stride 1, no padding. A stride-1 problem is its own view (the solvers ask for the
    view of a view)."""
    if max(p.conv.strides) == 1:
        return p
    n = p.x.lengths[0]
    k = p.w.lengths[0]
    d = depth_sizes(p)
    x = TensorDescriptor(p.dtype, (n, d["C2"], d["H2"], d["W2"]), layout="NHWC")
    w = TensorDescriptor(p.dtype, (k, d["C2"], d["R2"], d["S2"]), layout="NHWC")
    return ConvProblem(p.direction, x=x, w=w, y=p.y, conv=ConvolutionDescriptor(pads=(0, 0)))
