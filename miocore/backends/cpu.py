"""The CPU backend: numpy arrays, wall-clock timing, a roofline measured on first use.

numpy is imported by the functions that touch arrays, not with this module: a handle that
answers from the FindDb never touches one, and numpy's import would be most of its cost.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from miocore import env
from miocore.errors import InvalidArgumentError, WorkspaceError
from miocore.problem.descriptors import TensorDescriptor, packed_strides
from miocore.problem.dtypes import DataType
from miocore.solver.interface import Ceilings, DeviceInfo

if TYPE_CHECKING:
    import numpy as np


def empty_for(desc: TensorDescriptor) -> np.ndarray:
    """An uninitialised numpy array in logical order with exactly ``desc``'s strides."""
    import numpy as np

    itemsize = desc.dtype.itemsize
    if desc.is_packed:
        logical = "NCHW" if desc.spatial_dims == 2 else "NCDHW"
        memory_shape = tuple(desc.lengths[logical.index(d)] for d in desc.layout)
        buffer = np.empty(memory_shape, dtype=desc.dtype.numpy)
        return buffer.transpose([desc.layout.index(d) for d in logical])
    flat = np.empty(desc.element_space, dtype=desc.dtype.numpy)
    return np.lib.stride_tricks.as_strided(
        flat, shape=desc.lengths, strides=tuple(s * itemsize for s in desc.strides)
    )


