"""miocore's convolutions under ``torch.compile`` on the CPU: the custom ops trace without a
graph break, their fake kernels agree with the real ones (``torch.library.opcheck``), and a
compiled training step computes what eager torch.nn computes."""

from __future__ import annotations

import copy
import shutil

import pytest

torch = pytest.importorskip("torch")

import miocore  # noqa: E402
import miocore.torch as mt  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_FIND_MODE", "FAST")
    mt.reset()
    torch._dynamo.reset()


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3, padding="same"),
        torch.nn.ReLU(),
        torch.nn.Conv2d(6, 6, 3, stride=2, groups=3),
        torch.nn.ConvTranspose2d(6, 4, 2, stride=2),
        torch.nn.Conv2d(4, 2, 1, bias=False),
    )


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_compile_has_no_graph_break(channels_last: bool) -> None:
    model = mt.convert(_model(0))
    x = torch.randn(2, 3, 9, 9)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    # The graph holds miocore's op, four times (one per layer), and no aten convolution.
    graph = explanation.graphs[0]
    targets = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
    assert sum("miocore.conv_forward" in t for t in targets) == 4, targets
    assert not any("conv2d" in t or "convolution" in t for t in targets), targets


def test_compiled_training_step_matches_eager_torch_nn() -> None:
    reference = _model(1)
    model = mt.convert(copy.deepcopy(reference))
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = torch.randn(2, 3, 10, 10, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    y = compiled(x)
    y_ref = reference(x_ref)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    dy = torch.randn_like(y_ref)
    y.backward(dy)
    y_ref.backward(dy)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(
        reference.named_parameters(), model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    ("transposed", "channels_last", "dtype"),
    [
        (False, False, torch.float32),
        (False, True, torch.float32),
        (True, False, torch.bfloat16),
        (True, True, torch.float16),
    ],
    ids=["conv-nchw-fp32", "conv-nhwc-fp32", "transposed-nchw-bf16", "transposed-nhwc-fp16"],
)
def test_opcheck(transposed: bool, channels_last: bool, dtype: torch.dtype) -> None:
    """Schema, fake kernel (shapes and strides), autograd registration: torch's own checks."""
    torch.manual_seed(2)
    x = torch.randn(2, 4, 6, 5, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    if transposed:
        w = torch.randn(4, 3, 3, 3, dtype=dtype)  # (C_in, C_out/groups, Y, X)
        args = (x, w, [2, 1, 1, 1, 1, 1, 1, 0, 1, 1])  # stride, padding, dilation, out pad, g, t
    else:
        w = torch.randn(6, 2, 3, 3, dtype=dtype)  # (K, C/groups, Y, X), groups 2
        args = (x, w, [1, 2, 1, 0, 1, 1, 0, 0, 2, 0])
    x.requires_grad_(True)
    w.requires_grad_(True)
    torch.library.opcheck(torch.ops.miocore.conv_forward.default, args)


def test_a_dispatch_mode_still_sees_the_op_when_nothing_is_recorded() -> None:
    """The autograd kernel's shortcut (run the body at once when no gradient is recorded on
    plain tensors) must not hide the call from what sits below autograd: a dispatch mode."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    with torch.no_grad(), Log():
        y = torch.ops.miocore.conv_forward(x, w, [1, 1, 1, 1, 1, 1, 0, 0, 1, 0])
    assert any("miocore.conv_forward" in name for name in seen), seen
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1))
    with torch.no_grad():  # and without a mode, the shortcut computes the same
        again = torch.ops.miocore.conv_forward(x, w, [1, 1, 1, 1, 1, 1, 0, 0, 1, 0])
    torch.testing.assert_close(again, y)


@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="Inductor's CPU backend needs a C++ compiler",
)
def test_inductor_runs_the_ops_forward_backward_and_without_gradients() -> None:
    """Inductor's generated code calls the ops with their packed geometry (a fallback
    kernel): outputs and input gradients against torch.nn, transposed and grouped layers
    included."""
    torch.manual_seed(4)
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3, stride=2, groups=4, bias=False),
        torch.nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1),
    )
    compiled = torch.compile(mt.convert(copy.deepcopy(reference)), fullgraph=True)
    x = torch.randn(2, 3, 12, 12, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    y, y_ref = compiled(x), reference(x_ref)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    dy = torch.randn_like(y_ref)
    y.backward(dy)
    y_ref.backward(dy)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-5)


def test_a_bad_packed_geometry_is_refused_naming_the_field() -> None:
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    with pytest.raises(miocore.InvalidArgumentError) as info:
        torch.ops.miocore.conv_forward(x, w, [1, 1, 1])
    assert info.value.field == "geometry"
    from miocore.torch import ops

    params = ops.make_params((2, 1), (1, 0), (1, 2), 3, True, (1, 0))
    assert ops.unpack(ops.pack(params)) == params
