"""Whether anything may be tracing or intercepting a convolution call: the test that lets the
eager path (and the ops' autograd kernel) skip the dispatcher's lower layers."""

from __future__ import annotations

import torch

__all__ = ["eager", "plain"]

_EAGER_TYPES = (torch.Tensor, torch.nn.Parameter)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_is_functional = torch._is_functional_tensor


def eager(x: torch.Tensor, w: torch.Tensor) -> bool:
    """True when nothing may be tracing this call: plain tensors with memory, no mode, no
    compile."""
    return (
        type(x) in _EAGER_TYPES
        and not x.is_meta  # shapes only: the fake kernel answers
        and type(w) in _EAGER_TYPES
        and not torch.compiler.is_compiling()
        and not torch._C._len_torch_dispatch_stack()
        and not torch._C._is_torch_function_mode_enabled()
        and not _functorch_active()
    )


def plain(x: torch.Tensor, w: torch.Tensor) -> bool:
    """True when no dispatch key below autograd would act on a call with ``x`` and ``w``
    (what :func:`eager` checks, and no functionalization wrapper): an op's body may run
    directly from its autograd kernel."""
    return eager(x, w) and not _is_functional(x) and not _is_functional(w)
