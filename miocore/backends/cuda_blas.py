"""cuBLAS for the CUDA backend: :class:`CublasGemm` (miocore's strided GEMM) over NVIDIA's own
binding (nvmath-python, :class:`NvmathCublas`) or CuPy's (:class:`CupyCublas`).

Each handle works on one stream at a time with a workspace of its own per stream
(:data:`WORKSPACE_BYTES`), set explicitly: a GEMM recorded in a CUDA graph then chooses among
the same algorithms as one called plainly.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

from miocore.backends._gpu.vendor import GemmCall, StridedGemm
from miocore.errors import BackendUnavailableError
from miocore.problem.dtypes import DataType

#: cuBLAS's workspace per stream: NVIDIA's recommended size on Hopper, what PyTorch gives its
#: handles there. Left to cuBLAS, a GEMM recorded in a graph ran on a workspace set up during
#: the capture: 1x1 backward weights (a long reduction: split-K, which needs a workspace)
#: replayed 1.2-1.7 µs slower than the same call found (H200, 169 of 260 layer calls).
WORKSPACE_BYTES = 32 << 20

_CUDA_R = {DataType.FLOAT32: 0, DataType.FLOAT16: 2, DataType.BFLOAT16: 14}
_COMPUTE_32F = 68  # CUBLAS_COMPUTE_32F: fp32 accumulation, no TF32 rounding
_COMPUTE_32F_FAST_TF32 = 77  # CUBLAS_COMPUTE_32F_FAST_TF32: fp32 inputs rounded to TF32
_GEMM_DEFAULT = -1


class CublasGemm(StridedGemm):
    """:class:`~miocore.backends._gpu.vendor.StridedGemm` on cuBLAS; ``tf32=True`` lets
    float32 products use TF32 tensor cores."""

    def __init__(
        self,
        binding: Any,
        alloc: Callable[[int], int] | None = None,
        free: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__()
        self._cublas = binding
        self._handle = binding.create()
        #: Whether a stream capture records these GEMMs (see ``GpuBackend.capture``).
        self.records_in_graphs = binding.records_in_graphs
        self._alloc = alloc
        #: stream -> this handle's workspace on it (device address), freed with the handle
        self._workspaces: dict[int, int] = {}
        if free is not None:
            weakref.finalize(self, _free_all, free, self._workspaces)

    def set_stream(self, stream: int) -> None:
        """Point the handle at ``stream``, and at its workspace there (setting the stream
        puts cuBLAS back on its default workspace; two streams' GEMMs never share one)."""
        self._cublas.set_stream(self._handle, stream)
        set_workspace = getattr(self._cublas, "set_workspace", None)
        if self._alloc is None or set_workspace is None:
            return
        ptr = self._workspaces.get(stream)
        if ptr is None:
            ptr = self._workspaces[stream] = self._alloc(WORKSPACE_BYTES)
        set_workspace(self._handle, ptr, WORKSPACE_BYTES)

    def _vendor_gemm(self, call: GemmCall) -> None:
        cb = self._cublas
        tf32 = call.tf32 and call.dtype is DataType.FLOAT32
        compute = _COMPUTE_32F_FAST_TF32 if tf32 else _COMPUTE_32F
        ops = (self._handle, int(call.transa), int(call.transb))
        if call.batch > 1:
            cb.gemm_strided_batched_ex(*ops, *call.strided_args(_CUDA_R), compute, _GEMM_DEFAULT)
            return
        for i in range(call.batch):
            cb.gemm_ex(*ops, *call.single_args(_CUDA_R, i), compute, _GEMM_DEFAULT)


class NvmathCublas:
    """cuBLAS through nvmath-python's low-level binding: calls go to the handle's stream as
    set, so a stream capture records them."""

    records_in_graphs = True

    def __init__(self, module: Any) -> None:
        self.create = module.create
        self.set_stream = module.set_stream
        self.set_workspace = getattr(module, "set_workspace", None)  # older releases: none
        self.gemm_ex = module.gemm_ex
        self.gemm_strided_batched_ex = module.gemm_strided_batched_ex


class CupyCublas:
    """cuBLAS through CuPy's binding, which points the handle at CuPy's current stream before
    every call: each call therefore runs inside a CuPy context of the backend's stream. CuPy
    refuses cuBLAS calls on a capturing stream, so these GEMMs are never recorded (and keep
    cuBLAS's default workspace: no ``set_workspace``)."""

    records_in_graphs = False

    def __init__(self, module: Any, cupy: Any) -> None:
        self._module = module
        self._cupy = cupy
        self._stream: Any = None
        self.create = module.create

    def set_stream(self, handle: int, stream: int) -> None:
        self._module.setStream(handle, stream)
        self._stream = self._cupy.cuda.ExternalStream(stream)

    def gemm_ex(self, *args: Any) -> None:
        with self._stream, uncapturable():
            self._module.gemmEx(*args)

    def gemm_strided_batched_ex(self, *args: Any) -> None:
        with self._stream, uncapturable():
            self._module.gemmStridedBatchedEx(*args)


@contextlib.contextmanager
def uncapturable() -> Any:
    """CuPy's refusal of a cuBLAS call on a capturing stream, said as what to do about it."""
    try:
        yield
    except NotImplementedError as exc:
        raise BackendUnavailableError(
            "cuBLAS through CuPy cannot run while a CUDA graph is being captured "
            f"({exc}); install nvmath-python ('miocore[cuda-blas]'), whose binding can, or "
            "capture without this solver"
        ) from exc


def _free_all(free: Callable[[int], None], workspaces: dict[int, int]) -> None:
    for ptr in workspaces.values():
        free(ptr)
