"""Where a network's time and error come from, layer by layer: the diagnosis half of
``gpu_models.py`` (which imports these).

* :func:`backward_ms`: each convolution's whole backward timed alone, both sides;
* :func:`top_kernels`, :func:`profile_call`: a training step's or a call's device time per
  PyTorch operator and per kernel, and its host operators, under the profiler;
* :func:`same_input_weight_grads`: a layer's weight gradient on the very x and dy it saw in the
  network, miocore's and cuDNN's, each against float64 (no upstream drift).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import torch
from gpu_timing import queued_device_ms
from torch import nn

#: ~10 ms: longer than queueing a few autograd calls through the front end.
BACKWARD_SLEEP_CYCLES = 20_000_000


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def backward_ms(
    layers: list[tuple[nn.Module, torch.Tensor]], x: torch.Tensor, repeat: int = 5
) -> list[float]:
    """Device time of each convolution's whole backward (data and weights, bias included),
    per layer, queued as in :func:`conv_only_ms` behind a sleep of ~10 ms (an autograd call
    costs far more host time than a forward). The layer fed by the model's input gets no data
    gradient, as in a training step. (Both gradients in one call: a custom autograd function
    sees which inputs require a gradient, not which ones one ``autograd.grad`` call asks for.)"""
    per_layer = []
    for mod, inp in layers:
        need_dx = inp.data_ptr() != x.data_ptr()
        i = inp.detach().requires_grad_(need_dx)
        with torch.enable_grad():
            out = mod(i)
        g = torch.randn_like(out)
        wanted = ([i] if need_dx else []) + [p for p in (mod.weight, mod.bias) if p is not None]
        per_layer.append(
            queued_device_ms(
                lambda o=out, w=wanted, g=g: torch.autograd.grad(o, w, g, retain_graph=True),
                repeat=repeat,
                sleep_cycles=BACKWARD_SLEEP_CYCLES,
            )
        )
    return per_layer


def profiled(
    fn: Any, model: nn.Module, *, train: bool, host_ops: bool = False, shapes: bool = False
) -> tuple[Any, float]:
    """One call of ``fn`` under torch.profiler after a warm-up call, the model in training
    mode (gradients recorded) or not (no grad): the profile (kernels, and host operators with
    ``host_ops``, their input shapes with ``shapes``) and the call's host seconds."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA]
    if host_ops:
        activities.insert(0, ProfilerActivity.CPU)
    mode = model.training
    model.train(train)
    context = contextlib.nullcontext() if train else torch.no_grad()
    with context:
        fn()
        torch.cuda.synchronize()
        with profile(activities=activities, record_shapes=shapes) as prof:
            start = time.perf_counter()
            fn()
            host = time.perf_counter() - start
            torch.cuda.synchronize()
    model.train(mode)
    return prof, host


def top_kernels(
    fn: Any, model: nn.Module, *, train: bool = True
) -> list[tuple[str, str, float, int]]:
    """Where one call of ``fn`` (training, or inference without ``train``) spends device
    time, by PyTorch operator and input
    shapes: (operator, shapes cut to 120 characters, ms, calls) for every operator whose
    kernels take over 10 µs, and a last row for the kernels no operator launched (those a
    library launched through the driver: miocore's solvers)."""
    prof, _ = profiled(fn, model, train=train, host_ops=True, shapes=True)
    events = prof.key_averages(group_by_input_shape=True)
    kernels = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA")
    ops = [
        (e.key, str(e.input_shapes)[:120], e.self_device_time_total / 1e3, e.count)
        for e in events
        if e.device_type.name == "CPU" and e.self_device_time_total > 0
    ]
    attributed = sum(t for _, _, t, _ in ops)
    rows = [(k, sh, round(t, 4), c) for k, sh, t, c in sorted(ops, key=lambda r: -r[2]) if t > 0.01]
    return [*rows, ("(no operator)", "", round(kernels / 1e3 - attributed, 4), 0)]


def profile_call(fn: Any, model: nn.Module, *, train: bool) -> dict[str, Any]:
    """One call of ``fn`` under the profiler: its 15 kernels with the most device time (name
    cut to 90 characters, ms, launches), its 10 host operators with the most self host time
    (ms, calls), and the totals (device ms of every kernel, host ms of the call)."""
    prof, host = profiled(fn, model, train=train, host_ops=True)
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type.name == "CUDA"]
    ops = [e for e in events if e.device_type.name == "CPU"]
    return {
        "device_ms": round(sum(e.self_device_time_total for e in kernels) / 1e3, 4),
        "host_ms": round(host * 1e3, 3),
        "kernels": [
            (e.key[:90], round(e.self_device_time_total / 1e3, 4), e.count)
            for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:15]
        ],
        "host_ops": [
            (e.key[:90], round(e.self_cpu_time_total / 1e3, 4), e.count)
            for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[:10]
        ],
    }


class _Capture(torch.autograd.Function):
    """Identity that keeps the gradient flowing through it (a layer's dy). Its output is a copy,
    so an in-place activation after the layer (EfficientNet's SiLU) may modify it."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, slot: list[torch.Tensor]) -> torch.Tensor:
        ctx.slot = slot
        return t.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.slot.append(g.detach().clone())
        return g, None


def same_input_weight_grads(
    model: nn.Module,
    x: torch.Tensor,
    layer_names: list[str],
    loss_of: Callable[[torch.Tensor], torch.Tensor],
) -> list[tuple[str, float, float]]:
    """Each named layer's weight gradient computed from the very x and dy it saw in one
    training pass of ``model`` (miocore's, the loss ``loss_of`` of its output), by miocore
    and by PyTorch's cuDNN call, each
    against float64 on those same tensors: (name, miocore's error, cuDNN's error).

    A whole network's check compares each side with an fp32 copy, so it also measures how far
    each side's earlier layers drifted (they ran different algorithms); this measures the
    layer alone, without drift."""
    modules = dict(model.named_modules())
    seen: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    handles = []
    for name in layer_names:
        xs: list[torch.Tensor] = []
        dys: list[torch.Tensor] = []
        seen[name] = (xs, dys)

        def hook(mod: nn.Module, args: Any, out: torch.Tensor, xs=xs, dys=dys) -> torch.Tensor:
            xs.append(args[0].detach().clone())
            return _Capture.apply(out, dys)

        handles.append(modules[name].register_forward_hook(hook))
    try:
        model.train()
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        loss_of(model(x)).backward()
    finally:
        for h in handles:
            h.remove()
    out = []
    for name in layer_names:
        mod = modules[name]
        (xs, dys) = seen[name]
        if len(xs) != 1 or len(dys) != 1:
            continue  # a layer called more or less than once: not compared
        lx, dy = xs[0], dys[0]

        def reference(
            a: torch.Tensor, g: torch.Tensor, w: torch.Tensor, m: nn.Module = mod
        ) -> torch.Tensor:
            return torch.ops.aten.convolution_backward(
                g,
                a,
                w,
                None,
                list(m.stride),
                list(m.padding),
                list(m.dilation),
                m.transposed,  # a ConvTranspose layer's dy and x swap roles
                list(m.output_padding) if m.transposed else [0] * (a.dim() - 2),
                m.groups,
                [False, True, False],
            )[1]

        exact = reference(lx.double(), dy.double(), mod.weight.detach().double())
        vendor = reference(lx, dy, mod.weight.detach())
        weight = mod.weight.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            y = torch.func.functional_call(mod, {"weight": weight}, (lx,))
            (ours,) = torch.autograd.grad(y, [weight], dy)
        out.append((name, rel(ours, exact), rel(vendor, exact)))
    return out
