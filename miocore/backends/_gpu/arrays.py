"""Device arrays: miocore's own buffer and the views it takes of foreign tensors.

A GPU backend accepts, for every tensor argument:

* :class:`GpuArray`, miocore's own device buffer (it speaks ``__cuda_array_interface__`` on
  CUDA, so PyTorch, CuPy and Numba can wrap it without a copy);
* a PyTorch tensor (read through its own attributes: the cheapest path);
* anything with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch);
* anything with ``__dlpack__`` / ``__dlpack_device__`` (JAX, TensorFlow, PyTorch, CuPy).

Every check is against the descriptor: shape (logical order), dtype, element strides and the
device. Nothing is copied behind the caller's back.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from miocore.errors import InvalidArgumentError, WorkspaceError
from miocore.problem.descriptors import TensorDescriptor
from miocore.problem.dtypes import DataType

if TYPE_CHECKING:
    from miocore.backends._gpu.base import GpuBackend

_TORCH_DTYPES = {
    "torch.float32": DataType.FLOAT32,
    "torch.float16": DataType.FLOAT16,
    "torch.bfloat16": DataType.BFLOAT16,
}
_TYPESTRS = {"<f4": DataType.FLOAT32, "<f2": DataType.FLOAT16}
# DLPack type codes: kDLFloat = 2, kDLBfloat = 4.
_DLPACK_DTYPES = {(2, 32): DataType.FLOAT32, (2, 16): DataType.FLOAT16, (4, 16): DataType.BFLOAT16}
# DLPack device types: CPU 1, CUDA 2, CUDA host 3, ROCm 10, ROCm host 11, CUDA managed 13.
_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cpu", 10: "hip", 11: "cpu", 13: "cuda"}


class DeviceTensor:
    """A checked view of a caller's device tensor: what invokers receive in ``InvokeParams``.

    ``ptr`` is the device address of element (0, 0, ...); ``desc`` the descriptor it matched;
    ``owner`` keeps the caller's object alive for as long as the view lives.
    """

    __slots__ = ("desc", "nbytes", "owner", "ptr")

    def __init__(self, ptr: int, desc: TensorDescriptor | None, nbytes: int, owner: Any) -> None:
        self.ptr = ptr
        self.desc = desc
        self.nbytes = nbytes
        self.owner = owner

    def __repr__(self) -> str:
        return f"DeviceTensor(ptr=0x{self.ptr:x}, desc={self.desc!r})"


class GpuArray:
    """miocore's own device buffer: ``nbytes`` of device memory, optionally typed by a descriptor.

    Made by ``handle.backend.empty(desc)``, ``from_host(desc, array)`` and
    ``allocate_workspace(n)``; freed when garbage collected. ``to_host()`` copies it back into a
    numpy array in logical order.
    """

    def __init__(self, backend: GpuBackend, nbytes: int, desc: TensorDescriptor | None) -> None:
        self.backend = backend
        self.nbytes = int(nbytes)
        self.desc = desc
        self.ptr = backend.driver.alloc(max(self.nbytes, 1))
        self._finalizer = weakref.finalize(self, backend.driver.free, self.ptr)

    def __repr__(self) -> str:
        what = repr(self.desc) if self.desc is not None else f"{self.nbytes} bytes"
        return f"GpuArray({self.backend.name}:{self.backend.index}, 0x{self.ptr:x}, {what})"

    @property
    def shape(self) -> tuple[int, ...]:
        """Logical lengths (bytes for an untyped buffer)."""
        return self.desc.lengths if self.desc is not None else (self.nbytes,)

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of the elements (uint8 for an untyped buffer)."""
        return self.desc.dtype.numpy if self.desc is not None else np.dtype(np.uint8)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """Version 3 of the CUDA array interface (CUDA backend only)."""
        if self.backend.name != "cuda":
            raise AttributeError("__cuda_array_interface__ is only offered on the CUDA backend")
        itemsize = self.dtype.itemsize
        strides = tuple(s * itemsize for s in self.desc.strides) if self.desc is not None else None
        typestr = self.dtype.str if self.dtype != np.dtype("V2") else "<V2"
        return {
            "shape": self.shape,
            "typestr": typestr,
            "data": (self.ptr, False),
            "strides": strides,
            "version": 3,
            "stream": None,
        }

    def to_host(self) -> np.ndarray:
        """Copy to a new numpy array (logical order; an untyped buffer comes back as bytes)."""
        return self.backend.to_host(self)

    def copy_from_host(self, array: np.ndarray) -> None:
        """Overwrite this buffer with ``array`` (same logical shape and dtype)."""
        self.backend.copy_from_host(self, array)

    def free(self) -> None:
        """Release the device memory now (the array must not be used afterwards)."""
        self._finalizer()


