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
    gradient_like,
    is_channels_last,
    layout_name,
    memory_format,
    packed,
)
from miocore.torch.tracing import plain

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
    signature: Any = None,
) -> torch.Tensor:
    """Pack the inputs in the lead's layout, allocate the output, run the direction.

    ``signature`` identifies the call (direction, arguments, the inputs' shapes, strides,
    dtypes and device): when the inputs needed no copy, what was worked out here is kept
    under it as a :class:`_Plan`, and a later call alike runs through the plan alone. An input
    whose strides differ from the packed ones only on dimensions of length 1 (torch keeps
    ``(C, 1, 1, 1)`` for a channels-last 1x1 filter, or a pooled ``(N, C, 1, 1)`` map) is the
    same memory: its packed strides are kept in the plan too.
    """
    dtype = check_dtype(lead, "x" if direction != "backward_data" else "dy")
    channels_last = is_channels_last(lead)
    layout = layout_name(lead.dim(), channels_last)
    already_packed = True
    restrides: list[tuple[int, ...] | None] = []
    for name, t in tensors.items():
        if t.dtype != lead.dtype:
            check_dtype(t, name)
            raise InvalidArgumentError(
                f"must match the input's {lead.dtype}", field=f"{name}.dtype", value=str(t.dtype)
            )
        view = tensors[name] = packed(t, layout)
        already_packed = already_packed and view.data_ptr() == t.data_ptr()  # no copy made
        restrides.append(None if view is t else view.stride())
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
    written = tensors[output]
    if signature is not None and already_packed and written.data_ptr() == result.data_ptr():
        if len(_plans) >= MAX_PLANS:
            _plans.clear()  # shapes that keep changing: keep memory bounded, rebuild as seen
        restride = None if written is result else written.stride()
        _plans[signature] = _Plan(
            tuple(output_shape_),
            memory_format(lead.dim(), channels_last),
            result.stride(),
            restride,
            key,
            problem,
            lead.device,
            tuple(restrides) if any(restrides) else None,
        )
    runtime.run(lead.device, key, problem, x=x, w=w, y=y)
    return result


