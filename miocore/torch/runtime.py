"""Handles, solutions and workspaces shared by every miocore module of a process.

One :class:`miocore.Handle` per (device, stream, math mode), made on first use and shared by
all modules. A problem is found once per device and math mode (on first sight of its shape, or
ahead of time by :func:`miocore.torch.prepare`); the chosen ``Solution`` runs on any stream's
handle through a prepared run (``Handle.prepare``) kept per handle. Each handle has one
workspace, a uint8 tensor from PyTorch's caching allocator (on a GPU in a pool of its own, so
that growing it inside a CUDA-graph warm-up leaves nothing in the graph's pool), grown to the
largest need seen; runs on one stream are ordered, so its solutions share it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import torch

from miocore.errors import InvalidArgumentError
from miocore.find.handle import Handle
from miocore.problem.conv import ConvProblem
from miocore.solver.numerics import AccuracyPolicy
from miocore.solver.results import Solution
from miocore.torch.tensors import host_view

_are_deterministic = torch.are_deterministic_algorithms_enabled

_MATH_MODES = ("exact", "tf32")

#: The math mode the caller set with :func:`set_math_mode`; None follows PyTorch's switch.
_math_mode: str | None = None
#: The accuracy policy the caller set with :func:`set_accuracy`; None: ``MIOCORE_ACCURACY``.
_accuracy: str | None = None
#: PyTorch's ``use_deterministic_algorithms`` switch when the remembered solutions were found.
_deterministic = False
_lock = threading.Lock()


class _HandleState:
    """A handle with its workspace and the prepared runs that use it."""

    __slots__ = ("handle", "runs", "workspace", "workspace_array")

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.runs: dict[Any, Any] = {}
        self.workspace: torch.Tensor | None = None
        self.workspace_array: Any = None


_handles: dict[tuple[Any, ...], _HandleState] = {}
_solutions: dict[tuple[Any, ...], Solution] = {}
#: While a list, :func:`run` records each (device, problem) it meets there and runs nothing
#: (``prepare``'s first pass: the layers' shapes, gathered to build their kernels at once).
_collecting: list[tuple[torch.device, ConvProblem]] | None = None


def set_math_mode(mode: str | None) -> None:
    """Set the math mode of fp32 convolutions: ``"exact"``, ``"tf32"``, or None (default) to
    follow PyTorch (TF32 on CUDA where ``torch.backends.cudnn`` allows it, exact elsewhere)."""
    global _math_mode
    if mode is not None and mode not in _MATH_MODES:
        raise InvalidArgumentError(
            f"expected one of {_MATH_MODES} or None", field="mode", value=mode
        )
    _math_mode = mode
    reset(keep_handles=True)


def set_accuracy(policy: str | None) -> None:
    """Set the accuracy policy of the front end's finds (docs/numerics.md): ``"strict"``,
    ``"default"`` or ``"fast"``; None (default) follows ``MIOCORE_ACCURACY``. Shapes already
    seen find again. Determinism follows ``torch.use_deterministic_algorithms``."""
    global _accuracy
    if policy is not None:
        policy = AccuracyPolicy.parse(policy, field="policy").value
    _accuracy = policy
    reset(keep_handles=True)


def accuracy() -> str | None:
    """The accuracy policy set with :func:`set_accuracy` (None: ``MIOCORE_ACCURACY``)."""
    return _accuracy


def _follow_determinism(enabled: bool) -> None:
    """PyTorch's determinism switch changed: what was found under the other setting goes."""
    global _deterministic
    reset(keep_handles=True)
    _deterministic = enabled


def math_mode(device: torch.device) -> str:
    """The math mode a convolution on ``device`` runs in now."""
    if _math_mode is not None:
        return _math_mode
    if device.type != "cuda":
        return "exact"
    return "tf32" if _torch_allows_tf32() else "exact"


#: PyTorch's legacy TF32 flag of cuDNN convolutions: the cheap read (under 1 µs).
_cudnn_allows_tf32 = torch._C._get_cudnn_allow_tf32


def _torch_allows_tf32() -> bool:
    """PyTorch's own switch for TF32 in cuDNN convolutions, read on every call (users flip it).

    The legacy flag is the cheap read; PyTorch raises on it when its new per-operator flags
    disagree, and then cuDNN convolution's own flag decides.
    """
    try:
        return bool(_cudnn_allows_tf32())
    except RuntimeError:
        conv = getattr(torch.backends.cudnn, "conv", None)
        return getattr(conv, "fp32_precision", "none") == "tf32"


def device_name(device: torch.device) -> str:
    """miocore's name of a torch device: ``cpu``, ``cuda:N``, or ``hip:N`` on ROCm builds."""
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"{'hip' if torch.version.hip else 'cuda'}:{index}"
    raise InvalidArgumentError(
        "miocore runs on CPU, CUDA and ROCm tensors", field="device", value=str(device)
    )


def handle_state(device: torch.device, mode: str) -> _HandleState:
    """The shared handle of ``device``'s current stream in math mode ``mode``."""
    kind = device.type
    if kind == "cuda":
        index = device.index
        if index is None:
            index = torch.cuda.current_device()
        key: tuple[Any, ...] = (kind, index, _current_raw_stream(index), mode)
    elif kind == "cpu":
        key = ("cpu", 0, mode)
    else:
        raise InvalidArgumentError(
            "miocore runs on CPU, CUDA and ROCm tensors", field="device", value=str(device)
        )
    state = _handles.get(key)
    if state is None:
        with _lock:
            state = _handles.get(key)
            if state is None:
                name = device_name(device)
                if device.type == "cpu":
                    handle = Handle(name, math_mode=mode)
                else:
                    stream = torch.cuda.current_stream(device)
                    handle = Handle(name, stream=stream, math_mode=mode)
                state = _handles[key] = _HandleState(handle)
    return state