def host_flat(desc: TensorDescriptor, values: np.ndarray | None = None) -> np.ndarray:
    """A contiguous host buffer of ``desc.element_space`` elements; ``values`` (logical order)
    written through the descriptor's strides."""
    flat = np.zeros(desc.element_space, dtype=desc.dtype.numpy)
    if values is not None:
        view = np.lib.stride_tricks.as_strided(
            flat,
            shape=desc.lengths,
            strides=tuple(s * desc.dtype.itemsize for s in desc.strides),
        )
        view[...] = values
    return flat


def logical_from_flat(desc: TensorDescriptor, flat: np.ndarray) -> np.ndarray:
    """The logical-order array (with ``desc``'s strides) over a flat host buffer."""
    return np.lib.stride_tricks.as_strided(
        flat, shape=desc.lengths, strides=tuple(s * desc.dtype.itemsize for s in desc.strides)
    )


def _mismatch(desc: TensorDescriptor, field: str, shape: Any, dtype: Any, strides: Any) -> None:
    if tuple(shape) != desc.lengths:
        raise InvalidArgumentError(
            f"shape does not match the descriptor's lengths {desc.lengths} (arrays are passed in "
            "logical order; an NHWC tensor is passed as a channels_last view, shape (N, C, H, W))",
            field=f"{field}.shape",
            value=tuple(shape),
        )
    if dtype != desc.dtype:
        raise InvalidArgumentError(
            f"dtype does not match the descriptor's {desc.dtype.value}",
            field=f"{field}.dtype",
            value=str(dtype.value if isinstance(dtype, DataType) else dtype),
        )
    relevant = [i for i, length in enumerate(desc.lengths) if length > 1]
    if any(strides[i] != desc.strides[i] for i in relevant):
        raise InvalidArgumentError(
            f"element strides do not match the descriptor's {desc.strides} (layout "
            f"{desc.layout}); pass a tensor with exactly these strides (for example "
            "x.contiguous() or x.contiguous(memory_format=torch.channels_last))",
            field=f"{field}.strides",
            value=tuple(strides),
        )


def _wrong_device(field: str, where: str, backend: GpuBackend) -> InvalidArgumentError:
    kind = WorkspaceError if field == "workspace" else InvalidArgumentError
    return kind(
        f"the tensor lives on {where}, the handle on {backend.name}:{backend.index}; move it "
        f"first (for a torch tensor: t.to('{backend.torch_device}'))",
        field=f"{field}.device",
        value=where,
    )


def view_of(
    backend: GpuBackend, desc: TensorDescriptor, array: Any, field: str
) -> DeviceTensor | GpuArray:
    """Check ``array`` against ``desc`` on ``backend``; return something with ``.ptr``."""
    if isinstance(array, GpuArray):
        if array.backend is not backend and (
            array.backend.name != backend.name or array.backend.index != backend.index
        ):
            raise _wrong_device(field, f"{array.backend.name}:{array.backend.index}", backend)
        if array.desc is None:
            raise InvalidArgumentError(
                "an untyped GpuArray (a workspace) cannot be a tensor; make it with "
                "backend.empty(desc)",
                field=field,
                value=repr(array),
            )
        if array.desc != desc:
            _mismatch(desc, field, array.desc.lengths, array.desc.dtype, array.desc.strides)
        return array
    module = type(array).__module__
    if module.startswith("torch") and hasattr(array, "data_ptr"):
        return _torch_view(backend, desc, array, field)
    if isinstance(array, np.ndarray):
        raise InvalidArgumentError(
            f"the {backend.name.upper()} backend takes device tensors (PyTorch, CuPy, any "
            "__cuda_array_interface__ or DLPack object, or miocore's GpuArray); this is a host "
            "numpy array: copy it with handle.backend.from_host(desc, array)",
            field=f"{field}.device",
            value="cpu",
        )
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is not None:
        return _cai_view(backend, desc, array, interface, field)
    if hasattr(array, "__dlpack__"):
        return _dlpack_view(backend, desc, array, field)
    raise InvalidArgumentError(
        "expected a device tensor (PyTorch, CuPy, __cuda_array_interface__, DLPack) or a "
        "miocore GpuArray",
        field=field,
        value=type(array).__name__,
    )


def _torch_view(backend: GpuBackend, desc: TensorDescriptor, t: Any, field: str) -> DeviceTensor:
    device = t.device
    if device.type != "cuda" or (device.index or 0) != backend.index:
        raise _wrong_device(field, str(device), backend)
    dtype = _TORCH_DTYPES.get(str(t.dtype))
    shape = tuple(t.shape)
    strides = t.stride()
    if shape != desc.lengths or dtype is not desc.dtype or strides != desc.strides:
        _mismatch(desc, field, shape, dtype if dtype is not None else str(t.dtype), strides)
    return DeviceTensor(t.data_ptr(), desc, desc.nbytes, t)


