"""The HIP backend: HIP and hiprtc through hip-python (``miocore[hip]``).

The same :class:`~miocore.backends._gpu.base.GpuBackend` as CUDA over a :class:`HipDriver`.
Device identity is MIOpen's: the architecture without target features and the compute-unit
count (``gfx90a104``). The BLAS is hipBLAS through hip-python's own binding.

Status: written against hip-python's documented API and imported in CI, but **not yet run on
an AMD GPU** (none was available); ``docs/gpu.md`` lists what is verified. The kernel sources
it compiles are checked for gfx90a by the ``hip-compile`` tox environment.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from miocore.backends._gpu.base import GpuBackend
from miocore.backends._gpu.vendor import (
    GemmCall,
    StridedGemm,
    VendorDriver,
    VendorRuntime,
    check,
    check_device_index,
)
from miocore.errors import MiocoreError
from miocore.problem.dtypes import DataType
from miocore.solver.interface import Ceilings, DeviceInfo

try:
    from hip import hip as _hip
    from hip import hiprtc as _hiprtc
except ImportError as _exc:  # pragma: no cover - depends on the install
    _hip = None
    _hiprtc = None
    _IMPORT_ERROR: Exception | None = _exc
else:
    _IMPORT_ERROR = None


class HipError(MiocoreError):
    """A HIP or hiprtc call failed; the message names the call and the error."""


def _check(result: Any, call: str) -> Any:
    """Unpack hip-python's ``(error, *values)`` (or a bare error), raising :class:`HipError`."""
    return check(result, call, HipError)


_RUNTIME = VendorRuntime(
    device="hip",
    package="hip-python",
    import_error=_IMPORT_ERROR,
    init=lambda: _check(_hip.hipInit(0), "hipInit"),
    runtime="HIP runtime or device",
    needs="an AMD GPU and ROCm",
)


