"""The ``miocore::conv_*`` custom ops: the three directions of a convolution through miocore.

``torch.ops.miocore.conv_forward`` computes y from x and w; ``conv_backward_data`` dx from dy
and w; ``conv_backward_weights`` dw from x and dy. Each has a fake implementation (output
shape and strides only), so ``torch.compile`` traces through them without a graph break, and
``conv_forward`` has its backward registered with ``torch.library``, so autograd runs the two
others. ``transposed`` makes the layer a transposed convolution (weights ``(C_in, C_out/groups,
...)`` as in PyTorch); ``output_padding`` only applies to it. Tensors are 4-D or 5-D.

An op allocates its output (and nothing else: the workspace is the handle's, see ``runtime``)
through PyTorch in the layout of the tensor that leads the direction, and never waits on the
device, so a CUDA graph can capture it once every shape has been seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from miocore.errors import InvalidArgumentError
from miocore.problem.conv import ConvProblem
from miocore.problem.descriptors import ConvolutionDescriptor
from miocore.torch import runtime
from miocore.torch.tensors import (
    check_dtype,
    descriptor,
    is_channels_last,
    layout_name,
    memory_format,
    packed,
)

Params = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int, bool, tuple[int, ...]]


def output_shape(
    x_shape: Sequence[Any],
    w_shape: Sequence[Any],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    transposed: bool,
    output_padding: Sequence[int],
) -> list[Any]:
    """The layer's output shape (sizes may be symbolic under ``torch.compile``)."""
    spatial = []
    for i, size in enumerate(x_shape[2:]):
        k, s, p, d = w_shape[2 + i], stride[i], padding[i], dilation[i]
        if transposed:
            spatial.append((size - 1) * s - 2 * p + d * (k - 1) + 1 + output_padding[i])
        else:
            spatial.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
    channels = w_shape[1] * groups if transposed else w_shape[0]
    return [x_shape[0], channels, *spatial]


def _empty(lead: torch.Tensor, shape: Sequence[Any]) -> torch.Tensor:
    """A new tensor of ``shape`` in the layout of ``lead`` (the same rule as the real op)."""
    fmt = memory_format(lead.dim(), is_channels_last(lead))
    return torch.empty(shape, dtype=lead.dtype, device=lead.device, memory_format=fmt)


def _run(
    direction: str,
    lead: torch.Tensor,
    tensors: dict[str, torch.Tensor],
    output: str,
    output_shape_: Sequence[int],
    params: Params,
) -> torch.Tensor:
    """Pack the inputs in the lead's layout, allocate the output, run the direction."""
    dtype = check_dtype(lead, "x" if direction != "backward_data" else "dy")
    layout = layout_name(lead.dim(), is_channels_last(lead))
    for name, t in tensors.items():
        if t.dtype != lead.dtype:
            check_dtype(t, name)
            raise InvalidArgumentError(
                f"must match the input's {lead.dtype}", field=f"{name}.dtype", value=str(t.dtype)
            )
        tensors[name] = packed(t, layout)
    if min(output_shape_) < 1:
        raise InvalidArgumentError(
            f"the {direction} result would have shape {tuple(output_shape_)}: the filter (with"
            " dilation) is larger than the padded input, or a size is zero",
            field="input.shape",
            value=tuple(lead.shape),
        )
    result = _empty(lead, output_shape_)
    tensors[output] = packed(result, layout)
    x, w, y = tensors["x"], tensors["w"], tensors["y"]
    key = (direction, layout, dtype, x.shape, w.shape, y.shape, params)
    problem = _problems.get(key)
    if problem is None:
        problem = _problems[key] = _problem(direction, dtype, layout, x, w, y, params)
    runtime.run(lead.device, key, problem, x=x, w=w, y=y)
    return result


#: Problems by key, so a problem is validated once per shape.
_problems: dict[Any, ConvProblem] = {}


def _problem(
    direction: str,
    dtype: str,
    layout: str,
    x: torch.Tensor,
    w: torch.Tensor,
    y: torch.Tensor,
    params: Params,
) -> ConvProblem:
    stride, padding, dilation, groups, transposed, output_padding = params
    conv = ConvolutionDescriptor(
        pads=padding,
        strides=stride,
        dilations=dilation,
        groups=groups,
        mode="transpose" if transposed else "conv",
        output_pads=output_padding if transposed else None,
    )
    return ConvProblem(
        direction,
        x=descriptor(dtype, x.shape, layout),
        w=descriptor(dtype, w.shape, layout),
        y=descriptor(dtype, y.shape, layout),
        conv=conv,
    )


