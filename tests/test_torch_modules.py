"""miocore.torch's modules against torch.nn on the CPU: outputs and the gradients of the input,
weights and bias, for every module type, both memory layouts and fp32, fp16 and bf16.

The reference is the same torch.nn layer in float64 on the same (rounded) values; tolerances
are per dtype and relative to the largest reference value. Problems are small (a test file run
stays well under a minute); find runs in FAST mode except where a test says otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import miocore  # noqa: E402
import miocore.torch as mt  # noqa: E402

#: Relative tolerance of each dtype, against the largest magnitude of the reference.
TOLERANCE = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
DTYPES = list(TOLERANCE)


@pytest.fixture(autouse=True)
def _fresh_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test finds afresh, in FAST mode (no benchmarking: the tests check numerics)."""
    monkeypatch.setenv("MIOCORE_FIND_MODE", "FAST")
    mt.reset()


def assert_close_to(actual: torch.Tensor, reference: torch.Tensor, dtype: Any, what: str) -> None:
    """``actual`` within ``dtype``'s tolerance of the float64 ``reference``."""
    reference = reference.detach()
    scale = float(reference.abs().max())
    assert scale > 0, f"{what}: the reference is all zeros, the comparison would prove nothing"
    error = float((actual.detach().double() - reference).abs().max())
    assert error <= TOLERANCE[dtype] * scale, f"{what}: max error {error:.3g}, scale {scale:.3g}"


def check_module(
    torch_cls: Any,
    kwargs: dict[str, Any],
    input_shape: tuple[int, ...],
    dtype: Any,
    *,
    channels_last: bool = False,
    seed: int = 0,
) -> torch.Tensor:
    """Build the torch.nn layer and miocore's with the same parameters, run both forward and
    backward on random data, compare output and the three gradients; return miocore's output."""
    gen = torch.Generator().manual_seed(seed)
    reference_layer = torch_cls(**kwargs).double()
    with torch.no_grad():  # values representable in dtype, so both see the same numbers
        for p in reference_layer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(dtype))
    layer = getattr(mt, torch_cls.__name__)(**kwargs).to(dtype)
    layer.load_state_dict(reference_layer.state_dict())
    x_ref = torch.randn(input_shape, generator=gen, dtype=torch.float64).to(dtype).double()
    x = x_ref.to(dtype)
    if channels_last:
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        x = x.contiguous(memory_format=fmt)
    x_ref.requires_grad_(True)
    x.requires_grad_(True)

    y = layer(x)
    y_ref = reference_layer(x_ref)
    assert y.shape == y_ref.shape and y.dtype == dtype
    assert_close_to(y, y_ref, dtype, "output")
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(dtype)
    y.backward(dy)
    y_ref.backward(dy.double())
    assert_close_to(x.grad, x_ref.grad, dtype, "input gradient")
    assert_close_to(layer.weight.grad, reference_layer.weight.grad, dtype, "weight gradient")
    if layer.bias is not None:
        assert_close_to(layer.bias.grad, reference_layer.bias.grad, dtype, "bias gradient")
    return y


CONV_CASES = {
    "plain": {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "padding": 1},
    "strided_dilated": {
        "in_channels": 4,
        "out_channels": 6,
        "kernel_size": 3,
        "stride": 2,
        "dilation": 2,
        "padding": 2,
    },
    "groups_no_bias": {
        "in_channels": 6,
        "out_channels": 4,
        "kernel_size": 3,
        "groups": 2,
        "bias": False,
    },
    "same_even_kernel": {"in_channels": 3, "out_channels": 5, "kernel_size": 4, "padding": "same"},
    "valid": {"in_channels": 3, "out_channels": 5, "kernel_size": 2, "padding": "valid"},
}

TRANSPOSED_CASES = {
    "plain": {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "padding": 1},
    "strided_output_padding": {
        "in_channels": 4,
        "out_channels": 6,
        "kernel_size": 3,
        "stride": 2,
        "padding": 1,
        "output_padding": 1,
    },
    "groups_dilated": {
        "in_channels": 6,
        "out_channels": 4,
        "kernel_size": 2,
        "groups": 2,
        "dilation": 2,
        "bias": False,
    },
}

