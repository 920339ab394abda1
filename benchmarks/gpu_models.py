"""Real networks through miocore on a GPU against the same networks on cuDNN.

For each model (torchvision ResNet-50, EfficientNet-B0, ConvNeXt-T, MobileNetV3-Large, and a
small 4-level UNet of 3x3 convolutions with transposed-convolution upsampling), precision (fp16,
bf16, fp32 with TF32 as PyTorch's defaults do) and mode (eager, ``torch.compile``,
``torch.compile(mode="reduce-overhead")`` as ``compile_ro``, a captured CUDA graph): the model
converted with ``miocore.torch.convert`` against a copy left on ``torch.nn`` with
``torch.backends.cudnn.benchmark = True``, both channels-last, timed with CUDA events (median of
``--iters`` after warm-up) for inference and for one training step (forward, cross-entropy or
mean-square loss, backward, SGD step). Also: the first-find time of ``miocore.torch.prepare``
(forward and backward problems), and correctness of the outputs and of the convolution weight
gradients against the cuDNN copy (relative error of the whole tensor, per precision), the
conv-only device time of one inference (each convolution of the model timed alone on its own
input behind a queued sleep, so host time is not counted, summed over the model's layers; the
five forward layers miocore loses most on, with their solvers), the summed kernel time of one
inference and one training step (torch.profiler: what the step would cost were the host never
late) and which solvers the finds chose. In graph mode the training step is
``torch.cuda.make_graphed_callables`` of the model (forward and backward captured). One JSON
line per (model, precision, mode) as it goes. Run it once as is (every plugin, cuDNN's engines
included) and once with ``MIOCORE_DISABLE_PLUGINS=cudnn`` (miocore's own kernels); ``--db``
keeps the finds for a later call (``--modes compile graph``).

    python benchmarks/gpu_models.py --models resnet50 unet --dtypes float16 --out models.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import miocore.torch as mt

sys.path.insert(0, str(Path(__file__).parent))
from gpu_model_diagnosis import (
    backward_ms,
    profile_call,
    profiled,
    rel,
    same_input_weight_grads,
    top_kernels,
)
from gpu_timing import device_ms, queued_device_ms

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
#: Relative error (norm of the difference / norm of cuDNN's) accepted per precision: the two
#: sides pick different algorithms and sum in different orders.
TOLERANCE = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 2e-2}


class SmallUNet(nn.Module):
    """A 4-level UNet: two 3x3 convolutions per level, max-pool down, transposed conv up."""

    def __init__(self, channels: int = 3, width: int = 32, classes: int = 2) -> None:
        super().__init__()
        widths = [width * 2**i for i in range(4)]

        def block(cin: int, cout: int) -> nn.Module:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, padding=1),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
                nn.Conv2d(cout, cout, 3, padding=1),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            )

        self.down = nn.ModuleList()
        cin = channels
        for w in widths:
            self.down.append(block(cin, w))
            cin = w
        self.bottom = block(widths[-1], widths[-1] * 2)
        self.up = nn.ModuleList()
        self.dec = nn.ModuleList()
        cin = widths[-1] * 2
        for w in reversed(widths):
            self.up.append(nn.ConvTranspose2d(cin, w, 2, stride=2))
            self.dec.append(block(2 * w, w))
            cin = w
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips), strict=True):
            x = dec(torch.cat([up(x), skip], dim=1))
        return self.head(x)


def build(name: str) -> tuple[nn.Module, tuple[int, ...]]:
    """The model (random weights) and its input shape."""
    if name == "unet":
        return SmallUNet(), (8, 3, 256, 256)
    import torchvision

    return getattr(torchvision.models, name)(), (32, 3, 224, 224)


def conv_inputs(model: nn.Module, x: torch.Tensor) -> list[tuple[nn.Module, torch.Tensor]]:
    """Every convolution of one inference with the input it was called on."""
    seen: list[tuple[nn.Module, torch.Tensor]] = []
    hooks = [
        m.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0].detach())))
        for m in model.modules()
        if isinstance(m, nn.modules.conv._ConvNd)
    ]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return seen


def conv_only_ms(layers: list[tuple[nn.Module, torch.Tensor]], repeat: int = 5) -> list[float]:
    """Device time of the model's convolutions alone: each layer called ``repeat`` times back
    to back behind a queued sleep (so every launch is queued before the first runs, and host
    time is not counted): each layer's per-call median, in the model's order."""
    per_layer = []
    with torch.no_grad():
        for mod, inp in layers:
            mod(inp)
            per_layer.append(queued_device_ms(lambda m=mod, i=inp: m(i), repeat=repeat))
    return per_layer


def forward_solver(mod: nn.Module, inp: torch.Tensor) -> str:
    """The solver the front end runs for this layer's forward (found already)."""
    from miocore.torch import ops, runtime

    wanted = ("forward", inp.shape, mod.weight.shape, tuple(mod.stride), mod.groups)
    for sig, plan in ops._plans.items():
        if (sig[0], sig[2], sig[4], sig[1][0], sig[1][3]) == wanted:
            state = runtime.handle_state(inp.device, runtime.math_mode(inp.device))
            run = state.runs.get(plan.key)
            return run.solver if run is not None else "?"
    return "?"


