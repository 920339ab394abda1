"""Device tensors of :class:`~miocore.backends._gpu.base.GpuBackend`: checking, making,
filling and copying them.

:class:`DeviceTensors` (mixed into ``GpuBackend``) checks a caller's tensor or workspace against
its descriptor (``check_array``, ``check_workspace``; the checks themselves are in
:mod:`miocore.backends._gpu.arrays`), re-points a checked view (``detach``, ``rebind``), makes
device memory (``empty``, ``allocate_workspace``), fills it on the device (``fill``,
``random``, with the core's utility kernels) and copies between host and device
(``from_host``, ``copy_from_host``, ``to_host``, ``to_host_leading``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from miocore.backends._gpu.arrays import (
    DeviceTensor,
    GpuArray,
    host_flat,
    logical_from_flat,
    view_of,
    workspace_of,
)
from miocore.backends._gpu.compiler import CORE_NAMESPACE, DTYPE_OPTIONS
from miocore.backends._gpu.launch import KernelArgs, channels_last, grid_for, tensor5_bytes
from miocore.errors import InvalidArgumentError
from miocore.problem.descriptors import TensorDescriptor
from miocore.solver.interface import DeviceInfo, KernelInfo

if TYPE_CHECKING:
    from miocore.backends._gpu.base import Driver


class DeviceTensors:
    """The array methods of :class:`GpuBackend` (a mixin: the backend's ``__init__`` sets the
    state below; ``fill`` and ``random`` compile through its ``compile``)."""

    driver: Driver
    device: DeviceInfo
    stream_object: Any

    def check_array(self, desc: TensorDescriptor, array: Any, field: str) -> Any:
        """Check a caller's tensor against ``desc`` (shape, dtype, strides, device)."""
        return view_of(self, desc, array, field)

    def detach(self, view: Any) -> Any:
        """``view`` without its hold on the caller's tensor: what a cache of checked views
        keeps (a framework must be free to release the tensor; a CUDA graph pool checks it)."""
        if type(view) is not DeviceTensor:
            return view
        return DeviceTensor(view.ptr, view.desc, view.nbytes, None)

    def rebind(self, view: Any, array: Any, ptr: int) -> Any:
        """``view`` (a checked view of a tensor of the same shape, dtype, strides and device
        as ``array``) moved to ``array``'s memory at ``ptr``, without checking again; None
        where that cannot be done (the caller checks in full)."""
        if type(view) is not DeviceTensor:
            return None
        return DeviceTensor(ptr, view.desc, view.nbytes, array)

    def empty(self, desc: TensorDescriptor) -> GpuArray:
        """New uninitialised device memory for ``desc`` (its strides, its element space)."""
        return GpuArray(self, desc.nbytes, desc)

    def from_host(self, desc: TensorDescriptor, values: np.ndarray) -> GpuArray:
        """A device copy of ``values`` (logical order) laid out as ``desc`` says."""
        out = self.empty(desc)
        self.copy_from_host(out, values)
        return out

    def copy_from_host(self, array: GpuArray | DeviceTensor, values: np.ndarray) -> None:
        """Copy ``values`` (logical order) into a device tensor (synchronous)."""
        desc = array.desc
        if desc is None:
            raise InvalidArgumentError("the array has no descriptor", field="array", value=None)
        values = np.asarray(values)
        if values.shape != desc.lengths:
            raise InvalidArgumentError(
                f"expected shape {desc.lengths}", field="values.shape", value=values.shape
            )
        flat = host_flat(desc, values.astype(desc.dtype.numpy, copy=False))
        self.driver.copy_htod(array.ptr, flat, self.stream_object)
        self.driver.synchronize(self.stream_object)

    def to_host(self, array: Any, desc: TensorDescriptor | None = None) -> np.ndarray:
        """Copy a device tensor (own buffer, or any accepted tensor with ``desc``) to numpy."""
        if desc is not None and not isinstance(array, (GpuArray, DeviceTensor)):
            array = self.check_array(desc, array, "array")
        desc = desc or array.desc
        if desc is None:
            flat = np.empty(array.nbytes, np.uint8)
            self.driver.copy_dtoh(flat, array.ptr, self.stream_object)
            self.driver.synchronize(self.stream_object)
            return flat
        flat = np.empty(desc.element_space, desc.dtype.numpy)
        self.driver.copy_dtoh(flat, array.ptr, self.stream_object)
        self.driver.synchronize(self.stream_object)
        return np.array(logical_from_flat(desc, flat))

    def to_host_leading(self, array: Any, desc: TensorDescriptor, count: int) -> np.ndarray:
        """The first ``count`` entries along the outermost logical dimension of a device
        tensor laid out as ``desc``, copied to numpy: only the memory they span travels (the
        outermost dimension is N or K, outermost in memory in every layout)."""
        view = (
            array
            if isinstance(array, (GpuArray, DeviceTensor))
            else self.check_array(desc, array, "array")
        )
        lengths = (min(count, desc.lengths[0]), *desc.lengths[1:])
        sub = TensorDescriptor(desc.dtype, lengths, strides=desc.strides)
        flat = np.empty(sub.element_space, desc.dtype.numpy)
        self.driver.copy_dtoh(flat, view.ptr, self.stream_object)
        self.driver.synchronize(self.stream_object)
        return np.array(logical_from_flat(sub, flat))

    def fill(self, array: Any, desc: TensorDescriptor, value: float) -> None:
        """Set every element of a device tensor laid out as ``desc`` to ``value``, on the
        device (the core's ``miocore_fill``)."""
        view = (
            array
            if isinstance(array, (GpuArray, DeviceTensor))
            else self.check_array(desc, array, "array")
        )
        (kernel,) = self.compile(
            [
                KernelInfo(
                    source=f"{CORE_NAMESPACE}/miocore_utility.cu",
                    kernel_name="miocore_fill",
                    options=(DTYPE_OPTIONS[desc.dtype],),
                    block=(256,),
                )
            ]
        )
        args = KernelArgs(
            [
                ("ptr", view.ptr),
                ("bytes", tensor5_bytes(desc)),
                ("f32", value),
                ("i32", int(channels_last(desc))),
            ]
        )
        kernel.launch(args, grid=(grid_for(desc.element_count, 256, self.device),))

    def random(self, desc: TensorDescriptor, rng: np.random.Generator) -> GpuArray:
        """A device tensor for ``desc`` filled with uniform values in [-1, 1), made on the
        device (the core's ``miocore_fill_random``; its seed drawn from ``rng``)."""
        out = self.empty(desc)
        count = desc.element_space
        if count:
            (kernel,) = self.compile(
                [
                    KernelInfo(
                        source=f"{CORE_NAMESPACE}/miocore_utility.cu",
                        kernel_name="miocore_fill_random",
                        options=(DTYPE_OPTIONS[desc.dtype],),
                        block=(256,),
                    )
                ]
            )
            seed = int(rng.integers(0, 2**32))
            args = KernelArgs(
                [("ptr", out.ptr), ("i64", count), ("i32", seed - (seed >> 31 << 32))]
            )
            kernel.launch(args, grid=(grid_for(count, 256, self.device),))
        return out

    def allocate_workspace(self, nbytes: int) -> GpuArray | None:
        """Untyped device memory of ``nbytes`` (None for zero)."""
        return GpuArray(self, nbytes, None) if nbytes else None

    def check_workspace(self, workspace: Any, needed: int) -> Any:
        """Check a caller's workspace (contiguous device memory, big enough, this device)."""
        return workspace_of(self, workspace, needed)