SHAPES = {1: (2, 6, 9), 2: (2, 6, 7, 6), 3: (2, 6, 4, 5, 4)}


def _input_shape(kwargs: dict[str, Any], spatial: int) -> tuple[int, ...]:
    n, _, *sizes = SHAPES[spatial]
    return (n, kwargs["in_channels"], *sizes)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CONV_CASES))
@pytest.mark.parametrize("torch_cls", [torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d])
def test_conv_matches_torch_nn(torch_cls: Any, case: str, dtype: Any) -> None:
    kwargs = CONV_CASES[case]
    spatial = int(torch_cls.__name__[-2])
    check_module(torch_cls, kwargs, _input_shape(kwargs, spatial), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(TRANSPOSED_CASES))
@pytest.mark.parametrize(
    "torch_cls",
    [torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d],
)
def test_conv_transpose_matches_torch_nn(torch_cls: Any, case: str, dtype: Any) -> None:
    kwargs = TRANSPOSED_CASES[case]
    spatial = int(torch_cls.__name__[-2])
    check_module(torch_cls, kwargs, _input_shape(kwargs, spatial), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("torch_cls", "kwargs"),
    [
        (torch.nn.Conv2d, CONV_CASES["strided_dilated"]),
        (torch.nn.Conv2d, CONV_CASES["groups_no_bias"]),
        (torch.nn.Conv3d, CONV_CASES["plain"]),
        (torch.nn.ConvTranspose2d, TRANSPOSED_CASES["strided_output_padding"]),
        (torch.nn.ConvTranspose3d, TRANSPOSED_CASES["plain"]),
    ],
    ids=["conv2d-strided", "conv2d-groups", "conv3d", "transpose2d", "transpose3d"],
)
def test_channels_last_stays_channels_last(torch_cls: Any, kwargs: dict[str, Any], dtype: Any):
    spatial = int(torch_cls.__name__[-2])
    y = check_module(torch_cls, kwargs, _input_shape(kwargs, spatial), dtype, channels_last=True)
    fmt = torch.channels_last if spatial == 2 else torch.channels_last_3d
    assert y.is_contiguous(memory_format=fmt) and not y.is_contiguous()


def test_channels_last_problem_is_nhwc() -> None:
    """The problem miocore solves has the layout of the tensor: NHWC for channels_last."""
    layer = mt.Conv2d(4, 6, 3)
    x = torch.randn(2, 4, 7, 6).contiguous(memory_format=torch.channels_last)  # y: 2x6x5x4
    layer(x)
    keys = [
        k
        for k in mt.ops._problems
        if k[0] == "forward" and k[2] == "float32" and k[5] == (2, 6, 5, 4) and k[4][-1] == 3
    ]
    assert keys and {k[1] for k in keys} == {"NHWC"}
    assert mt.ops._problems[keys[0]].key.endswith("NHWC-FP32-F")