def _cai_view(
    backend: GpuBackend, desc: TensorDescriptor, array: Any, cai: dict[str, Any], field: str
) -> DeviceTensor:
    ptr = int(cai["data"][0])
    shape = tuple(cai["shape"])
    typestr = cai["typestr"]
    dtype: Any = _TYPESTRS.get(typestr, typestr)
    if typestr == "<V2" and desc.dtype is DataType.BFLOAT16:
        dtype = DataType.BFLOAT16
    itemsize = desc.dtype.itemsize
    if cai.get("strides") is None:
        strides = []
        step = 1
        for length in reversed(shape):
            strides.append(step)
            step *= length
        elem_strides = tuple(reversed(strides))
    else:
        elem_strides = tuple(s // itemsize for s in cai["strides"])
    _check_device_pointer(backend, ptr, field)
    _mismatch(desc, field, shape, dtype, elem_strides)
    return DeviceTensor(ptr, desc, desc.nbytes, array)


def _check_device_pointer(backend: GpuBackend, ptr: int, field: str) -> None:
    if ptr == 0:
        return  # empty tensors may carry a null pointer
    where = backend.driver.pointer_device(ptr)
    if where is None:
        raise _wrong_device(field, "host memory (not a device pointer)", backend)
    if where != backend.index:
        raise _wrong_device(field, f"{backend.name}:{where}", backend)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dlpack_view(backend: GpuBackend, desc: TensorDescriptor, array: Any, field: str) -> Any:
    if hasattr(array, "__dlpack_device__"):
        dev_type, dev_id = array.__dlpack_device__()
        kind = _DLPACK_DEVICES.get(int(dev_type), f"dlpack device type {int(dev_type)}")
        if kind != backend.name or int(dev_id) != backend.index:
            raise _wrong_device(field, f"{kind}:{int(dev_id)}", backend)
    capsule = array.__dlpack__()
    # The capsule is not consumed (not renamed "used_dltensor"), so its own destructor frees
    # the tensor once the capsule, kept alive by the returned view, is released.
    address = _PyCapsule_GetPointer(capsule, b"dltensor")
    tensor = _DLTensor.from_address(address)  # DLManagedTensor starts with its DLTensor
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(ndim))
    else:
        step, out = 1, []
        for length in reversed(shape):
            out.append(step)
            step *= length
        strides = tuple(reversed(out))
    dtype = _DLPACK_DTYPES.get(
        (tensor.dtype.code, tensor.dtype.bits), f"dlpack {tensor.dtype.code}/{tensor.dtype.bits}"
    )
    _mismatch(desc, field, shape, dtype, strides)
    ptr = (tensor.data or 0) + tensor.byte_offset
    return DeviceTensor(ptr, desc, desc.nbytes, (array, capsule))


def workspace_of(backend: GpuBackend, workspace: Any, needed: int) -> Any:
    """Check a caller's workspace: any contiguous device buffer of at least ``needed`` bytes."""
    if workspace is None:
        if needed:
            raise WorkspaceError(
                f"the solution needs {needed} bytes of workspace", field="workspace", value=None
            )
        return None
    if isinstance(workspace, GpuArray):
        nbytes, ptr = workspace.nbytes, workspace.ptr
        if workspace.backend.name != backend.name or workspace.backend.index != backend.index:
            raise _wrong_device(
                "workspace", f"{workspace.backend.name}:{workspace.backend.index}", backend
            )
    elif type(workspace).__module__.startswith("torch") and hasattr(workspace, "data_ptr"):
        device = workspace.device
        if device.type != "cuda" or (device.index or 0) != backend.index:
            raise _wrong_device("workspace", str(device), backend)
        if not workspace.is_contiguous():
            raise WorkspaceError(
                "the workspace must be contiguous",
                field="workspace.strides",
                value=tuple(workspace.stride()),
            )
        nbytes, ptr = workspace.numel() * workspace.element_size(), workspace.data_ptr()
    elif hasattr(workspace, "__cuda_array_interface__"):
        cai = workspace.__cuda_array_interface__
        ptr = int(cai["data"][0])
        itemsize = np.dtype(cai["typestr"]).itemsize
        nbytes = int(np.prod(cai["shape"], dtype=np.int64)) * itemsize
        if cai.get("strides") is not None and not _c_contiguous(cai, itemsize):
            raise WorkspaceError(
                "the workspace must be contiguous",
                field="workspace.strides",
                value=cai["strides"],
            )
        _check_device_pointer(backend, ptr, "workspace")
    else:
        raise WorkspaceError(
            "expected a contiguous device buffer (GpuArray, torch or CuPy tensor)",
            field="workspace",
            value=type(workspace).__name__,
        )
    if nbytes < needed:
        raise WorkspaceError(
            f"the solution needs {needed} bytes, the workspace has {nbytes}",
            field="workspace.nbytes",
            value=nbytes,
        )
    return DeviceTensor(ptr, None, nbytes, workspace)


def _c_contiguous(cai: dict[str, Any], itemsize: int) -> bool:
    step = itemsize
    for length, stride in zip(reversed(cai["shape"]), reversed(cai["strides"]), strict=True):
        if length > 1 and stride != step:
            return False
        step *= length
    return True