def kernel_ms(fn: Any, *, train: bool, model: nn.Module) -> float:
    """The summed device time of the kernels one call of ``fn`` runs (torch.profiler), the
    model in training mode or not: the call's cost were the host never late."""
    prof, _ = profiled(fn, model, train=train)
    return sum(e.self_device_time_total for e in prof.key_averages()) / 1e3


def chosen_solvers(before: set[Any]) -> dict[str, int]:
    """How many of the problems found since ``before`` (the front end's found keys then) each
    solver won (every direction)."""
    from miocore.torch import runtime

    counts: dict[str, int] = {}
    for key, solution in runtime._solutions.items():
        if key not in before:
            counts[solution.solver] = counts.get(solution.solver, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def layer_solvers(module: nn.Module, before: set[Any]) -> dict[str, str]:
    """The solver each direction of ``module``'s convolution runs (problems found since
    ``before`` whose weight shape and groups are the module's; a shape two layers share shows
    the solver of both)."""
    from miocore.torch import runtime

    shape = tuple(module.weight.shape)
    out = {}
    for key, solution in runtime._solutions.items():
        if key in before:
            continue
        direction, _layout, _dtype, _x, w, _y, params = key[2]
        if tuple(w) == shape and params[3] == module.groups:
            out[direction] = solution.solver
    return out


def loss_of(out: torch.Tensor) -> torch.Tensor:
    # The output weighted by a fixed random tensor: a gradient that batch norm's backward does
    # not cancel (a plain sum sends the same gradient to every sample and position, which
    # batch norm removes, leaving rounding noise in every earlier layer's weight gradient).
    # Made once per shape: a host-to-device copy per step would stall the timed step.
    key = (tuple(out.shape), out.device)
    weights = _LOSS_WEIGHTS.get(key)
    if weights is None:
        gen = torch.Generator().manual_seed(1)
        weights = torch.randn(out.shape, generator=gen).to(out.device)
        _LOSS_WEIGHTS[key] = weights
    return (out.float() * weights).sum() / out.shape[0]


_LOSS_WEIGHTS: dict[tuple[Any, ...], torch.Tensor] = {}


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    loss_of(model(x)).backward()
    opt.step()


def graphed(fn: Any) -> Any:
    """``fn`` captured once in a CUDA graph (warmed up on a side stream first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def run_one(name: str, dtype_name: str, modes: list[str], iters: int) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    dtype = DTYPES[dtype_name]
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default for fp32 convolutions
    torch.backends.cuda.matmul.allow_tf32 = False
    model, shape = build(name)
    ref = model.to("cuda", dtype=dtype, memory_format=torch.channels_last)
    mio = mt.convert(copy.deepcopy(ref))
    x = torch.randn(shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    row: dict[str, Any] = {"model": name, "dtype": dtype_name}
    from miocore.torch import runtime

    found_before = set(runtime._solutions)
    start = time.perf_counter()
    mt.prepare(mio, x, backward=True, progress=False)
    torch.cuda.synchronize()
    row["first_find_s"] = time.perf_counter() - start
    # Correctness: eval outputs, then one backward from equal weights (train mode).
    ref.eval(), mio.eval()
    with torch.no_grad():
        row["output_rel_err"] = rel(mio(x), ref(x))
    # Weight gradients: both sides against an fp32 copy on cuDNN without TF32 (the closest to
    # exact at hand); miocore is correct within the precision's tolerance or within twice
    # cuDNN's own error on the same layer (deep layers of a low precision drift on both).
    exact = copy.deepcopy(ref).float()
    # Train mode draws random numbers (ConvNeXt's stochastic depth drops whole samples): the
    # same seed before each pass, or the three gradients differ by which samples were dropped.
    ref.train(), mio.train(), exact.train()
    torch.backends.cudnn.allow_tf32 = False
    exact.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    loss_of(exact(x.float())).backward()
    torch.backends.cudnn.allow_tf32 = True
    for m in (ref, mio):
        m.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        loss_of(m(x)).backward()
    named = [
        (name, rel(b.weight.grad, e.weight.grad), rel(a.weight.grad, e.weight.grad))
        for (name, a), b, e in zip(ref.named_modules(), mio.modules(), exact.modules(), strict=True)
        if isinstance(a, nn.modules.conv._ConvNd) and a.weight.grad is not None
    ]
    del exact
    tol = TOLERANCE[dtype_name]
    bad = [(n, m, c) for n, m, c in named if m > max(tol, 2 * c)]
    row["weight_grad_rel_err_max"] = max(m for _, m, _ in named)
    row["cudnn_weight_grad_rel_err_max"] = max(c for _, _, c in named)
    worst = sorted(named, key=lambda t: -t[1] / max(t[2], 1e-12))[:3]
    modules = dict(mio.named_modules())
    row["worst_weight_grads"] = [
        (n, m, c, layer_solvers(modules[n], found_before)) for n, m, c in worst
    ]
    # The layers the network check flags (and the three worst), measured on equal inputs.
    suspects = sorted({n for n, _, _ in bad} | {n for n, _, _ in worst})
    alone = same_input_weight_grads(mio, x, suspects, loss_of)
    row["same_input_weight_grads"] = alone
    bad_alone = [(n, m, c) for n, m, c in alone if m > max(tol, 2 * c)]
    row["network_check_flags"] = [n for n, _, _ in bad]
    row["correct"] = row["output_rel_err"] < tol and not bad_alone
    row["solvers"] = chosen_solvers(found_before)
    ref.eval(), mio.eval()
    cudnn_layers = conv_only_ms(conv_inputs(ref, x))
    mio_inputs = conv_inputs(mio, x)
    mio_layers = conv_only_ms(mio_inputs)
    row["cudnn_conv_only_ms"] = sum(cudnn_layers)
    row["miocore_conv_only_ms"] = sum(mio_layers)
    row["conv_only_ratio"] = row["cudnn_conv_only_ms"] / row["miocore_conv_only_ms"]
    names = [n for n, m in mio.named_modules() if isinstance(m, nn.modules.conv._ConvNd)]
    losses = sorted(
        zip(names, mio_inputs, cudnn_layers, mio_layers, strict=False),
        key=lambda t: t[2] - t[3],
    )[:5]  # the forward layers miocore loses most device time on
    row["worst_forward_layers"] = [
        {
            "layer": name,
            "x": list(inp.shape),
            "w": list(mod.weight.shape),
            "stride": list(mod.stride),
            "groups": mod.groups,
            "solver": forward_solver(mod, inp),
            "cudnn_us": round(c * 1e3, 1),
            "miocore_us": round(m * 1e3, 1),
        }
        for name, (mod, inp), c, m in losses
    ]
    # The same per layer for the backward: where a training step's kernel time goes.
    cudnn_back = backward_ms(conv_inputs(ref, x), x)
    mio_back = backward_ms(mio_inputs, x)
    row["cudnn_backward_ms"] = round(sum(cudnn_back), 4)
    row["miocore_backward_ms"] = round(sum(mio_back), 4)
    back_losses = sorted(
        zip(names, mio_inputs, cudnn_back, mio_back, strict=False), key=lambda t: t[2] - t[3]
    )[:5]
    row["worst_backward_layers"] = [
        {
            "layer": name,
            "w": list(mod.weight.shape),
            "stride": list(mod.stride),
            "groups": mod.groups,
            "solvers": layer_solvers(mod, found_before),
            "cudnn_us": round(c * 1e3, 1),
            "miocore_us": round(m * 1e3, 1),
        }
        for name, (mod, _inp), c, m in back_losses
    ]
    out = [row]
    print(json.dumps(row), flush=True)
    for mode in modes:
        r: dict[str, Any] = {"model": name, "dtype": dtype_name, "mode": mode}
        for side, m in (("cudnn", ref), ("miocore", mio)):
            m.eval()
            infer = m
            if mode in COMPILE_MODES:
                infer = torch.compile(m, mode=COMPILE_MODES[mode])
            with torch.no_grad():
                fn = lambda f=infer: f(x)  # noqa: E731
                if mode == "graph":
                    fn = graphed(fn)
                r[f"{side}_infer_ms"] = device_ms(fn, 3, iters)
                if mode == "compile" and os.environ.get("MODELS_TOP_KERNELS"):
                    r[f"{side}_infer_profile"] = profile_call(fn, m, train=False)
                if mode == "eager" and os.environ.get("MODELS_TOP_KERNELS"):
                    r[f"{side}_infer_top_kernels"] = top_kernels(fn, m, train=False)
            m.train()
            opt = torch.optim.SGD(m.parameters(), lr=1e-6)
            step_model = m
            if mode in COMPILE_MODES:
                step_model = torch.compile(m, mode=COMPILE_MODES[mode])
            elif mode == "graph":  # forward and backward captured, as PyTorch's own recipe does
                step_model = torch.cuda.make_graphed_callables(m, (x,))
            r[f"{side}_train_ms"] = device_ms(
                lambda sm=step_model, o=opt: train_step(sm, o, x), 2, max(3, iters // 2)
            )
            if mode == "eager" and os.environ.get("MODELS_TOP_KERNELS"):
                r[f"{side}_train_top_kernels"] = top_kernels(
                    lambda sm=m, o=opt: train_step(sm, o, x), m
                )
            if mode == "eager":  # the kernels alone: what the step costs with no host gaps
                r[f"{side}_infer_kernels_ms"] = kernel_ms(lambda f=m: f(x), train=False, model=m)
                r[f"{side}_train_kernels_ms"] = kernel_ms(
                    lambda sm=m, o=opt: train_step(sm, o, x), train=True, model=m
                )
        r["infer_ratio"] = r["cudnn_infer_ms"] / r["miocore_infer_ms"]
        if r["miocore_train_ms"]:
            r["train_ratio"] = r["cudnn_train_ms"] / r["miocore_train_ms"]
        out.append(r)
        print(json.dumps(r), flush=True)
    return out


#: ``--modes`` that run the model through ``torch.compile``, with its mode: "compile_ro" is
#: ``mode="reduce-overhead"`` (Inductor's code replayed as CUDA graphs).
COMPILE_MODES = {"compile": None, "compile_ro": "reduce-overhead"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=["resnet50", "efficientnet_b0", "convnext_tiny", "mobilenet_v3_large", "unet"],
    )
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16", "float32"])
    parser.add_argument("--modes", nargs="+", default=["eager", "compile", "graph"])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--db", type=Path, default=None, help="user database folder (default: a temporary one)"
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("MIOCORE_USER_DB_PATH", str(args.db or tmp))
        for name in args.models:
            for dtype in args.dtypes:
                try:
                    rows += run_one(name, dtype, args.modes, args.iters)
                except Exception as exc:  # one model must not stop the table
                    row = {"model": name, "dtype": dtype, "error": repr(exc)[:300]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                if args.out:
                    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
