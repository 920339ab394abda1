"""From torch tensors to what miocore takes: element types, layouts, descriptors, host views.

A problem's tensors share one memory layout, chosen from the tensor that leads the direction
(x for forward and backward weights, dy for backward data): channels_last when that tensor is
stored so (and not also plainly contiguous), else NCHW. The other tensors are brought to it.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import torch

from miocore.backends.cpu import torch_host_view
from miocore.errors import InvalidArgumentError
from miocore.problem.descriptors import TensorDescriptor, packed_strides

#: torch element types miocore convolves, by miocore's names.
DTYPES: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}

_LAYOUTS = {
    (4, False): "NCHW",
    (4, True): "NHWC",
    (5, False): "NCDHW",
    (5, True): "NDHWC",
}


def check_dtype(t: torch.Tensor, field: str) -> str:
    """miocore's name of ``t``'s element type; other types are refused."""
    name = DTYPES.get(t.dtype)
    if name is None:
        raise InvalidArgumentError(
            f"miocore convolves {sorted(DTYPES.values())}; cast the module and its input",
            field=f"{field}.dtype",
            value=str(t.dtype),
        )
    return name


def channels_last_format(dims: int) -> torch.memory_format:
    """torch's channels-last memory format for a 4-D or 5-D tensor."""
    return torch.channels_last if dims == 4 else torch.channels_last_3d


def is_channels_last(t: torch.Tensor) -> bool:
    """True when ``t`` is stored channels-last and not also plainly contiguous, or is a view
    whose strides run in channels-last order (a channel slice of a channels-last tensor, as
    ``torch.cat``'s backward hands each input): packing such a view channels-last is a plain
    copy, where NCHW would transpose it and hand NCHW gradients to the channels-last layers
    around it (as PyTorch's ``suggest_memory_format`` reads strides too)."""
    if t.is_contiguous():
        return False
    if t.is_contiguous(memory_format=channels_last_format(t.dim())):
        return True
    return _channels_last_order(tuple(t.shape), t.stride())


def gradient_like(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The incoming gradient of a convolution's output, stored densely in the layout of the
    layer's input ``x`` (``w``'s where ``x`` is stored both ways, as a tensor with one channel
    or one pixel is): itself when it already is, else one copy that both backward directions
    then read. So the input's gradient comes back in the input's layout, as PyTorch's own
    convolution gives it, whatever the gradient arrived as: a channel slice of a channels-last
    tensor (``torch.cat``'s backward) or a plain contiguous tensor from a loss."""
    fmt = channels_last_format(x.dim())
    ambiguous = x.is_contiguous() and x.is_contiguous(memory_format=fmt)
    wanted = is_channels_last(w) if ambiguous else is_channels_last(x)
    target = memory_format(x.dim(), wanted)
    if dy.is_contiguous(memory_format=target):
        return dy
    return dy.contiguous(memory_format=target)


@functools.lru_cache(maxsize=4096)
def _channels_last_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether strides nest as channels-last does (N outside the spatial dimensions outside C,
    each dimension's stride spanning the ones inside it); dimensions of length 1 are ignored."""
    if len(shape) not in (4, 5):
        return False
    order = (0, *range(2, len(shape)), 1)  # outermost to innermost
    dims = [d for d in order if shape[d] > 1]
    if not dims or dims[-1] != 1:
        return False  # channels are not the innermost dimension that varies
    return (
        all(
            strides[outer] >= strides[inner] * shape[inner]
            for outer, inner in itertools.pairwise(dims)
        )
        and strides[1] >= 1
    )


def layout_name(dims: int, channels_last: bool) -> str:
    """miocore's layout name: NCHW, NHWC, NCDHW or NDHWC."""
    return _LAYOUTS[(dims, channels_last)]


def memory_format(dims: int, channels_last: bool) -> torch.memory_format:
    """The torch memory format of a layout."""
    return channels_last_format(dims) if channels_last else torch.contiguous_format


def packed(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t`` stored packed in ``layout``: itself when it already is, else a copy.

    Dimensions of length 1 may carry any stride in torch; they get the packed one here (a view
    of the same memory) so the tensor's strides are exactly the descriptor's.
    """
    strides = _packed_strides(t.shape, layout)
    if t.stride() == strides:
        return t
    channels_last = layout in ("NHWC", "NDHWC")
    t = t.contiguous(memory_format=memory_format(t.dim(), channels_last))
    if t.stride() != strides:
        t = t.as_strided(t.shape, strides)
    return t


@functools.lru_cache(maxsize=4096)
def _packed_strides(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    return packed_strides(tuple(shape), layout)


def descriptor(dtype: str, shape: Any, layout: str) -> TensorDescriptor:
    """The packed descriptor of a tensor of ``shape`` in ``layout``."""
    return TensorDescriptor(dtype, tuple(shape), layout=layout)


def host_view(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor's memory, same shape and strides, no copy.

    bfloat16 has no numpy type: its 16-bit words are viewed as ``ml_dtypes.bfloat16`` by the
    CPU backend's own view (:func:`miocore.backends.cpu.torch_host_view`), which also checks
    the device. The front end's tensors are checked CPU tensors already, so the other types
    take numpy's view directly (half the cost of the checked one: ~1 µs a tensor).
    """
    if t.dtype is torch.bfloat16:
        return torch_host_view(t)
    return t.detach().numpy()
