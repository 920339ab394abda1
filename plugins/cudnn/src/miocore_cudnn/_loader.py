"""Loading NVIDIA's cuDNN frontend (``import cudnn``) lazily, and one cuDNN handle per device.

Nothing here runs at plugin import: the first solver method that needs cuDNN calls
:func:`frontend`, which imports the package once per process and remembers either the module
or why it could not be had. A missing package, a missing ``libcudnn`` or a failing
``cudnnCreate`` never raises out of ``is_applicable``: the solvers turn the reason into a
``not_applicable`` answer.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from typing import Any

#: Shared libraries the frontend opens by soname (``libcudnn.so.9``, ``libcudart.so.1x``),
#: looked for in the NVIDIA wheels' folders on ``sys.path`` (``nvidia/cudnn/lib``,
#: ``nvidia/cu13/lib``) and loaded globally first, so that a ``pip install --target`` of the
#: frontend finds the cuDNN that PyTorch's wheels installed.
_PRELOAD = ("libcudart.so.13", "libcudart.so.12", "libcudnn.so.9")

_lock = threading.Lock()
_state: dict[str, Any] = {}


def _loaded() -> str:
    """The shared objects this process has mapped (Linux), to never load a second copy."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return maps.read()
    except OSError:
        return ""


def _preload_libraries() -> None:
    """Load the first copy of each :data:`_PRELOAD` library found under ``nvidia/*/lib``,
    unless the process has one already (PyTorch loads its own)."""
    import ctypes  # when the frontend is first wanted, not when the plugin registers
    import glob

    mapped = _loaded()
    if "libcudart.so" in mapped:
        _state["cudart"] = "already loaded"
    for soname in _PRELOAD:
        if soname.startswith("libcudart") and _state.get("cudart"):
            continue  # one runtime only: the frontend refuses two
        if soname in mapped:
            continue
        for entry in sys.path:
            found = sorted(glob.glob(os.path.join(entry or ".", "nvidia", "*", "lib", soname)))
            if not found:
                continue
            try:
                ctypes.CDLL(found[0], mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            if soname.startswith("libcudart"):
                _state["cudart"] = found[0]
            break


def frontend() -> tuple[Any, str]:
    """``(cudnn module, "")`` when the cuDNN frontend imports and finds a cuDNN library,
    else ``(None, reason)``. Tried once per process."""
    with _lock:
        if "module" in _state:
            return _state["module"], _state["reason"]
        module, reason = None, ""
        try:
            if importlib.util.find_spec("cudnn") is None:
                raise ImportError("No module named 'cudnn'")
            _preload_libraries()
            import cudnn

            version = int(cudnn.backend_version())
            if version < 90000:
                reason = f"cuDNN {version} is loaded; these solvers need cuDNN 9"
            else:
                module = cudnn
        except ImportError as exc:
            reason = (
                "the cuDNN frontend is not installed (pip install nvidia-cudnn-frontend; "
                f"import cudnn failed: {exc})"
            )
        except Exception as exc:  # the library itself would not load
            reason = f"the cuDNN library does not load: {type(exc).__name__}: {exc}"
        _state["module"], _state["reason"] = module, reason
        return module, reason


class CudnnHandle:
    """One ``cudnnHandle_t`` and the stream it was last bound to (set only on change, so a
    run on the same stream as the previous one costs no call)."""

    __slots__ = ("_set_stream", "raw", "stream")

    def __init__(self, cudnn: Any) -> None:
        self.raw = int(cudnn.create_handle())
        self._set_stream = cudnn.set_stream
        self.stream: int | None = None

    def bind(self, stream: int) -> None:
        """Make cuDNN launch on ``stream`` (a raw ``cudaStream_t``; 0 is the default)."""
        if stream != self.stream:
            self._set_stream(handle=self.raw, stream=stream)
            self.stream = stream


_handles: dict[str, CudnnHandle | str] = {}


def handle_for(device: str) -> tuple[CudnnHandle | None, str]:
    """The cuDNN handle of ``device`` (a device identity) made on the CUDA device current in
    this thread, or ``(None, reason)`` when cuDNN or the handle cannot be had. Tried once."""
    cudnn, reason = frontend()
    if cudnn is None:
        return None, reason
    with _lock:
        found = _handles.get(device)
        if found is None:
            try:
                found = CudnnHandle(cudnn)
            except Exception as exc:
                found = f"cudnnCreate failed: {type(exc).__name__}: {exc}"
            _handles[device] = found
    if isinstance(found, str):
        return None, found
    return found, ""
