"""What one launch needs, for both vendors: the packed argument list, the ``MioTensor5`` struct
of a descriptor, a compiled kernel bound to its backend, the grid of a grid-stride kernel, and
a captured graph of one call's launches. :mod:`miocore.backends.gpu_kernels` re-exports the
names solvers use.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from miocore.errors import InvalidArgumentError
from miocore.problem.descriptors import TensorDescriptor
from miocore.solver.interface import DeviceInfo, KernelInfo

if TYPE_CHECKING:
    from miocore.backends._gpu.base import GpuBackend


# -- kernel arguments --------------------------------------------------------------------------


class KernelArgs:
    """Packed kernel arguments: each one in an 8-byte aligned slot of one host buffer, and the
    table of their addresses that the launch API takes (``void** kernelParams``).

    ``specs`` are ``(kind, value)``: ``"ptr"`` (device address), ``"i32"``, ``"i64"``,
    ``"f32"``, or ``"bytes"`` (a struct passed by value, already laid out). Invokers build one
    per solution and only change the pointers per call (:meth:`set_pointers`).
    """

    __slots__ = ("_buffer", "_pointer_slots", "_table", "address")

    _SIZES: ClassVar[dict[str, int]] = {"ptr": 8, "i64": 8, "i32": 4, "f32": 4}

    def __init__(self, specs: Sequence[tuple[str, Any]]) -> None:
        import numpy as np

        offsets = []
        total = 0
        for kind, value in specs:
            size = len(value) if kind == "bytes" else self._SIZES[kind]
            offsets.append(total)
            total += (size + 7) // 8 * 8
        self._buffer = np.zeros(max(total, 8) // 8, dtype=np.uint64)
        raw = self._buffer.view(np.uint8)
        self._pointer_slots = []
        for (kind, value), offset in zip(specs, offsets, strict=True):
            if kind == "ptr":
                self._buffer[offset // 8] = int(value)
                self._pointer_slots.append(offset // 8)
            elif kind == "i64":
                raw[offset : offset + 8] = np.array([value], np.int64).view(np.uint8)
            elif kind == "i32":
                raw[offset : offset + 4] = np.array([value], np.int32).view(np.uint8)
            elif kind == "f32":
                raw[offset : offset + 4] = np.array([value], np.float32).view(np.uint8)
            elif kind == "bytes":
                raw[offset : offset + len(value)] = np.frombuffer(value, np.uint8)
            else:
                raise InvalidArgumentError("unknown kernel argument kind", field="kind", value=kind)
        base = self._buffer.ctypes.data
        self._table = np.array([base + off for off in offsets] or [0], dtype=np.uint64)
        self.address = self._table.ctypes.data

    def set_pointers(self, *pointers: int) -> None:
        """Overwrite the ``"ptr"`` arguments, in order (fewer than there are is fine)."""
        buffer = self._buffer
        for slot, ptr in zip(self._pointer_slots, pointers, strict=False):
            buffer[slot] = ptr


def tensor5_bytes(desc: TensorDescriptor) -> bytes:
    """``MioTensor5`` of ``desc`` (miocore_gpu.h): lengths and element strides in (N, C, D, H,
    W) order; a 2-D tensor gets D = 1 with stride 0."""
    import numpy as np

    lengths, strides = list(desc.lengths), list(desc.strides)
    if desc.spatial_dims == 2:
        lengths.insert(2, 1)
        strides.insert(2, 0)
    return np.array(lengths + strides, dtype=np.int64).tobytes()


def channels_last(desc: TensorDescriptor) -> bool:
    """Whether the channel dimension is innermost in memory (NHWC, NDHWC)."""
    return desc.layout in ("NHWC", "NDHWC")


class CompiledKernel:
    """One compiled, loaded kernel, ready to launch on its backend's current stream.

    ``meta`` holds the launch facts a :class:`~miocore.KernelBuilder` reported (such as the
    dynamic shared memory a Triton kernel was laid out with); empty for the driver's builds.
    """

    __slots__ = ("backend", "function", "info", "meta")

    def __init__(
        self,
        backend: GpuBackend,
        info: KernelInfo,
        function: Any,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.backend = backend
        self.info = info
        self.function = function
        self.meta = meta if meta is not None else {}

    def __repr__(self) -> str:
        return f"<kernel {self.info.kernel_name} from {self.info.source}>"

    def launch(
        self,
        args: KernelArgs,
        grid: Sequence[int] | None = None,
        block: Sequence[int] | None = None,
        shared: int = 0,
    ) -> None:
        """Launch with ``args`` on ``grid`` x ``block`` (default: the KernelInfo's)."""
        g = (*tuple(grid if grid is not None else self.info.grid), 1, 1)
        b = (*tuple(block if block is not None else self.info.block), 1, 1)
        backend = self.backend
        backend.driver.launch(
            self.function, g[:3], b[:3], shared, backend.stream_object, args.address
        )


def grid_for(total: int, block: int, device: DeviceInfo, waves: int = 32) -> int:
    """Blocks for a grid-stride kernel over ``total`` items: enough to fill the device."""
    wanted = max(1, -(-total // block))
    return int(min(wanted, max(1, device.compute_units) * waves))


class CapturedGraph:
    """One call's launches as an instantiated graph: ``replay()`` runs them on the backend's
    stream with one driver call and returns True. While that stream is itself being captured
    (the caller records a graph of its own) a graph launch is refused and would end the
    caller's capture, so ``replay()`` then launches nothing and returns False: the caller runs
    the launches one by one, into its capture. The graph is destroyed with this object."""

    __slots__ = ("__weakref__", "backend", "executable", "nodes", "replay")

    def __init__(self, backend: GpuBackend, graph: Any, executable: Any, nodes: int) -> None:
        self.backend = backend
        self.executable = executable
        self.nodes = nodes
        driver = backend.driver
        launch = driver.graph_launch
        capturing = driver.is_capturing

        def replay() -> bool:
            stream = backend.stream_object
            if capturing(stream):
                return False
            launch(executable, stream)
            return True

        self.replay = replay
        weakref.finalize(self, driver.graph_destroy, graph, executable)