class HipDriver(VendorDriver):
    """The HIP calls :class:`GpuBackend` builds on, for device ``index``."""

    name = "hip"

    def __init__(self, index: int = 0) -> None:
        _RUNTIME.ensure()
        check_device_index("hip", index, int(_check(_hip.hipGetDeviceCount(), "hipGetDeviceCount")))
        self.index = index
        _check(_hip.hipSetDevice(index), "hipSetDevice")
        self.props = _check(_hip.hipGetDeviceProperties(index), "hipGetDeviceProperties")
        arch = self.props.gcnArchName
        arch = arch.decode() if isinstance(arch, bytes) else str(arch)
        self.arch = arch.split(":", 1)[0]
        self.cu_count = int(self.props.multiProcessorCount)

    def device_info(self) -> DeviceInfo:
        """Name, ``gfx90a`` architecture, CU count and the ``gfx90a104`` identity."""
        name = self.props.name
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        return DeviceInfo(
            backend="hip",
            name=name.split("\0", 1)[0],
            arch=self.arch,
            compute_units=self.cu_count,
            identity=f"{self.arch}{self.cu_count}",
            measure_ceilings=functools.partial(_ceilings, self.index),
        )

    def alloc(self, nbytes: int) -> int:
        _check(_hip.hipSetDevice(self.index), "hipSetDevice")
        return int(_check(_hip.hipMalloc(nbytes), "hipMalloc"))

    def free(self, ptr: int) -> None:
        if _hip is None:
            return
        with contextlib.suppress(Exception):
            _hip.hipFree(ptr)

    def _vendor_copy_htod(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        kind = _hip.hipMemcpyKind.hipMemcpyHostToDevice
        _check(_hip.hipMemcpyAsync(dst, src, nbytes, kind, stream), "hipMemcpyAsync")

    def _vendor_copy_dtoh(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        kind = _hip.hipMemcpyKind.hipMemcpyDeviceToHost
        _check(_hip.hipMemcpyAsync(dst, src, nbytes, kind, stream), "hipMemcpyAsync")

    def memset(self, dst: int, nbytes: int, stream: Any) -> None:
        _check(_hip.hipMemsetAsync(dst, 0, nbytes, stream), "hipMemsetAsync")

    def synchronize(self, stream: Any) -> None:
        _check(_hip.hipStreamSynchronize(stream), "hipStreamSynchronize")

    def make_stream(self, handle: int) -> Any:
        return None if handle == 0 else handle

    def pointer_device(self, ptr: int) -> int | None:
        try:
            attributes = _check(_hip.hipPointerGetAttributes(ptr), "hipPointerGetAttributes")
        except (HipError, TypeError):
            return None
        memory_type = int(getattr(attributes, "type", getattr(attributes, "memoryType", 0)))
        if memory_type == int(_hip.hipMemoryType.hipMemoryTypeHost):
            return None
        return int(attributes.device)

    def event(self) -> Any:
        return _check(_hip.hipEventCreate(), "hipEventCreate")

    def record(self, event: Any, stream: Any) -> None:
        _check(_hip.hipEventRecord(event, stream), "hipEventRecord")

    def _vendor_event_wait(self, event: Any) -> None:
        _check(_hip.hipEventSynchronize(event), "hipEventSynchronize")

    def _vendor_event_ms(self, start: Any, end: Any) -> float:
        return _check(_hip.hipEventElapsedTime(start, end), "hipEventElapsedTime")

    def target(self) -> str:
        """The hiprtc target: the architecture without feature flags (``gfx90a``)."""
        return self.arch

    @functools.cache  # noqa: B019 - one driver per device, alive for the process
    def compiler_version(self) -> str:
        major, minor = _check(_hiprtc.hiprtcVersion(), "hiprtcVersion")
        return f"hiprtc {major}.{minor}"

    def _vendor_compile_options(self, include_dirs: Sequence[Path]) -> list[str]:
        """A code object for this device's architecture."""
        return [f"--offload-arch={self.arch}", "-std=c++17", *(f"-I{d}" for d in include_dirs)]

    def _vendor_program(self, source: bytes, name: str) -> Any:
        return _check(
            _hiprtc.hiprtcCreateProgram(source, name.encode(), 0, None, None),
            "hiprtcCreateProgram",
        )

    def _vendor_compile(self, program: Any, options: list[str]) -> Any:
        result = _hiprtc.hiprtcCompileProgram(program, len(options), [o.encode() for o in options])
        return result[0] if isinstance(result, tuple) else result

    def _vendor_log(self, program: Any) -> bytes:
        size = _check(_hiprtc.hiprtcGetProgramLogSize(program), "hiprtcGetProgramLogSize")
        log_buf = bytearray(size)
        _check(_hiprtc.hiprtcGetProgramLog(program, log_buf), "hiprtcGetProgramLog")
        return bytes(log_buf)

    def _vendor_binary(self, program: Any) -> tuple[bytes, str]:
        size = _check(_hiprtc.hiprtcGetCodeSize(program), "hiprtcGetCodeSize")
        code = bytearray(size)
        _check(_hiprtc.hiprtcGetCode(program, code), "hiprtcGetCode")
        return bytes(code), "hsaco"

    def _vendor_destroy(self, program: Any) -> None:
        _hiprtc.hiprtcDestroyProgram(
            program.createRef() if hasattr(program, "createRef") else program
        )

    def load(self, binary: bytes) -> Any:
        _check(_hip.hipSetDevice(self.index), "hipSetDevice")
        return _check(_hip.hipModuleLoadData(binary), "hipModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        return _check(_hip.hipModuleGetFunction(module, name.encode()), "hipModuleGetFunction")

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: Any,
        params: int,
    ) -> None:
        _check(
            _hip.hipModuleLaunchKernel(
                function,
                *grid,
                *block,
                sharedMemBytes=shared,
                stream=stream,
                kernelParams=params,
                extra=None,
            ),
            f"hipModuleLaunchKernel(grid={grid}, block={block})",
        )

    def open_blas(self) -> Any:
        """hipBLAS through hip-python's binding, or False where it cannot load."""
        try:
            from hip import hipblas
        except ImportError as exc:
            self.blas_error = f"hipBLAS binding missing ({exc})"
            return False
        return HipblasGemm(hipblas)


def _ceilings(index: int) -> Ceilings:
    """Peak rates from the device properties: 128 FP32 lanes per CU at the shader clock (CDNA2
    packed FP32), matrix cores at 8x that for fp16/bf16, memory bus x clock."""
    props = _check(_hip.hipGetDeviceProperties(index), "hipGetDeviceProperties")
    fp32 = int(props.multiProcessorCount) * 128 * 2 * int(props.clockRate) * 1e3 / 1e9
    gbps = 2 * int(props.memoryClockRate) * 1e3 * int(props.memoryBusWidth) / 8 / 1e9
    return Ceilings(
        gflops={DataType.FLOAT32: fp32, DataType.FLOAT16: 8 * fp32, DataType.BFLOAT16: 8 * fp32},
        gbps=gbps or 1000.0,
    )


_HIP_R = {DataType.FLOAT32: 0, DataType.FLOAT16: 2, DataType.BFLOAT16: 14}  # hipDataType
_HIPBLAS_COMPUTE_32F = 2  # HIPBLAS_COMPUTE_32F


class HipblasGemm(StridedGemm):
    """:class:`~miocore.backends._gpu.vendor.StridedGemm` on hipBLAS. ``tf32`` permits TF32
    rounding; hipBLAS keeps full fp32 products here (exact is allowed)."""

    #: hipBLAS enqueues on the set stream like a kernel (the HIP driver records no graphs yet).
    records_in_graphs = True

    def __init__(self, hipblas: Any) -> None:
        super().__init__()
        self._hipblas = hipblas
        self._handle = _check(hipblas.hipblasCreate(), "hipblasCreate")
        ops = hipblas.hipblasOperation_t
        self._ops = {False: ops.HIPBLAS_OP_N, True: ops.HIPBLAS_OP_T}

    def set_stream(self, stream: int) -> None:
        _check(
            self._hipblas.hipblasSetStream(self._handle, None if stream == 0 else stream),
            "hipblasSetStream",
        )

    def _vendor_gemm(self, call: GemmCall) -> None:
        hb = self._hipblas
        _check(
            hb.hipblasGemmStridedBatchedEx(
                self._handle,
                self._ops[call.transa],
                self._ops[call.transb],
                *call.strided_args(_HIP_R),
                _HIPBLAS_COMPUTE_32F,
                hb.hipblasGemmAlgo_t.HIPBLAS_GEMM_DEFAULT,
            ),
            "hipblasGemmStridedBatchedEx",
        )


def open_hip(index: int = 0, stream: Any = None) -> GpuBackend:
    """The HIP backend for device ``index`` on ``stream``."""
    return GpuBackend(HipDriver(index), stream)
