"""miocore.torch on a GPU (CUDA, or ROCm through the HIP backend): modules against a float64
reference on the device, the math mode following PyTorch, one handle per stream, CUDA graph
capture and torch.compile with inductor. Skipped without a GPU.

On the GPU machine: ``python -m pytest -q -p no:cacheprovider -m gpu tests/test_torch_gpu.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import miocore.torch as mt  # noqa: E402

pytestmark = pytest.mark.gpu

#: Relative tolerance against the float64 reference's largest magnitude ("tf32": fp32 inputs
#: rounded to 10 mantissa bits, as cuDNN does by default).
TOLERANCE = {"float32": 2e-5, "tf32": 4e-3, "float16": 4e-3, "bfloat16": 3e-2}


@pytest.fixture(autouse=True)
def _gpu() -> Any:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA or ROCm device")
    mt.reset()
    mt.set_math_mode(None)
    yield
    mt.set_math_mode(None)


def _close(actual: torch.Tensor, reference: torch.Tensor, kind: str, what: str) -> None:
    reference = reference.detach().double()
    scale = float(reference.abs().max())
    assert scale > 0, what
    error = float((actual.detach().double() - reference).abs().max())
    assert error <= TOLERANCE[kind] * scale, f"{what}: max error {error:.3g}, scale {scale:.3g}"


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32),
        torch.nn.Conv2d(32, 64, 1),
        torch.nn.ConvTranspose2d(64, 16, 2, stride=2),
    )


class _MaskedRelu(torch.nn.Module):
    """The reference's ReLU, passing what the model's ReLU passed: where a pre-activation is
    within rounding of zero the two would otherwise disagree, and the input gradient there
    would differ by a whole upstream gradient, which is no error of any convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.mask: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.mask is not None, "the model runs first"
        return x * self.mask.to(x.dtype)


def _share_relu_masks(model: torch.nn.Sequential, reference: torch.nn.Sequential) -> None:
    """Each ReLU of ``reference`` (float64) takes its mask from the same ReLU of ``model``."""
    for index, layer in enumerate(model):
        if isinstance(layer, torch.nn.ReLU):
            masked = _MaskedRelu()
            reference[index] = masked

            def keep(_: Any, __: Any, out: torch.Tensor, masked: _MaskedRelu = masked) -> None:
                masked.mask = (out > 0).detach()

            layer.register_forward_hook(keep)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize(
    ("dtype", "kind"),
    [
        (torch.float32, "float32"),
        (torch.float32, "tf32"),
        (torch.float16, "float16"),
        (torch.bfloat16, "bfloat16"),
    ],
    ids=["fp32", "tf32", "fp16", "bf16"],
)
def test_training_step_matches_float64(dtype: Any, kind: str, channels_last: bool) -> None:
    mt.set_math_mode("tf32" if kind == "tf32" else "exact")
    reference = _model(0).cuda()
    with torch.no_grad():  # values representable in dtype, so both see the same numbers
        for p in reference.parameters():
            p.copy_(p.to(dtype))
    model = mt.convert(copy.deepcopy(reference)).to(dtype)
    reference = reference.double()
    _share_relu_masks(model, reference)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x = torch.randn(4, 16, 20, 18, device="cuda").to(dtype).contiguous(memory_format=fmt)
    x_ref = x.detach().double().requires_grad_(True)
    x.requires_grad_(True)
    y, y_ref = model(x), reference(x_ref)
    assert y.dtype == dtype and y.is_contiguous(memory_format=fmt)
    _close(y, y_ref, kind, "output")
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy.double())
    _close(x.grad, x_ref.grad, kind, "input gradient")
    for (name, p), (_, q) in zip(
        reference.named_parameters(), model.named_parameters(), strict=True
    ):
        _close(q.grad, p.grad, kind, f"{name} gradient")
    backend = "hip" if torch.version.hip else "cuda"
    assert mt.handle("cuda").backend.name == backend


def test_math_mode_follows_pytorch_unless_set() -> None:
    device = torch.device("cuda")
    old = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        conv = getattr(torch.backends.cudnn, "conv", None)
        if conv is not None and getattr(conv, "fp32_precision", "none") == "ieee":
            pytest.skip("torch.backends.cudnn.conv.fp32_precision is set to 'ieee'")
        assert mt.math_mode(device) == "tf32"
        assert mt.handle("cuda").context.math_mode == "tf32"
        torch.backends.cudnn.allow_tf32 = False
        assert mt.math_mode(device) == "exact"
        mt.set_math_mode("tf32")
        assert mt.math_mode(device) == "tf32"
        assert mt.math_mode(torch.device("cpu")) == "tf32"
    finally:
        torch.backends.cudnn.allow_tf32 = old


def test_one_handle_per_stream_shared_by_modules() -> None:
    mt.set_math_mode("exact")
    side = torch.cuda.Stream()
    default = mt.handle("cuda")
    with torch.cuda.stream(side):
        on_side = mt.handle("cuda")
    assert on_side is not default
    assert mt.handle("cuda") is default
    assert on_side.backend.stream_handle == side.cuda_stream
    # Two layers of one shape on the side stream share the handle and the solution.
    a, b = mt.Conv2d(8, 8, 3).cuda(), mt.Conv2d(8, 8, 3).cuda()
    x = torch.randn(2, 8, 12, 12, device="cuda")
    with torch.cuda.stream(side):
        ya, yb = a(x), b(x)
    side.synchronize()
    for layer, y in ((a, ya), (b, yb)):
        expected = torch.nn.functional.conv2d(
            x.double(), layer.weight.double(), layer.bias.double()
        )
        _close(y, expected, "float32", "output")
    assert len(mt.runtime._solutions) == 1


