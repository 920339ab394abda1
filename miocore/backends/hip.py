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
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from miocore.backends._gpu.base import DriverCompileFailure, GpuBackend
from miocore.errors import BackendUnavailableError, InvalidArgumentError, MiocoreError
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
    values: tuple[Any, ...] = ()
    err = result
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    if int(err) != 0:
        raise HipError(f"{call} failed: {getattr(err, 'name', err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


_init_lock = threading.Lock()
_initialised = False


def _init() -> None:
    global _initialised
    if _IMPORT_ERROR is not None:
        raise BackendUnavailableError(
            f"hip-python is not installed ({_IMPORT_ERROR}); install 'miocore[hip]'",
            field="device",
            value="hip",
        )
    with _init_lock:
        if _initialised:
            return
        try:
            _check(_hip.hipInit(0), "hipInit")
        except (RuntimeError, HipError) as exc:
            raise BackendUnavailableError(
                f"no usable HIP runtime or device ({exc}); miocore[hip] needs a machine with an "
                "AMD GPU and ROCm",
                field="device",
                value="hip",
            ) from None
        _initialised = True


class HipDriver:
    """The HIP primitives :class:`GpuBackend` builds on, for device ``index``."""

    name = "hip"

    def __init__(self, index: int = 0) -> None:
        _init()
        count = int(_check(_hip.hipGetDeviceCount(), "hipGetDeviceCount"))
        if not 0 <= index < count:
            raise BackendUnavailableError(
                f"there are {count} HIP devices", field="device", value=f"hip:{index}"
            )
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

    def copy_htod(self, dst: int, src: np.ndarray, stream: Any) -> None:
        src = np.ascontiguousarray(src)
        kind = _hip.hipMemcpyKind.hipMemcpyHostToDevice
        _check(
            _hip.hipMemcpyAsync(dst, src.ctypes.data, src.nbytes, kind, stream), "hipMemcpyAsync"
        )
        self.synchronize(stream)

    def copy_dtoh(self, dst: np.ndarray, src: int, stream: Any) -> None:
        kind = _hip.hipMemcpyKind.hipMemcpyDeviceToHost
        _check(
            _hip.hipMemcpyAsync(dst.ctypes.data, src, dst.nbytes, kind, stream), "hipMemcpyAsync"
        )

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

    def elapsed_ms(self, start: Any, end: Any) -> float:
        _check(_hip.hipEventSynchronize(end), "hipEventSynchronize")
        return float(_check(_hip.hipEventElapsedTime(start, end), "hipEventElapsedTime"))

    def target(self) -> str:
        """The hiprtc target: the architecture without feature flags (``gfx90a``)."""
        return self.arch

    @functools.cache  # noqa: B019 - one driver per device, alive for the process
    def compiler_version(self) -> str:
        major, minor = _check(_hiprtc.hiprtcVersion(), "hiprtcVersion")
        return f"hiprtc {major}.{minor}"

    def compile_source(
        self, source: bytes, name: str, options: Sequence[str], include_dirs: Sequence[Path]
    ) -> tuple[bytes, str]:
        """hiprtc: a code object for this device's architecture."""
        opts = [
            f"--offload-arch={self.arch}",
            "-std=c++17",
            *(f"-I{d}" for d in include_dirs),
            *options,
        ]
        prog = _check(
            _hiprtc.hiprtcCreateProgram(source, name.encode(), 0, None, None),
            "hiprtcCreateProgram",
        )
        try:
            result = _hiprtc.hiprtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
            err = result[0] if isinstance(result, tuple) else result
            size = _check(_hiprtc.hiprtcGetProgramLogSize(prog), "hiprtcGetProgramLogSize")
            log_buf = bytearray(size)
            _check(_hiprtc.hiprtcGetProgramLog(prog, log_buf), "hiprtcGetProgramLog")
            log_text = bytes(log_buf).rstrip(b"\0 ").decode(errors="replace")
            if int(err) != 0:
                raise DriverCompileFailure(
                    f"{getattr(err, 'name', err)} (options: {' '.join(opts)})\n{log_text}"
                )
            size = _check(_hiprtc.hiprtcGetCodeSize(prog), "hiprtcGetCodeSize")
            code = bytearray(size)
            _check(_hiprtc.hiprtcGetCode(prog, code), "hiprtcGetCode")
            return bytes(code), "hsaco"
        finally:
            _hiprtc.hiprtcDestroyProgram(prog.createRef() if hasattr(prog, "createRef") else prog)

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


class HipblasGemm:
    """Column-major strided-batched GEMM on hipBLAS with fp32 accumulation (see CublasGemm)."""

    def __init__(self, hipblas: Any) -> None:
        self._hipblas = hipblas
        self._handle = _check(hipblas.hipblasCreate(), "hipblasCreate")
        self._alpha = np.ones(1, np.float32)
        self._betas = {0.0: np.zeros(1, np.float32), 1.0: np.ones(1, np.float32)}

    def set_stream(self, stream: int) -> None:
        _check(
            self._hipblas.hipblasSetStream(self._handle, None if stream == 0 else stream),
            "hipblasSetStream",
        )

    def gemm(
        self,
        dtype: DataType,
        transa: bool,
        transb: bool,
        m: int,
        n: int,
        k: int,
        a: int,
        lda: int,
        stride_a: int,
        b: int,
        ldb: int,
        stride_b: int,
        c: int,
        ldc: int,
        stride_c: int,
        batch: int = 1,
        beta: float = 0.0,
        c_dtype: DataType | None = None,
        tf32: bool = False,
    ) -> None:
        # tf32 permits TF32 rounding; hipBLAS keeps full fp32 products here (exact is allowed).
        del tf32
        hb = self._hipblas
        beta_buf = self._betas.get(beta)
        if beta_buf is None:
            raise InvalidArgumentError("beta must be 0 or 1", field="beta", value=beta)
        op = {False: hb.hipblasOperation_t.HIPBLAS_OP_N, True: hb.hipblasOperation_t.HIPBLAS_OP_T}
        t = _HIP_R[dtype]
        tc = _HIP_R[c_dtype or dtype]
        _check(
            hb.hipblasGemmStridedBatchedEx(
                self._handle,
                op[transa],
                op[transb],
                m,
                n,
                k,
                self._alpha.ctypes.data,
                a,
                t,
                lda,
                stride_a,
                b,
                t,
                ldb,
                stride_b,
                beta_buf.ctypes.data,
                c,
                tc,
                ldc,
                stride_c,
                batch,
                _HIPBLAS_COMPUTE_32F,
                hb.hipblasGemmAlgo_t.HIPBLAS_GEMM_DEFAULT,
            ),
            "hipblasGemmStridedBatchedEx",
        )


def open_hip(index: int = 0, stream: Any = None) -> GpuBackend:
    """The HIP backend for device ``index`` on ``stream``."""
    return GpuBackend(HipDriver(index), stream)
