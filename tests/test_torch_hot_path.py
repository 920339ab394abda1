"""The front end's per-call path: a call signature seen before runs through its plan, and
everything that changes what a call computes (strides, layout, shapes, a module's arguments,
whether autograd records) is seen, not served stale. Against float64 ``torch.nn.functional``
on random data, on the CPU."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import miocore.torch as mt  # noqa: E402
from miocore.torch import ops  # noqa: E402

TOLERANCE = 2e-5  # float32, relative to the reference's largest magnitude


@pytest.fixture(autouse=True)
def _fresh_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_FIND_MODE", "FAST")
    mt.reset()
    ops._plans.clear()


def _close(actual: torch.Tensor, reference: torch.Tensor, what: str) -> None:
    reference = reference.detach()
    scale = float(reference.abs().max())
    assert scale > 0, f"{what}: an all-zero reference proves nothing"
    error = float((actual.detach().double() - reference.detach()).abs().max())
    assert error <= TOLERANCE * scale, f"{what}: max error {error:.3g} at scale {scale:.3g}"


def _layer(**kwargs: Any) -> Any:
    torch.manual_seed(0)
    return mt.Conv2d(**kwargs)


def _reference(layer: Any, x: torch.Tensor) -> torch.Tensor:
    bias = None if layer.bias is None else layer.bias.double()
    return F.conv2d(
        x.double(), layer.weight.double(), bias, layer.stride, layer.padding, layer.dilation,
        layer.groups,
    )  # fmt: skip


def test_a_repeated_call_runs_through_its_plan_and_stays_right() -> None:
    layer = _layer(in_channels=6, out_channels=5, kernel_size=3, padding=1, bias=False)
    for step in range(3):
        x = torch.randn(2, 6, 7, 7)
        with torch.no_grad():
            y = layer(x)
        _close(y, _reference(layer, x), f"call {step}")
        assert len(ops._plans) == 1  # one signature, planned on the first call, reused after


@pytest.mark.parametrize("channels_last", [False, True])
def test_layout_and_shape_changes_get_plans_of_their_own(channels_last: bool) -> None:
    layer = _layer(in_channels=4, out_channels=8, kernel_size=3, stride=2, bias=True)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    layer = layer.to(memory_format=fmt)
    shapes = [(3, 4, 9, 9), (3, 4, 11, 9), (1, 4, 9, 9), (3, 4, 9, 9)]
    for shape in shapes:
        for memory in (torch.contiguous_format, torch.channels_last):
            x = torch.randn(shape).to(memory_format=memory)
            with torch.no_grad():
                y = layer(x)
            _close(y, _reference(layer, x), f"{shape} {memory}")
            wanted = torch.channels_last if memory == torch.channels_last else None
            if wanted is not None and shape[0] > 1:
                assert y.is_contiguous(memory_format=wanted)
    # Three distinct shapes; the input in the weight's layout is planned, the other layout
    # packs the weight into it on every call and is not.
    assert len(ops._plans) == 3


def test_unpacked_inputs_are_packed_every_call_and_never_planned() -> None:
    layer = _layer(in_channels=3, out_channels=4, kernel_size=3, bias=False)
    base = torch.randn(2, 3, 8, 16)
    x = base[:, :, :, ::2]  # strided: not packed in any layout miocore takes
    for _ in range(2):
        with torch.no_grad():
            y = layer(x)
        _close(y, _reference(layer, x), "strided input")
    assert not ops._plans


def test_outputs_with_length_one_dimensions_are_written_where_torch_reads() -> None:
    # A 1x1 output in channels-last: torch's strides of length-1 dimensions differ from the
    # packed ones miocore's descriptors carry, so the plan writes through a view.
    layer = _layer(in_channels=4, out_channels=6, kernel_size=3, bias=True)
    layer = layer.to(memory_format=torch.channels_last)
    for _ in range(3):
        x = torch.randn(2, 4, 3, 3).to(memory_format=torch.channels_last)
        with torch.no_grad():
            y = layer(x)
        assert y.shape == (2, 6, 1, 1)
        _close(y, _reference(layer, x), "1x1 output")


def test_inputs_with_torchs_strides_on_length_one_dimensions_are_planned() -> None:
    # torch keeps (C, 1, 1, 1) for a channels-last 1x1 filter made contiguous, and a pooled
    # (N, C, 1, 1) map has such strides too (a squeeze-and-excitation block's 1x1 layers):
    # the same memory as the packed layout, so each direction is planned once and its calls
    # stay right through the plan.
    layer = _layer(in_channels=8, out_channels=6, kernel_size=1, bias=True)
    layer = layer.to(memory_format=torch.channels_last)
    plain = torch.empty_strided((6, 8, 1, 1), (8, 1, 1, 1))
    layer.weight.data = plain.copy_(layer.weight.detach())
    assert layer.weight.stride() == (8, 1, 1, 1)
    for shape in ((2, 8, 5, 5), (3, 8, 1, 1)):
        for step in range(3):
            x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
            xg = x.clone().requires_grad_()
            y = layer(xg)
            _close(y, _reference(layer, x), f"{shape} call {step}")
            g = torch.randn_like(y)
            dx, dw = torch.autograd.grad(y, [xg, layer.weight], g)
            xr = x.double().requires_grad_()
            wr = layer.weight.detach().double().requires_grad_()
            ref = F.conv2d(xr, wr, layer.bias.detach().double())
            rdx, rdw = torch.autograd.grad(ref, [xr, wr], g.double())
            _close(dx, rdx, f"{shape} input gradient {step}")
            _close(dw, rdw, f"{shape} weight gradient {step}")
    # two shapes, three directions each: planned on first sight, reused after
    assert len(ops._plans) == 6
    restrided = {plan.key[0] for plan in ops._plans.values() if plan.inputs is not None}
    assert {"forward", "backward_data"} <= restrided  # the filter's view


def test_changing_a_modules_arguments_is_seen() -> None:
    layer = _layer(in_channels=4, out_channels=4, kernel_size=3, padding=1, bias=False)
    x = torch.randn(2, 4, 8, 8)
    with torch.no_grad():
        _close(layer(x), _reference(layer, x), "before")
        layer.stride, layer.padding = (2, 2), (0, 0)
        y = layer(x)
    assert y.shape == (2, 4, 3, 3)
    _close(y, _reference(layer, x), "after the stride and padding changed")


def test_functional_calls_with_lists_are_not_memoized_and_stay_right() -> None:
    torch.manual_seed(1)
    x, w = torch.randn(2, 3, 6, 6), torch.randn(5, 3, 3, 3)
    for padding in ([1, 1], [0, 1], "same", "valid"):
        y = mt.convolution(x, w, None, [1, 1], padding, [1, 1], 1)
        pads = padding if isinstance(padding, str) else tuple(padding)
        _close(y, F.conv2d(x.double(), w.double(), None, 1, pads, 1, 1), f"padding {padding}")


def test_gradients_are_recorded_exactly_when_autograd_needs_them() -> None:
    layer = _layer(in_channels=3, out_channels=4, kernel_size=3, padding=1, bias=False)
    x = torch.randn(2, 3, 5, 5)
    assert layer(x).grad_fn is not None  # the weight requires grad
    with torch.no_grad():
        assert layer(x).grad_fn is None
    layer.weight.requires_grad_(False)
    assert layer(x).grad_fn is None
    xg = x.clone().requires_grad_()
    y = layer(xg)
    assert y.grad_fn is not None
    y.square().sum().backward()
    xr = x.double().requires_grad_()
    _reference_out = F.conv2d(xr, layer.weight.double(), None, 1, 1)
    _reference_out.square().sum().backward()
    _close(xg.grad, xr.grad, "input gradient through the planned path")