def test_cuda_graph_capture_replays_miocore_convolutions() -> None:
    mt.set_math_mode("exact")
    reference = _model(1).cuda()
    model = mt.convert(copy.deepcopy(reference)).eval()
    reference = reference.double()
    static_x = torch.randn(2, 16, 16, 16, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():  # warm up where the graph is captured
        mt.prepare(model, static_x, progress=False)
        for _ in range(2):
            model(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream), torch.no_grad():
        static_y = model(static_x)
    for seed in (2, 3):
        torch.manual_seed(seed)
        fresh = torch.randn_like(static_x)
        static_x.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            expected = reference(fresh.double())
        _close(static_y, expected, "float32", f"replay {seed}")


def test_torch_compile_inductor_without_graph_breaks() -> None:
    mt.set_math_mode("exact")
    torch._dynamo.reset()
    reference = _model(4).cuda()
    model = mt.convert(copy.deepcopy(reference))
    x = torch.randn(2, 16, 16, 16, device="cuda")
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(model, fullgraph=True)
    _close(compiled(x), reference.double()(x.double()), "float32", "compiled output")


def test_eager_host_cost_per_call() -> None:
    """Host time of one eager call of a found layer, against its device time and F.conv2d's
    (printed; run with -s to see it). Bound: the front end must not starve the GPU by more
    than a generous 150 µs per call on a tiny problem. Where the device itself takes longer
    (a GPU shared with other test processes), the loop waits on the device's queue, not on
    the host, and the bound is the device time."""
    import time

    mt.set_math_mode("exact")
    layer = mt.Conv2d(16, 16, 3, padding=1).cuda()
    x = torch.randn(8, 16, 14, 14, device="cuda")
    with torch.no_grad():
        for _ in range(20):  # find, prepare, warm
            layer(x)
        torch.cuda.synchronize()
        calls = 500
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin = time.perf_counter()
        start.record()
        for _ in range(calls):
            layer(x)
        end.record()
        host_us = (time.perf_counter() - begin) / calls * 1e6
        torch.cuda.synchronize()
        device_us = start.elapsed_time(end) / calls * 1e3
        begin = time.perf_counter()
        for _ in range(calls):
            torch.nn.functional.conv2d(x, layer.weight, layer.bias, padding=1)
        torch_us = (time.perf_counter() - begin) / calls * 1e6
        torch.cuda.synchronize()
    solver = next(iter(mt.runtime._solutions.values())).solver
    print(
        f"\nmiocore.torch Conv2d ({solver}): host {host_us:.1f} us/call, device"
        f" {device_us:.1f} us/call; F.conv2d host {torch_us:.1f} us/call"
    )
    bound = max(150.0, 1.25 * device_us)
    assert host_us < bound, f"{host_us:.1f} us of host time per call (device {device_us:.1f})"


def test_cuda_graph_capture_on_torch_default_capture_stream() -> None:
    """PyTorch's own recipe: warm up on a side stream, capture without naming a stream, so the
    capture stream's handle is made and its invokers built during the capture."""
    mt.set_math_mode("exact")
    reference = _model(5).cuda()
    model = mt.convert(copy.deepcopy(reference)).eval()
    reference = reference.double()
    static_x = torch.randn(2, 16, 16, 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_y = model(static_x)
    fresh = torch.randn_like(static_x)
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        _close(static_y, reference(fresh.double()), "float32", "replay")


def test_torch_compile_reduce_overhead_training_step() -> None:
    """torch.compile's CUDA graphs (cudagraph trees) record miocore's ops, forward and
    backward."""
    mt.set_math_mode("exact")
    torch._dynamo.reset()
    reference = _model(6).cuda()
    model = mt.convert(copy.deepcopy(reference))
    compiled = torch.compile(model, mode="reduce-overhead")
    reference = reference.double()
    for step in range(3):  # warm-up, record, replay
        torch.manual_seed(10 + step)
        x = torch.randn(2, 16, 16, 16, device="cuda", requires_grad=True)
        y = compiled(x)
        dy = torch.randn_like(y)
        y.backward(dy)
        x_ref = x.detach().double().requires_grad_(True)
        y_ref = reference(x_ref)
        y_ref.backward(dy.double())
        _close(y, y_ref, "float32", f"step {step} output")
        _close(x.grad, x_ref.grad, "float32", f"step {step} input gradient")
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)


def test_reduce_overhead_warm_up_may_grow_the_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared workspace grown during torch.compile(mode="reduce-overhead")'s warm-up lives
    in a pool of its own, not in the CUDA-graph pool (where a live allocation that is not an
    output is refused): a solver that needs a workspace, found first inside the compiled run."""
    monkeypatch.setenv("MIOCORE_FIND_MODE", "NORMAL")
    monkeypatch.setenv("MIOCORE_FIND_ONLY_SOLVER", "gemm.gpu_im2col")  # needs a workspace
    mt.reset()
    mt.set_math_mode("exact")
    torch._dynamo.reset()
    torch.manual_seed(7)
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.Conv2d(32, 16, 3, padding=1)
    )
    reference = reference.cuda().eval()
    model = mt.convert(copy.deepcopy(reference)).eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    reference = reference.double()
    with torch.no_grad():
        for step in range(3):  # warm-up (finds and grows the workspace), record, replay
            torch.manual_seed(20 + step)
            x = torch.randn(2, 16, 16, 16, device="cuda")
            _close(compiled(x).clone(), reference(x.double()), "float32", f"step {step}")
    states = list(mt.runtime._handles.values())
    assert any(s.workspace is not None and s.workspace.numel() > 0 for s in states)
    assert {s.solver for s in mt.runtime._solutions.values()} == {"gemm.gpu_im2col"}