def make_params(
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    transposed: bool,
    output_padding: Sequence[int],
) -> Params:
    """The convolution's arguments as one hashable value."""
    return (
        tuple(stride),
        tuple(padding),
        tuple(dilation),
        int(groups),
        bool(transposed),
        tuple(output_padding),
    )


def forward(x: torch.Tensor, w: torch.Tensor, params: Params) -> torch.Tensor:
    """The layer's output (the body of ``conv_forward``, callable without the dispatcher)."""
    shape = output_shape(x.shape, w.shape, *params)
    return _run("forward", x, {"x": x, "w": w}, "y", shape, params)


def backward_data(
    dy: torch.Tensor, w: torch.Tensor, x_shape: Sequence[int], params: Params
) -> torch.Tensor:
    """The gradient of the layer's input (the body of ``conv_backward_data``)."""
    return _run("backward_data", dy, {"y": dy, "w": w}, "x", x_shape, params)


def backward_weights(
    x: torch.Tensor, dy: torch.Tensor, w_shape: Sequence[int], params: Params
) -> torch.Tensor:
    """The gradient of the weights (the body of ``conv_backward_weights``)."""
    return _run("backward_weights", x, {"x": x, "y": dy}, "w", w_shape, params)


@torch.library.custom_op("miocore::conv_forward", mutates_args=())
def conv_forward(
    x: torch.Tensor,
    w: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    transposed: bool,
    output_padding: list[int],
) -> torch.Tensor:
    """The layer's output: a convolution (or transposed convolution) of x with w."""
    return forward(x, w, make_params(stride, padding, dilation, groups, transposed, output_padding))


@conv_forward.register_fake
def _conv_forward_fake(
    x: torch.Tensor,
    w: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    transposed: bool,
    output_padding: list[int],
) -> torch.Tensor:
    shape = output_shape(
        x.shape, w.shape, stride, padding, dilation, groups, transposed, output_padding
    )
    return _empty(x, shape)


@torch.library.custom_op("miocore::conv_backward_data", mutates_args=())
def conv_backward_data(
    dy: torch.Tensor,
    w: torch.Tensor,
    x_shape: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    transposed: bool,
    output_padding: list[int],
) -> torch.Tensor:
    """The gradient of the layer's input, of shape ``x_shape``, in dy's layout."""
    params = make_params(stride, padding, dilation, groups, transposed, output_padding)
    return backward_data(dy, w, x_shape, params)


@conv_backward_data.register_fake
def _conv_backward_data_fake(
    dy: torch.Tensor,
    w: torch.Tensor,
    x_shape: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    transposed: bool,
    output_padding: list[int],
) -> torch.Tensor:
    return _empty(dy, x_shape)


@torch.library.custom_op("miocore::conv_backward_weights", mutates_args=())
def conv_backward_weights(
    x: torch.Tensor,
    dy: torch.Tensor,
    w_shape: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    transposed: bool,
    output_padding: list[int],
) -> torch.Tensor:
    """The gradient of the weights, of shape ``w_shape``, in x's layout."""
    params = make_params(stride, padding, dilation, groups, transposed, output_padding)
    return backward_weights(x, dy, w_shape, params)


@conv_backward_weights.register_fake
def _conv_backward_weights_fake(
    x: torch.Tensor,
    dy: torch.Tensor,
    w_shape: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    transposed: bool,
    output_padding: list[int],
) -> torch.Tensor:
    return _empty(x, w_shape)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, *params = inputs
    ctx.save_for_backward(x, w)
    ctx.params = params


def _backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    params = ctx.params
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = torch.ops.miocore.conv_backward_data(dy, w, list(x.shape), *params)
    if ctx.needs_input_grad[1]:
        dw = torch.ops.miocore.conv_backward_weights(x, dy, list(w.shape), *params)
    return dx, dw, None, None, None, None, None, None


conv_forward.register_autograd(_backward, setup_context=_setup_context)