@pytest.mark.parametrize("arrives", ["channels_last", "contiguous"])
@pytest.mark.parametrize("dims", [2, 3])
def test_a_channel_slice_of_a_gradient_comes_back_in_the_inputs_layout(
    dims: int, arrives: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torch.cat``'s backward hands each input a channel slice of the gradient (a UNet's skip
    connections), channels-last or plain contiguous as the loss made it: the gradient is packed
    once, in the layer input's layout (channels-last here), for both directions, so the input
    gradient comes back channels-last as PyTorch's own convolution gives it, correct against
    float64, instead of in a layout the channels-last layers around it would read across."""
    gen = torch.Generator().manual_seed(3)
    conv_cls = torch.nn.Conv2d if dims == 2 else torch.nn.Conv3d
    reference = conv_cls(5, 6, 3, padding=1).double()
    layer = (mt.Conv2d if dims == 2 else mt.Conv3d)(5, 6, 3, padding=1)
    layer.load_state_dict(reference.state_dict())
    fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
    shape = (2, 5, 6, 7) if dims == 2 else (2, 5, 4, 5, 3)
    seen = []  # the gradient each direction is handed: packed once, the same for both
    for direction in ("backward_data", "backward_weights"):
        real = getattr(mt.ops, direction)

        def spy(*args: Any, _real: Any = real, _dy: int = 0 if direction == "backward_data" else 1):
            seen.append(args[_dy])
            return _real(*args)

        monkeypatch.setattr(mt.ops, direction, spy)
    x_ref = torch.randn(shape, generator=gen, dtype=torch.float64).requires_grad_(True)
    x = x_ref.detach().float().contiguous(memory_format=fmt).requires_grad_(True)
    other = torch.randn((2, 3, *shape[2:]), generator=gen, dtype=torch.float64)
    weight = torch.randn((2, 9, *shape[2:]), generator=gen, dtype=torch.float64)
    for module, inp, cast in ((reference, x_ref, torch.float64), (layer, x, torch.float32)):
        joined = torch.cat([module(inp), other.to(cast).contiguous(memory_format=fmt)], dim=1)
        scale = weight.to(cast)
        if arrives == "channels_last":
            scale = scale.contiguous(memory_format=fmt)
        (joined * scale).sum().backward()
    assert len(seen) == 2 and seen[0] is seen[1] and seen[0].is_contiguous(memory_format=fmt)
    assert x.grad is not None and x_ref.grad is not None
    assert x.grad.is_contiguous(memory_format=fmt) and not x.grad.is_contiguous()
    assert_close_to(x.grad, x_ref.grad, torch.float32, "input gradient")
    assert_close_to(layer.weight.grad, reference.weight.grad, torch.float32, "weight gradient")
    backward_data = [
        k for k in mt.ops._problems if k[0] == "backward_data" and tuple(k[5]) == (2, 6, *shape[2:])
    ]
    assert backward_data and {k[1] for k in backward_data} == {"NHWC" if dims == 2 else "NDHWC"}


def test_unbatched_input_matches_torch_nn() -> None:
    torch.manual_seed(3)
    reference = torch.nn.Conv2d(3, 4, 3, padding=1)
    layer = mt.Conv2d(3, 4, 3, padding=1)
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(3, 6, 5)
    torch.testing.assert_close(layer(x), reference(x), rtol=1e-5, atol=1e-5)


def test_transposed_output_size_picks_output_padding() -> None:
    torch.manual_seed(4)
    reference = torch.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)
    layer = mt.ConvTranspose2d(4, 3, 3, stride=2, padding=1)
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(1, 4, 5, 5)
    y = layer(x, output_size=[10, 10])
    assert y.shape == (1, 3, 10, 10)
    torch.testing.assert_close(y, reference(x, output_size=[10, 10]), rtol=1e-5, atol=1e-5)


def test_default_find_mode_benchmarks_and_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default find mode (DYNAMIC_HYBRID) measures on first sight; the result is right."""
    monkeypatch.delenv("MIOCORE_FIND_MODE")
    mt.reset()
    check_module(torch.nn.Conv2d, CONV_CASES["plain"], (2, 4, 7, 6), torch.float32, seed=5)
    found = list(mt.runtime._solutions.values())
    assert {s.problem.direction.value for s in found} == {
        "forward",
        "backward_data",
        "backward_weights",
    }
    assert all(s.source == "measured" and not s.is_estimate for s in found)


def test_float64_is_refused_naming_the_dtype() -> None:
    layer = mt.Conv2d(2, 2, 3).double()
    with pytest.raises(miocore.MiocoreError, match=r"x\.dtype='torch\.float64'"):
        layer(torch.randn(1, 2, 5, 5, dtype=torch.float64))


