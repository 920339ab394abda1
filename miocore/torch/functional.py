"""The convolution call of every miocore module: PyTorch's argument conventions mapped onto
the ``miocore::conv_*`` ops.

1-D convolutions run as 2-D ones with H=1; unbatched inputs get a batch of one; ``"same"``
padding that needs more on one side than the other pads the input first (as PyTorch does);
the bias is added after the convolution, so autograd takes its gradient as a sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from miocore.errors import InvalidArgumentError
from miocore.torch import autograd, ops

__all__ = ["convolution"]


def convolution(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] | str = (0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    *,
    transposed: bool = False,
    output_padding: Sequence[int] | None = None,
) -> torch.Tensor:
    """A 1-D, 2-D or 3-D (transposed) convolution through miocore, as ``F.conv*d`` computes it.

    ``weight`` decides the rank: ``(K, C/groups, *kernel)``, or ``(C_in, C_out/groups,
    *kernel)`` when ``transposed``. ``padding`` may be ``"same"`` or ``"valid"`` (not for
    transposed convolutions, as in PyTorch).
    """
    spatial = weight.dim() - 2
    if spatial not in (1, 2, 3):
        raise InvalidArgumentError(
            "expected 1-D, 2-D or 3-D convolution weights", field="weight.shape", value=weight.shape
        )
    batched = x.dim() == spatial + 2
    if not batched and x.dim() != spatial + 1:
        raise InvalidArgumentError(
            f"a {spatial}-D convolution takes a {spatial + 2}-D input (or {spatial + 1}-D"
            " unbatched)",
            field="input.shape",
            value=tuple(x.shape),
        )
    if not batched:
        x = x.unsqueeze(0)
    # A module passes the same tuples every call: its ops arguments are worked out once.
    memo_key = (spatial, stride, padding, dilation, groups, transposed, output_padding)
    memo = not isinstance(padding, str)
    params = None
    if memo:
        try:
            params = _PARAMS.get(memo_key)
        except TypeError:  # a caller's lists
            memo = False
    if params is None:
        stride = _per_dim(stride, spatial, "stride")
        dilation = _per_dim(dilation, spatial, "dilation")
        out_pad = _per_dim(output_padding or 0, spatial, "output_padding")
        if isinstance(padding, str):
            if transposed:
                raise InvalidArgumentError(
                    "transposed convolutions take numeric padding", field="padding", value=padding
                )
            x, pads = _string_padding(x, weight, padding, stride, dilation)
        else:
            pads = _per_dim(padding, spatial, "padding")
        if spatial == 1:  # as 2-D with H=1
            stride, pads, dilation = (1, *stride), (0, *pads), (1, *dilation)
            out_pad = (0, *out_pad)
        params = ops.make_params(stride, pads, dilation, groups, transposed, out_pad)
        if memo and len(_PARAMS) < MAX_MEMO:
            _PARAMS[memo_key] = params
    if spatial == 1:
        x, weight = x.unsqueeze(2), weight.unsqueeze(2)
    y = autograd.conv(x, weight, params)
    if spatial == 1:
        y = y.squeeze(2)
    if bias is not None:
        # In place: y is this call's own new tensor, which nothing saved for backward.
        y = y.add_(bias.view(_BIAS_SHAPES[spatial]))
    return y if batched else y.squeeze(0)


#: The bias as a broadcastable view, per spatial rank (1-D runs as 2-D, then squeezes).
_BIAS_SHAPES = {1: (1, -1, 1), 2: (1, -1, 1, 1), 3: (1, -1, 1, 1, 1)}


#: The ops' arguments of numerically padded layers, by the layer's own arguments.
_PARAMS: dict[tuple[Any, ...], ops.Params] = {}
MAX_MEMO = 4096


def _per_dim(value: Sequence[int] | int, spatial: int, field: str) -> tuple[int, ...]:
    """An int or a sequence as one value per spatial dimension."""
    values = (value,) * spatial if isinstance(value, int) else tuple(value)
    if len(values) != spatial:
        raise InvalidArgumentError(
            f"expected one value per spatial dimension ({spatial})", field=field, value=value
        )
    return values


def _string_padding(
    x: torch.Tensor,
    weight: torch.Tensor,
    padding: str,
    stride: tuple[int, ...],
    dilation: tuple[int, ...],
) -> tuple[torch.Tensor, tuple[int, ...]]:
    """The symmetric pads of ``"valid"`` or ``"same"``; an odd total pads the input's high
    end by one first, as PyTorch does."""
    spatial = weight.dim() - 2
    if padding == "valid":
        return x, (0,) * spatial
    if padding != "same":
        raise InvalidArgumentError(
            "expected 'same', 'valid' or numbers", field="padding", value=padding
        )
    if any(s != 1 for s in stride):
        raise InvalidArgumentError(
            "padding='same' needs stride 1 (as in PyTorch)", field="stride", value=stride
        )
    pads, extra = [], []
    for i in range(spatial):
        total = dilation[i] * (weight.shape[2 + i] - 1)
        pads.append(total // 2)
        extra.append(total - 2 * (total // 2))
    if any(extra):
        # F.pad takes (low, high) pairs from the last dimension back.
        x = F.pad(x, [v for e in reversed(extra) for v in (0, e)])
    return x, tuple(pads)