def _stream_of(index: int) -> int:
    return torch.cuda.current_stream(index).cuda_stream


#: The current stream of a GPU as its raw handle, without making a Stream object (PyTorch's
#: private call costs a fraction of ``torch.cuda.current_stream``; it is the same value).
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _stream_of)


def handle(device: torch.device | str = "cpu") -> Handle:
    """The shared :class:`miocore.Handle` miocore's modules use on ``device`` (current stream,
    current math mode)."""
    device = torch.device(device)
    return handle_state(device, math_mode(device)).handle


def solution(state: _HandleState, key: Any, problem: ConvProblem) -> Solution:
    """The solution of ``problem``: found on first sight, then remembered per device."""
    handle = state.handle
    full_key = (handle.device.identity, handle.context.math_mode, key)
    found = _solutions.get(full_key)
    if found is None:
        found = handle.find_solutions(problem, accuracy=_accuracy, deterministic=_deterministic)[0]
        _solutions[full_key] = found
    return found


def run(
    device: torch.device,
    key: Any,
    problem: ConvProblem,
    *,
    x: torch.Tensor,
    w: torch.Tensor,
    y: torch.Tensor,
) -> None:
    """Run ``problem`` on packed tensors; the direction decides which one is written.

    ``key`` identifies the problem (shapes, layout, dtype, convolution) cheaply; the problem
    itself is only read on first sight.
    """
    if _collecting is not None:
        _collecting.append((device, problem))
        return
    if _are_deterministic() is not _deterministic:
        _follow_determinism(not _deterministic)
    state = handle_state(device, math_mode(device))
    prepared = state.runs.get(key)
    if prepared is None:
        prepared = _prepare(state, key, problem)
    if device.type == "cpu":
        if prepared.checked:  # the layout holds (see below): the views go down unchecked
            prepared.run_views(host_view(x), host_view(w), host_view(y))
        else:
            prepared(x=host_view(x), w=host_view(w), y=host_view(y))
    elif prepared.ready:
        # Every tensor that reaches a key is dense in the key's layout (see ops), so the
        # layout the prepared run checked once holds: only the addresses go down.
        prepared.run_at(x.data_ptr(), w.data_ptr(), y.data_ptr())
    else:
        prepared(x=x, w=w, y=y)


def _prepare(state: _HandleState, key: Any, problem: ConvProblem) -> Any:
    chosen = solution(state, key, problem)
    needed = chosen.workspace_size
    current = 0 if state.workspace is None else state.workspace.numel()
    if needed > current:
        # Grow the shared workspace; runs prepared with the old one are prepared again.
        device = torch.device("cpu") if state.handle.backend.name == "cpu" else None
        if device is None:
            device = torch.device("cuda", state.handle.backend.index)
        with _workspace_pool(device):
            state.workspace = torch.empty(needed, dtype=torch.uint8, device=device)
        state.workspace_array = (
            host_view(state.workspace) if device.type == "cpu" else state.workspace
        )
        state.runs.clear()
    workspace = state.workspace_array if needed else None
    prepared = state.handle.prepare(chosen, workspace=workspace)
    state.runs[key] = prepared
    return prepared


#: One caching-allocator pool per GPU for the shared workspaces (see :func:`_workspace_pool`).
_pools: dict[int, Any] = {}


def _workspace_pool(device: torch.device) -> Any:
    """A context in which the shared workspace is allocated: on a GPU, a pool of PyTorch's
    caching allocator kept for miocore's workspaces. A workspace outlives the call that grows
    it, and that call may be ``torch.compile(mode="reduce-overhead")``'s warm-up, whose
    allocations go to its CUDA-graph pool, where a live allocation that is not an output is
    refused ("tensors in the cudagraph pool not tracked as outputs")."""
    pools = getattr(torch.cuda, "MemPool", None)
    if device.type != "cuda" or pools is None or torch.cuda.is_current_stream_capturing():
        # Under a capture, memory comes from the graph's own pool (a new segment of another
        # pool would mean a cudaMalloc, which invalidates the capture).
        return contextlib.nullcontext()
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _pools:
        try:
            _pools[index] = pools()
        except (RuntimeError, TypeError):  # a build whose allocator has no pools
            _pools[index] = None
    pool = _pools[index]
    if pool is None:
        return contextlib.nullcontext()
    return torch.cuda.use_mem_pool(pool, device=index)


def reset(*, keep_handles: bool = False) -> None:
    """Forget every remembered solution and prepared run (and the handles, unless kept):
    the next call of each shape finds again, with the current databases and switches."""
    with _lock:
        _solutions.clear()
        if keep_handles:
            for state in _handles.values():
                state.runs.clear()
        else:
            _handles.clear()


def collect(run_model: Any) -> list[tuple[torch.device, ConvProblem]]:
    """Call ``run_model()`` with every miocore convolution recording its problem instead of
    being found and run (outputs are left unwritten); return the problems, in call order."""
    global _collecting
    with _lock:
        if _collecting is not None:
            raise InvalidArgumentError(
                "miocore.torch is already collecting problems (prepare is not reentrant)",
                field="prepare",
                value="nested",
            )
        _collecting = found = []
    try:
        run_model()
    finally:
        _collecting = None
    return found