def test_eager_calls_skip_the_dispatcher_traced_calls_use_the_op() -> None:
    """Eagerly the autograd function runs the op bodies directly; under a dispatch mode (as
    tracers use) the same layer goes through the custom op; both compute the same."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(6)
    layer = mt.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    eager = layer(x)
    assert "Convolution" in type(eager.grad_fn.next_functions[0][0]).__name__
    with Recorder() as recorder:
        traced = layer(x)
    assert "miocore.conv_forward.default" in recorder.ops
    torch.testing.assert_close(traced, eager, rtol=0, atol=0)


def test_mixed_input_and_weight_types_are_refused() -> None:
    layer = mt.Conv2d(2, 2, 3)  # float32 weights
    with pytest.raises(miocore.InvalidArgumentError, match=r"w\.dtype='torch\.float32'"):
        layer(torch.randn(1, 2, 5, 5, dtype=torch.bfloat16))


def test_converted_model_saves_and_loads_whole(tmp_path: Any) -> None:
    torch.manual_seed(7)
    model = mt.convert(torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.Conv1d(3, 2, 1)))
    path = tmp_path / "model.pt"
    torch.save(model[0], path)
    loaded = torch.load(path, weights_only=False)
    assert type(loaded) is mt.Conv2d
    x = torch.randn(1, 2, 6, 6)
    torch.testing.assert_close(loaded(x), model[0](x), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("layer", "shape", "field"),
    [
        (lambda: mt.Conv2d(2, 3, 5), (1, 2, 4, 4), "input.shape"),  # filter larger than input
        (lambda: mt.Conv2d(2, 3, 3), (1, 4, 6, 6), "w.lengths"),  # 4 channels, weights want 2
    ],
    ids=["too-small", "channels"],
)
def test_bad_shapes_raise_miocore_errors_naming_the_field(
    layer: Any, shape: tuple[int, ...], field: str
) -> None:
    with pytest.raises(miocore.MiocoreError) as info:
        layer()(torch.randn(shape))
    assert info.value.field == field, info.value


def test_meta_tensors_get_shapes_and_layout_from_the_fake_kernel() -> None:
    with torch.device("meta"):
        layer = mt.Conv2d(3, 4, 3, stride=2)
    x = torch.empty(2, 3, 9, 9, device="meta").contiguous(memory_format=torch.channels_last)
    y = layer(x)
    assert y.device.type == "meta" and y.shape == (2, 4, 4, 4)
    assert y.is_contiguous(memory_format=torch.channels_last)


def test_other_devices_are_refused_naming_the_device() -> None:
    with pytest.raises(miocore.InvalidArgumentError, match="device='xpu'"):
        mt.runtime.handle_state(torch.device("xpu"), "exact")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_tensors_reach_miocore_without_copies(dtype: Any) -> None:
    """A packed tensor is passed as is, and its numpy view is its own memory."""
    from miocore.torch.tensors import host_view, packed

    t = torch.randn(2, 3, 4, 5).to(dtype).contiguous(memory_format=torch.channels_last)
    assert packed(t, "NHWC") is t
    view = host_view(t)
    assert view.__array_interface__["data"][0] == t.data_ptr()
    assert view.strides == tuple(s * t.element_size() for s in t.stride())
    assert str(view.dtype) == str(dtype).removeprefix("torch.")
    view[0, 0, 0, 0] = 3.0
    assert float(t[0, 0, 0, 0]) == 3.0


def test_accuracy_policy_and_determinism_reach_find(monkeypatch: pytest.MonkeyPatch) -> None:
    """set_accuracy and torch.use_deterministic_algorithms choose what find may answer with:
    under strict no chosen solver has a lossy note; a change of either finds again."""
    from miocore.find.handle import Handle
    from miocore.solver.numerics import LOSSY_NOTES

    asked: list[tuple[Any, bool]] = []
    real_find = Handle.find_solutions

    def spy(self: Handle, problem: Any, **kwargs: Any) -> Any:
        asked.append((kwargs.get("accuracy"), kwargs.get("deterministic", False)))
        return real_find(self, problem, **kwargs)

    monkeypatch.setattr(Handle, "find_solutions", spy)
    layer = mt.Conv2d(8, 8, 3, padding=1)
    x = torch.randn(2, 8, 12, 12)
    mt.set_accuracy("strict")
    try:
        with torch.no_grad():
            y = layer(x)
        assert asked == [("strict", False)]
        registry = mt.handle("cpu").registry
        for found in mt.runtime._solutions.values():
            assert not registry.get(found.solver).solver.numerical_notes & LOSSY_NOTES
        expected = torch.nn.functional.conv2d(
            x.double(), layer.weight.double(), layer.bias.double(), padding=1
        )
        assert_close_to(y, expected, torch.float32, "output")
        old = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            with torch.no_grad():
                layer(x)
        finally:
            torch.use_deterministic_algorithms(old)
        assert asked[-1] == ("strict", True)
        with pytest.raises(miocore.InvalidArgumentError, match="policy"):
            mt.set_accuracy("loose")
        assert mt.accuracy() == "strict"
    finally:
        mt.set_accuracy(None)
    assert mt.accuracy() is None