class _Plan:
    """One call signature's work done once: the output's shape, memory format and strides, the
    strides miocore's descriptor wants where torch's differ (on length-1 dimensions) for the
    output and the two inputs, the problem and the device (so a call alike reads none of them
    from its tensors again)."""

    __slots__ = ("device", "format", "inputs", "key", "problem", "restride", "shape", "strides")

    def __init__(
        self,
        shape: tuple[int, ...],
        format: torch.memory_format,
        strides: tuple[int, ...],
        restride: tuple[int, ...] | None,
        key: Any,
        problem: ConvProblem,
        device: torch.device,
        inputs: tuple[tuple[int, ...] | None, ...] | None = None,
    ) -> None:
        self.shape, self.format, self.strides = shape, format, strides
        self.restride, self.key, self.problem = restride, key, problem
        self.device, self.inputs = device, inputs

    def restrided(self, lead: torch.Tensor, other: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The two inputs (lead first) with the packed strides where torch's differ."""
        a, b = self.inputs or (None, None)
        return (
            lead if a is None else lead.as_strided(lead.shape, a),
            other if b is None else other.as_strided(other.shape, b),
        )

    def output(self, lead: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A new output tensor, and the view of it miocore writes."""
        # The lead's dtype and device with the plan's strides: the cheapest of torch's
        # allocating calls (about half of torch.empty with a memory format).
        result = lead.new_empty_strided(self.shape, self.strides)
        if self.restride is None:
            return result, result
        return result, result.as_strided(self.shape, self.restride)


#: Problems by key, so a problem is validated once per shape.
_problems: dict[Any, ConvProblem] = {}
#: Plans by call signature (see :func:`_run`).
_plans: dict[Any, _Plan] = {}
#: Signatures kept before the plans are forgotten (a program whose shapes never repeat).
MAX_PLANS = 4096


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
    signature = ("forward", params, x.shape, x.stride(), w.shape, w.stride(), x.dtype, w.dtype)
    signature += (x.device,)
    plan = _plans.get(signature)
    if plan is not None:
        result, y = plan.output(x)
        if plan.inputs is not None:
            x, w = plan.restrided(x, w)
        runtime.run(plan.device, plan.key, plan.problem, x=x, w=w, y=y)
        return result
    shape = output_shape(x.shape, w.shape, *params)
    return _run("forward", x, {"x": x, "w": w}, "y", shape, params, signature)


def backward_data(
    dy: torch.Tensor, w: torch.Tensor, x_shape: Sequence[int], params: Params
) -> torch.Tensor:
    """The gradient of the layer's input (the body of ``conv_backward_data``)."""
    signature = ("backward_data", params, tuple(x_shape), dy.shape, dy.stride(), w.shape)
    signature += (w.stride(), dy.dtype, w.dtype, dy.device)
    plan = _plans.get(signature)
    if plan is not None:
        result, x = plan.output(dy)
        if plan.inputs is not None:
            dy, w = plan.restrided(dy, w)
        runtime.run(plan.device, plan.key, plan.problem, x=x, w=w, y=dy)
        return result
    return _run("backward_data", dy, {"y": dy, "w": w}, "x", x_shape, params, signature)


def backward_weights(
    x: torch.Tensor, dy: torch.Tensor, w_shape: Sequence[int], params: Params
) -> torch.Tensor:
    """The gradient of the weights (the body of ``conv_backward_weights``)."""
    signature = ("backward_weights", params, tuple(w_shape), x.shape, x.stride(), dy.shape)
    signature += (dy.stride(), x.dtype, dy.dtype, x.device)
    plan = _plans.get(signature)
    if plan is not None:
        result, w = plan.output(x)
        if plan.inputs is not None:
            x, dy = plan.restrided(x, dy)
        runtime.run(plan.device, plan.key, plan.problem, x=x, w=w, y=dy)
        return result
    return _run("backward_weights", x, {"x": x, "y": dy}, "w", w_shape, params, signature)


# The ops are defined through ``torch.library.Library`` rather than ``torch.library.custom_op``:
# the same fake kernels and autograd, but each call skips custom_op's Python wrapper (11.5
# against 17 µs per dispatched call on the development VM), which a compiled model pays per
# convolution. The convolution's arguments travel as one packed list (:func:`pack`): the
# dispatcher hands each argument to Python separately, and eight of them cost 5 µs a call
# against 2.3 for one list (development VM).
#: The ``miocore`` operator library; it owns the definitions, so it lives as long as the module.
_LIB = torch.library.Library("miocore", "DEF")
_LIB.define("conv_forward(Tensor x, Tensor w, int[] geometry) -> Tensor")
_LIB.define("conv_backward_data(Tensor dy, Tensor w, SymInt[] x_shape, int[] geometry) -> Tensor")
_LIB.define(
    "conv_backward_weights(Tensor x, Tensor dy, SymInt[] w_shape, int[] geometry) -> Tensor"
)


def pack(params: Params) -> list[int]:
    """The ops' ``geometry`` argument: stride, padding, dilation and output padding (one value
    per spatial dimension each), then groups and transposed (0 or 1)."""
    stride, padding, dilation, groups, transposed, output_padding = params
    return [*stride, *padding, *dilation, *output_padding, groups, int(transposed)]


def unpack(geometry: Sequence[int]) -> Params:
    """The :data:`Params` of a packed ``geometry`` (see :func:`pack`)."""
    key = tuple(geometry)
    params = _UNPACKED.get(key)
    if params is None:
        n, rest = divmod(len(key) - 2, 4)
        if n < 1 or rest:
            raise InvalidArgumentError(
                "expected 4 values per spatial dimension and 2 more", field="geometry", value=key
            )
        params = (key[:n], key[n : 2 * n], key[2 * n : 3 * n], key[-2], bool(key[-1]))
        params += (key[3 * n : 4 * n],)
        if len(_UNPACKED) < MAX_PLANS:
            _UNPACKED[key] = params
    return params


_UNPACKED: dict[tuple[int, ...], Params] = {}


def _conv_forward_impl(x: torch.Tensor, w: torch.Tensor, geometry: list[int]) -> torch.Tensor:
    """The layer's output: a convolution (or transposed convolution) of x with w."""
    return forward(x, w, unpack(geometry))


def _conv_forward_fake(x: torch.Tensor, w: torch.Tensor, geometry: list[int]) -> torch.Tensor:
    return _empty(x, output_shape(x.shape, w.shape, *unpack(geometry)))


def _conv_backward_data_impl(
    dy: torch.Tensor, w: torch.Tensor, x_shape: list[int], geometry: list[int]
) -> torch.Tensor:
    """The gradient of the layer's input, of shape ``x_shape``, in dy's layout."""
    return backward_data(dy, w, x_shape, unpack(geometry))


def _conv_backward_data_fake(
    dy: torch.Tensor, w: torch.Tensor, x_shape: list[int], geometry: list[int]
) -> torch.Tensor:
    return _empty(dy, x_shape)


def _conv_backward_weights_impl(
    x: torch.Tensor, dy: torch.Tensor, w_shape: list[int], geometry: list[int]
) -> torch.Tensor:
    """The gradient of the weights, of shape ``w_shape``, in x's layout."""
    return backward_weights(x, dy, w_shape, unpack(geometry))


def _conv_backward_weights_fake(
    x: torch.Tensor, dy: torch.Tensor, w_shape: list[int], geometry: list[int]
) -> torch.Tensor:
    return _empty(x, w_shape)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, geometry = inputs
    ctx.save_for_backward(x, w)
    ctx.geometry = geometry


def _backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    geometry = ctx.geometry
    dx = dw = None
    dy = gradient_like(dy, x, w)  # packed once, in x's layout, for both directions
    if ctx.needs_input_grad[0]:
        dx = conv_backward_data(dy, w, list(x.shape), geometry)
    if ctx.needs_input_grad[1]:
        dw = conv_backward_weights(x, dy, list(w.shape), geometry)
    return dx, dw, None


for _name, _impl, _fake in (
    ("conv_forward", _conv_forward_impl, _conv_forward_fake),
    ("conv_backward_data", _conv_backward_data_impl, _conv_backward_data_fake),
    ("conv_backward_weights", _conv_backward_weights_impl, _conv_backward_weights_fake),
):
    # One kernel for every device (CPU, CUDA, ROCm): the bodies pick the backend.
    _LIB.impl(_name, _impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"miocore::{_name}", _fake, lib=_LIB)

#: The ops as callables (through the dispatcher, as ``torch.ops.miocore.*``).
conv_forward = torch.ops.miocore.conv_forward.default
conv_backward_data = torch.ops.miocore.conv_backward_data.default
conv_backward_weights = torch.ops.miocore.conv_backward_weights.default


def _register_autograd() -> None:
    """conv_forward's autograd: torch.library's own kernel for the formula above, behind a
    shortcut for the call that records nothing on plain tensors (a compiled graph's call at
    run time): that one runs the body at once instead of redispatching below autograd, which
    costs a second trip through the dispatcher into Python (~6 µs a call on the CPU)."""
    try:
        from torch._library.autograd import Info, make_autograd_impl
    except ImportError:  # another torch: its public registration, without the shortcut
        torch.library.register_autograd(
            "miocore::conv_forward", _backward, setup_context=_setup_context, lib=_LIB
        )
        return

    recorded = make_autograd_impl(conv_forward, Info(_backward, _setup_context))
    grad_enabled = torch.is_grad_enabled

    def kernel(keyset: Any, x: torch.Tensor, w: torch.Tensor, geometry: list[int]) -> torch.Tensor:
        if not (grad_enabled() and (x.requires_grad or w.requires_grad)) and plain(x, w):
            return forward(x, w, unpack(geometry))
        return recorded(keyset, x, w, geometry)

    _LIB.impl("conv_forward", kernel, "Autograd", with_keyset=True)


_register_autograd()
