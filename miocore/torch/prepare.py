"""``prepare(model, example_input)``: find every convolution of a model ahead of time.

One pass of the model on the example (and, with ``backward=True``, the gradients of its
parameters) makes every miocore layer meet its shapes, so each is found once here, with a
progress bar, instead of during the first training step or inside a CUDA graph capture.

On a GPU a first pass only gathers the layers' problems (nothing is found or run), so that
every kernel their finds would compile is built at once, in parallel
(``Handle.compile_ahead``); the finds of the second pass then load them. Layers are found one
by one, and without it each one's compiles would wait for the previous layer's.
"""

from __future__ import annotations

from typing import Any

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from miocore.torch import runtime
from miocore.torch.modules import REPLACEMENTS

__all__ = ["prepare"]

_MIOCORE_CLASSES = tuple(REPLACEMENTS.values())


def prepare(
    model: torch.nn.Module,
    example_input: Any,
    *,
    backward: bool = False,
    progress: bool = True,
) -> torch.nn.Module:
    """Find the solution of every miocore convolution ``model`` runs on ``example_input``
    (a tensor, or a tuple of positional arguments) and return ``model``.

    With ``backward=True`` the backward data and backward weights problems are found too
    (through ``torch.autograd.grad``: no parameter's ``.grad`` is touched); buffers such as
    batch norm's running statistics are restored afterwards. Convert the model
    first (:func:`miocore.torch.convert`); layers still on torch.nn are not found.
    """
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, _MIOCORE_CLASSES)]
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    columns = (
        TextColumn("miocore find {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True, disable=not progress) as bar:
        # Backward progress is told by each layer's weight gradient: a module's full backward
        # hook would wrap its output in a view that an in-place activation may not modify.
        weighted = [(n, m) for n, m in layers if backward and m.weight.requires_grad]
        task = bar.add_task("forward", total=len(layers) + len(weighted))
        hooks = [layer.register_forward_hook(_advance(bar, task, name)) for name, layer in layers]
        hooks += [layer.weight.register_hook(_advance(bar, task, name)) for name, layer in weighted]
        # The passes must leave no trace: batch norm's running statistics are put back.
        buffers = [(b, b.clone()) for b in model.buffers()]

        def one_pass() -> None:
            if backward:
                _forward_backward(model, args)
            else:
                with torch.no_grad():
                    model(*args)

        try:
            if _on_gpu(args):
                bar.update(task, description="(gathering the layers' kernels)")
                _compile_ahead(runtime.collect(one_pass))
                _restore(buffers)
                bar.reset(task)  # the hooks counted the gathering pass
            one_pass()
        finally:
            for hook in hooks:
                hook.remove()
            _restore(buffers)
    return model


def _restore(buffers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Put the saved buffers (batch norm's running statistics) back."""
    with torch.no_grad():
        for buffer, saved in buffers:
            buffer.copy_(saved)


def _on_gpu(args: tuple[Any, ...]) -> bool:
    return any(t.device.type != "cpu" for t in _tensors(list(args)))


def _compile_ahead(found: list[tuple[torch.device, Any]]) -> None:
    """Build the kernels of every gathered problem, per device, at once."""
    by_device: dict[torch.device, dict[str, Any]] = {}
    for device, problem in found:
        by_device.setdefault(device, {})[problem.key] = problem
    for device, problems in by_device.items():
        runtime.handle(device).compile_ahead(
            problems.values(), accuracy=runtime._accuracy, deterministic=runtime._deterministic
        )


def _advance(bar: Progress, task: Any, name: str) -> Any:
    def hook(*_: Any) -> None:  # returns None: the hooked value is left as it is
        bar.update(task, advance=1, description=name)

    return hook


def _forward_backward(model: torch.nn.Module, args: tuple[Any, ...]) -> None:
    """One forward and the gradients of every trainable parameter, left unstored."""
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.enable_grad():
        out = model(*args)
        outputs = [t for t in _tensors(out) if t.requires_grad]
        if not outputs or not params:
            return
        # Random output gradients, entered as the weights of one scalar per output (each on
        # its output's device): handing them to autograd.grad as grad_outputs makes PyTorch
        # import its symbolic-shape machinery (sympy: 0.5-3.5 s, once per process) that a
        # plain ``loss.backward()`` never loads.
        losses = [(t * torch.randn_like(t)).float().sum() for t in outputs]
        torch.autograd.grad(losses, params, allow_unused=True)


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a model's output (a tensor, or a tuple, list or dict of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []
