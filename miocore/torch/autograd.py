"""The autograd function over miocore's three directions, and which path a call takes.

Eagerly, a convolution goes through :class:`Convolution` (a ``torch.autograd.Function``) that
calls the op bodies directly: the dispatcher's path to a Python op costs about 11 µs per call
(measured on the CPU, ops defined through ``torch.library.Library``), the function about 7,
and a call that records nothing skips even that. Whenever something may be tracing
(``torch.compile``, export, fake or other dispatch modes, functorch transforms, tensor
subclasses) the call goes to the ``miocore::conv_forward`` custom op instead, whose fake kernel
and registered autograd the tracers understand. Both paths run the same bodies, so they
compute the same thing.
"""

from __future__ import annotations

from typing import Any

import torch

from miocore.torch import ops
from miocore.torch.tensors import gradient_like
from miocore.torch.tracing import eager as _eager

__all__ = ["Convolution", "conv"]


class Convolution(torch.autograd.Function):
    """y = conv(x, w); backward: dx by backward data, dw by backward weights (only those
    autograd needs)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, params: ops.Params) -> torch.Tensor:
        """The layer's output."""
        ctx.save_for_backward(x, w)
        ctx.params = params
        return ops.forward(x, w, params)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        """The gradients of x and w."""
        x, w = ctx.saved_tensors
        dx = dw = None
        dy = gradient_like(dy, x, w)  # packed once, in x's layout, for both directions
        if ctx.needs_input_grad[0]:
            dx = ops.backward_data(dy, w, x.shape, ctx.params)
        if ctx.needs_input_grad[1]:
            dw = ops.backward_weights(x, dy, w.shape, ctx.params)
        return dx, dw, None


#: torch's C entry of ``Convolution.apply``: ``Function.apply``'s Python wrapper only adds
#: functorch's handling (unwrapping dead wrappers), and :func:`_eager` has already ruled
#: functorch out, so an eager call skips the wrapper (~2 µs on the CPU).
_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, Convolution)


def conv(x: torch.Tensor, w: torch.Tensor, params: ops.Params) -> torch.Tensor:
    """The layer's output through miocore, differentiable in x and w."""
    if _eager(x, w):
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
            return _apply(x, w, params)
        return ops.forward(x, w, params)  # nothing to record: skip the Function's own cost
    return ops.conv_forward(x, w, ops.pack(params))
