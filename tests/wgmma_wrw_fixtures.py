"""Shared by the host-side checks of ``igemm.gpu_wgmma_wrw``'s launch kinds: a stand-in H200
context and a VGG-16-like backward-weights problem."""

from __future__ import annotations

import dataclasses

import miocore
from miocore.testing import cpu_context


def sm90_context(sms: int = 132) -> miocore.ExecutionContext:
    """A CUDA sm_90 device of ``sms`` SMs, described without opening one."""
    device = dataclasses.replace(cpu_context().device, backend="cuda", compute_units=sms,
                                 arch="sm90")  # fmt: skip
    return miocore.ExecutionContext(device=device)


def wrw_problem(**kw) -> miocore.ConvProblem:
    """VGG-16's conv4_2 backward weights (16 images, 512 -> 512 channels, 28x28, 3x3, fp16,
    NHWC); ``kw`` overrides ``from_sizes`` arguments."""
    args = dict(n=16, c=512, k=512, in_spatial=(28, 28), filter_spatial=(3, 3), pads=(1, 1),
                dtype="float16", layout="NHWC")  # fmt: skip
    args.update(kw)
    return miocore.ConvProblem.from_sizes("backward_weights", **args)