def check_array(desc: TensorDescriptor, array: Any, field: str) -> np.ndarray:
    """Validate that ``array`` is a numpy array or a torch CPU tensor matching ``desc``; return
    it as a numpy array (a torch tensor as a view of its memory, see :func:`torch_host_view`).

    Shape, dtype and strides must match exactly: miocore never copies a caller's tensor
    behind their back, so a mismatch is an error, not a silent conversion.
    """
    ndarray, expected = _expected_layout(desc)
    if type(array) is ndarray and (array.shape, array.dtype, array.strides) == expected:
        return array  # the common case, checked in one comparison
    if not isinstance(array, ndarray):
        if not is_torch_tensor(array):
            raise InvalidArgumentError(
                "the CPU backend takes numpy arrays and torch CPU tensors, got "
                f"{type(array).__name__}",
                field=field,
                value=type(array).__name__,
            )
        if str(array.dtype).removeprefix("torch.") != desc.dtype.value:
            raise InvalidArgumentError(
                f"dtype does not match the descriptor's {desc.dtype.value}",
                field=f"{field}.dtype",
                value=str(array.dtype),
            )
        array = torch_host_view(array, field)
    if array.shape != desc.lengths:
        raise InvalidArgumentError(
            f"shape does not match the descriptor's lengths {desc.lengths} (arrays are passed in "
            "logical order; an NHWC buffer of shape (N, H, W, C) is passed as "
            "b.transpose(0, 3, 1, 2))",
            field=f"{field}.shape",
            value=array.shape,
        )
    if array.dtype != desc.dtype.numpy:
        raise InvalidArgumentError(
            f"dtype does not match the descriptor's {desc.dtype.value}",
            field=f"{field}.dtype",
            value=str(array.dtype),
        )
    itemsize = desc.dtype.itemsize
    strides = tuple(s // itemsize for s in array.strides)
    relevant = [i for i, length in enumerate(desc.lengths) if length > 1]
    if any(array.strides[i] % itemsize for i in relevant) or any(
        strides[i] != desc.strides[i] for i in relevant
    ):
        raise InvalidArgumentError(
            f"element strides do not match the descriptor's {desc.strides} (layout {desc.layout})",
            field=f"{field}.strides",
            value=strides,
        )
    return array


def is_torch_tensor(array: Any) -> bool:
    """Whether ``array`` is a ``torch.Tensor`` (or a subclass), judged by its type's classes so
    that torch is never imported here."""
    return any(
        kind.__name__ == "Tensor" and kind.__module__ == "torch" for kind in type(array).__mro__
    )


def torch_host_view(tensor: Any, field: str = "tensor") -> np.ndarray:
    """A numpy view of a torch CPU tensor's memory: same shape and strides, no copy.

    bfloat16 has no numpy type of its own: the tensor's 16-bit words are viewed as int16, then
    as ``ml_dtypes.bfloat16``. A tensor on another device, or of a type numpy cannot view, is an
    :class:`~miocore.InvalidArgumentError` naming ``field``. torch is imported only here, when a
    caller has handed over a tensor (so it is loaded already).
    """
    import torch

    if tensor.device.type != "cpu":
        raise InvalidArgumentError(
            "the CPU backend takes CPU tensors (move it with .cpu(), or use a GPU handle)",
            field=f"{field}.device",
            value=str(tensor.device),
        )
    tensor = tensor.detach()  # the same memory; numpy() refuses tensors that require grad
    try:
        if tensor.dtype is torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(DataType.BFLOAT16.numpy)
        return tensor.numpy()
    except (TypeError, RuntimeError) as exc:
        raise InvalidArgumentError(
            f"this tensor has no numpy view ({exc})",
            field=field,
            value=f"{type(tensor).__name__}({tensor.dtype}, layout={tensor.layout})",
        ) from None


@functools.lru_cache(maxsize=4096)
def _expected_layout(
    desc: TensorDescriptor,
) -> tuple[type[np.ndarray], tuple[tuple[int, ...], np.dtype, tuple[int, ...]]]:
    """numpy's array type, and the shape, dtype and byte strides an array of ``desc`` has."""
    import numpy as np

    itemsize = desc.dtype.itemsize
    return np.ndarray, (desc.lengths, desc.dtype.numpy, tuple(s * itemsize for s in desc.strides))


def workspace_view(workspace: Any, needed: int) -> np.ndarray | None:
    """Check a caller's workspace (a numpy array of any dtype) and return it as bytes."""
    import numpy as np

    if workspace is None:
        if needed:
            raise WorkspaceError(
                f"the solution needs {needed} bytes of workspace", field="workspace", value=None
            )
        return None
    if not isinstance(workspace, np.ndarray) or not workspace.flags.c_contiguous:
        raise WorkspaceError(
            "expected a C-contiguous numpy array", field="workspace", value=type(workspace).__name__
        )
    if workspace.nbytes < needed:
        raise WorkspaceError(
            f"the solution needs {needed} bytes, the workspace has {workspace.nbytes}",
            field="workspace.nbytes",
            value=workspace.nbytes,
        )
    return workspace.reshape(-1).view(np.uint8)


def allocate_workspace(nbytes: int) -> np.ndarray | None:
    """A byte buffer of ``nbytes`` (None for zero)."""
    import numpy as np

    return np.empty(nbytes, dtype=np.uint8) if nbytes else None


def packed_like(desc: TensorDescriptor) -> TensorDescriptor:
    """The packed descriptor with ``desc``'s dtype, lengths and layout."""
    if desc.strides == packed_strides(desc.lengths, desc.layout):
        return desc
    return TensorDescriptor(desc.dtype, desc.lengths, layout=desc.layout)


@functools.cache
def measure_cpu_ceilings() -> Ceilings:
    """Calibrate once (about 50 ms): numpy's BLAS rate on a square matmul, and copy bandwidth."""
    import numpy as np

    def best_of(fn: Any, repeats: int = 3) -> float:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        return best

    size = 384
    a = np.ones((size, size), np.float32)
    b = np.ones((size, size), np.float32)
    a @ b
    gflops = 2 * size**3 / best_of(lambda: a @ b) / 1e9
    src = np.ones(8 * 1024 * 1024, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    gbps = 2 * src.nbytes / best_of(lambda: np.copyto(dst, src)) / 1e9
    # float16/bfloat16 have no native BLAS path in numpy: solvers convert to float32, which
    # costs memory traffic but not compute rate, so every type gets the float32 ceiling.
    return Ceilings(gflops={dt: gflops for dt in DataType}, gbps=gbps)


@functools.cache
def cpu_device_info() -> DeviceInfo:
    """Identity of this CPU (architecture and core count) and its lazily measured ceilings."""
    cores = os.cpu_count() or 1
    if hasattr(os, "uname"):
        # What platform.machine() answers on POSIX, without importing platform (~2 ms of
        # every new process's first handle).
        machine = os.uname().machine or "unknown"
    else:
        import platform

        machine = platform.machine() or "unknown"
    identity = f"cpu_{machine}_{cores}".replace("-", "_").lower()
    # On Linux platform.processor() runs `uname -p` in a subprocess (milliseconds of every new
    # handle's process) to answer "unknown" or the machine: the machine is the name there.
    if sys.platform.startswith("linux"):
        name = machine
    else:
        import platform

        name = platform.processor() or machine
    return DeviceInfo(
        backend="cpu",
        name=name,
        arch=machine,
        compute_units=cores,
        identity=identity,
        measure_ceilings=measure_cpu_ceilings,
    )


def perf_counter_ms() -> float:
    """Wall-clock milliseconds for CPU timing."""
    return time.perf_counter() * 1e3


def _check_threads(threads: Any, field: str) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InvalidArgumentError("expected an integer >= 1 (or None)", field=field, value=threads)
    return threads


_blas_checked = False


def _check_blas() -> None:
    """:func:`miocore.backends.cpu_blas.warn_if_narrow`, once per process, unless the solvers'
    GEMMs run on miocore's own OpenBLAS (:mod:`miocore.backends.cpu_gemm`): nothing to warn of."""
    global _blas_checked
    _blas_checked = True
    from miocore.backends.cpu_blas import warn_if_narrow
    from miocore.backends.cpu_gemm import own_blas

    if own_blas() is None:
        warn_if_narrow()


class CpuBackend:
    """The numpy backend: arrays are numpy arrays or torch CPU tensors (viewed, never copied),
    timing is wall-clock, nothing is compiled.

    ``threads`` (default: ``MIOCORE_CPU_THREADS``, else the libraries' own defaults) caps every
    thread pool the process has loaded (BLAS, OpenMP) through threadpoolctl, so find's timings
    and later runs use one consistent pool; solvers with a pool of their own (numba) read
    :attr:`threads` and size theirs to match.
    """

    name = "cpu"

    def __init__(self, index: int = 0, *, threads: int | None = None) -> None:
        if index != 0:
            raise InvalidArgumentError(
                "the CPU backend has only device 0", field="device", value=index
            )
        self.device = cpu_device_info()
        self.threads: int | None = None
        self._modules_seen = -1
        if threads is None:
            found = env.lookup("MIOCORE_CPU_THREADS")
            threads = env.positive_int("MIOCORE_CPU_THREADS", 1) if found else None
        if threads is not None:
            self.set_threads(threads)

    def set_threads(self, threads: int | None) -> None:
        """Cap every loaded thread pool at ``threads`` (None: leave the pools as they are)."""
        if threads is not None:
            threads = _check_threads(threads, "threads")
        self.threads = threads
        self._modules_seen = -1
        self.apply_threads()

    def apply_threads(self) -> None:
        """Apply :attr:`threads` to the pools loaded so far; a no-op until new modules were
        imported (libraries loaded later, e.g. by a plugin's first call, get the cap then)."""
        if self.threads is None or len(sys.modules) == self._modules_seen:
            return
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=self.threads)
        self._modules_seen = len(sys.modules)

    def check_array(self, desc: TensorDescriptor, array: Any, field: str) -> np.ndarray:
        """See :func:`check_array`."""
        return check_array(desc, array, field)

    def to_host_leading(self, array: Any, desc: TensorDescriptor, count: int) -> np.ndarray:
        """The first ``count`` entries along the outermost dimension (a view: no copy)."""
        import numpy as np

        return np.asarray(array)[:count]

    def fill(self, array: Any, desc: TensorDescriptor, value: float) -> None:
        """Set every element to ``value``."""
        array[...] = value

    def rebind(self, view: Any, array: Any, ptr: int) -> Any:
        """A numpy array of the same shape, dtype and strides as a checked one is its own
        checked view (see the GPU backends' ``rebind``); a read-only one is checked in full. A
        torch tensor of the same shape, strides, dtype and device gets a fresh host view."""
        import numpy as np

        if isinstance(array, np.ndarray):
            return array if array.flags.writeable else None
        return torch_host_view(array) if is_torch_tensor(array) else None

    def empty(self, desc: TensorDescriptor) -> np.ndarray:
        """A new array for ``desc`` (logical order, the descriptor's strides)."""
        return empty_for(desc)

    def random(self, desc: TensorDescriptor, rng: np.random.Generator) -> np.ndarray:
        """A new array for ``desc`` filled with uniform values in [-1, 1)."""
        out = empty_for(desc)
        out[...] = rng.uniform(-1.0, 1.0, size=desc.lengths).astype(desc.dtype.numpy)
        return out

    def allocate_workspace(self, nbytes: int) -> np.ndarray | None:
        """A byte buffer (None for zero bytes)."""
        return allocate_workspace(nbytes)

    def check_workspace(self, workspace: Any, needed: int) -> np.ndarray | None:
        """See :func:`workspace_view`."""
        return workspace_view(workspace, needed)

    def compile(self, kernels: tuple[Any, ...]) -> tuple[Any, ...]:
        """CPU solutions have no kernels; anything else is a solver bug."""
        if kernels:
            raise InvalidArgumentError(
                "the CPU backend cannot compile device kernels", field="kernels", value=len(kernels)
            )
        return ()

    def time_ms(self, run: Any) -> float:
        """Wall-clock milliseconds of one call of ``run`` (under :attr:`threads`). The first
        timing of the process checks that numpy's BLAS runs the CPU's widest kernels
        (:mod:`miocore.backends.cpu_blas`: a warning where it does not)."""
        if not _blas_checked:
            _check_blas()
        self.apply_threads()
        start = time.perf_counter()
        run()
        return (time.perf_counter() - start) * 1e3

    def blend(self, out: np.ndarray, result: np.ndarray, alpha: float, beta: float) -> None:
        """``out = alpha * result + beta * out`` computed in float32, rounded once."""
        import numpy as np

        mixed = alpha * result.astype(np.float32)
        if beta:
            mixed += beta * out.astype(np.float32)
        out[...] = mixed.astype(out.dtype)
