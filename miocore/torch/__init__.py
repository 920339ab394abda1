"""miocore's PyTorch front end: convolution modules, ``convert`` and ``prepare``.

``import miocore.torch`` needs PyTorch (the ``torch`` extra); ``import miocore`` never imports
it. Every module of this package imports ``torch`` absolutely, so this package's name shadows
nothing. See ``docs/torch.md``.

    model = miocore.torch.convert(model)                 # every torch.nn conv through miocore
    miocore.torch.prepare(model, example, backward=True) # find every layer ahead of time
"""

from __future__ import annotations

from miocore.torch import ops
from miocore.torch.convert import convert
from miocore.torch.functional import convolution
from miocore.torch.modules import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from miocore.torch.prepare import prepare
from miocore.torch.runtime import accuracy, handle, math_mode, reset, set_accuracy, set_math_mode

__all__ = [
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "accuracy",
    "convert",
    "convolution",
    "handle",
    "math_mode",
    "ops",
    "prepare",
    "reset",
    "set_accuracy",
    "set_math_mode",
]
