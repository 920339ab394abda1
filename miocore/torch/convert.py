"""``convert(model)``: every torch.nn convolution of a model through miocore, in place."""

from __future__ import annotations

import torch

from miocore.torch.modules import REPLACEMENTS, check_supported

__all__ = ["convert"]


def convert(module: torch.nn.Module) -> torch.nn.Module:
    """Swap every ``torch.nn`` convolution in ``module`` (itself included) for miocore's and
    return ``module``.

    Each layer keeps its parameters, buffers and hooks: only its class changes. Subclasses of
    the torch.nn classes are left alone (they may have their own forward). Nothing is changed
    when a layer cannot be converted (a padding mode other than zeros): the error names it.
    """
    found = [
        (name or type(module).__name__, m)
        for name, m in module.named_modules()
        if type(m) in REPLACEMENTS
    ]
    for name, m in found:
        check_supported(m, name)
    for _, m in found:
        m.__class__ = REPLACEMENTS[type(m)]
    return module
