"""The CUDA backend: the driver API and NVRTC through ``cuda.bindings`` (``miocore[cuda]``).

Everything vendor-specific is the :class:`CudaDriver`'s dozen primitives; the backend the handle
uses is the shared :class:`~miocore.backends._gpu.base.GpuBackend`. miocore works in the
device's primary context, the one the CUDA runtime (so PyTorch and CuPy) uses too, so pointers
and streams pass freely between them.

The vendor BLAS (cuBLAS, :mod:`miocore.backends.cuda_blas`) is reached through NVIDIA's
nvmath-python binding, else CuPy's (``miocore[cuda-blas]``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from miocore.backends._gpu.base import GpuBackend
from miocore.backends._gpu.vendor import (
    VendorDriver,
    VendorRuntime,
    check,
    check_device_index,
)
from miocore.backends.cuda_blas import CublasGemm, CupyCublas, NvmathCublas
from miocore.errors import MiocoreError
from miocore.problem.dtypes import DataType
from miocore.solver.interface import Ceilings, DeviceInfo

try:
    from cuda.bindings import driver as _cu
    from cuda.bindings import nvrtc as _nvrtc
except ImportError as _exc:  # pragma: no cover - depends on the install
    _cu = None
    _nvrtc = None
    _IMPORT_ERROR: Exception | None = _exc
else:
    _IMPORT_ERROR = None


class CudaError(MiocoreError):
    """A CUDA driver or NVRTC call failed; the message names the call and the error."""


def _describe(err: Any) -> str:
    """The error's name, with the driver's sentence for it where it has one."""
    name = getattr(err, "name", str(err))
    if _cu is not None and isinstance(err, _cu.CUresult):
        ok, text = _cu.cuGetErrorString(err)
        if int(ok) == 0 and text:
            name = f"{name}: {text.decode(errors='replace')}"
    return name


def _check(result: Any, call: str) -> Any:
    """Unpack a cuda.bindings ``(error, *values)`` tuple, raising :class:`CudaError`."""
    return check(result, call, CudaError, _describe)


_RUNTIME = VendorRuntime(
    device="cuda",
    package="cuda-python",
    import_error=_IMPORT_ERROR,
    init=lambda: _check(_cu.cuInit(0), "cuInit"),
    runtime="CUDA driver or device",
    needs="an NVIDIA GPU and its driver",
)


def device_count() -> int:
    """CUDA devices visible to this process (0 where there is no driver)."""
    try:
        _RUNTIME.ensure()
        return int(_check(_cu.cuDeviceGetCount(), "cuDeviceGetCount"))
    except MiocoreError:
        return 0


class CudaDriver(VendorDriver):
    """The CUDA calls :class:`GpuBackend` builds on, for device ``index``."""

    name = "cuda"
    #: A one-launch graph replays for less host time than the launch (H200 host, two runs:
    #: cuGraphLaunch 1.7-1.9 µs against cuLaunchKernel 4.2-4.5, ``benchmarks/gpu_launch_cost.py``),
    #: so single-kernel calls are kept as graphs too.
    graph_replay_beats_launch = True

    def __init__(self, index: int = 0) -> None:
        _RUNTIME.ensure()
        check_device_index("cuda", index, int(_check(_cu.cuDeviceGetCount(), "cuDeviceGetCount")))
        self.index = index
        #: Dynamic shared memory each function was opted in to, by function handle.
        self._shared_opt_in: dict[int, int] = {}
        self.device = _check(_cu.cuDeviceGet(index), "cuDeviceGet")
        self.context = _check(_cu.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self._make_current()
        attr = _cu.CUdevice_attribute
        self.major = self._attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        self.minor = self._attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        self.sm_count = self._attribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)

    def _attribute(self, which: Any) -> int:
        return int(_check(_cu.cuDeviceGetAttribute(which, self.device), "cuDeviceGetAttribute"))

    def _make_current(self) -> None:
        _check(_cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    # -- identity ------------------------------------------------------------------------------

    def device_info(self) -> DeviceInfo:
        """Name, ``sm90``-style architecture, SM count and the ``sm90_132`` identity."""
        raw = _check(_cu.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
        arch = f"sm{self.major}{self.minor}"
        return DeviceInfo(
            backend="cuda",
            name=name,
            arch=arch,
            compute_units=self.sm_count,
            identity=f"{arch}_{self.sm_count}",
            measure_ceilings=functools.partial(_ceilings, self.index),
        )

    # -- memory --------------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        self._make_current()
        return int(_check(_cu.cuMemAlloc(nbytes), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        if _cu is None:  # interpreter shutdown
            return
        with contextlib.suppress(Exception):
            _cu.cuMemFree(ptr)

    def _vendor_copy_htod(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        _check(_cu.cuMemcpyHtoDAsync(dst, src, nbytes, stream), "cuMemcpyHtoDAsync")

    def _vendor_copy_dtoh(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        _check(_cu.cuMemcpyDtoHAsync(dst, src, nbytes, stream), "cuMemcpyDtoHAsync")

    def memset(self, dst: int, nbytes: int, stream: Any) -> None:
        _check(_cu.cuMemsetD8Async(dst, 0, nbytes, stream), "cuMemsetD8Async")

    def synchronize(self, stream: Any) -> None:
        _check(_cu.cuStreamSynchronize(stream), "cuStreamSynchronize")

    def make_stream(self, handle: int) -> Any:
        return _cu.CUstream(handle)

    def pointer_device(self, ptr: int) -> int | None:
        """Device ordinal of a device pointer; None for host memory or an unknown address."""
        attr = _cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        err, value = _cu.cuPointerGetAttribute(attr, ptr)
        if int(err) != 0:
            return None
        mem = _cu.cuPointerGetAttribute(
            _cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr
        )
        if int(mem[0]) == 0 and int(mem[1]) == int(_cu.CUmemorytype.CU_MEMORYTYPE_HOST):
            return None
        return int(value)

    # -- events --------------------------------------------------------------------------------

    def event(self) -> Any:
        return _check(_cu.cuEventCreate(0), "cuEventCreate")

    def record(self, event: Any, stream: Any) -> None:
        _check(_cu.cuEventRecord(event, stream), "cuEventRecord")

    def _vendor_event_wait(self, event: Any) -> None:
        _check(_cu.cuEventSynchronize(event), "cuEventSynchronize")

    def _vendor_event_ms(self, start: Any, end: Any) -> float:
        return _check(_cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")

    # -- compilation ---------------------------------------------------------------------------

    def target(self) -> str:
        """The NVRTC target: ``sm_90`` (a cubin for this very architecture)."""
        return f"sm_{self.major}{self.minor}"

    @functools.cache  # noqa: B019 - one driver per device, alive for the process
    def compiler_version(self) -> str:
        major, minor = _check(_nvrtc.nvrtcVersion(), "nvrtcVersion")
        return f"nvrtc {major}.{minor}"

    def _supported(self) -> set[int]:
        try:
            return {
                int(a) for a in _check(_nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
            }
        except Exception:
            return {self.major * 10 + self.minor}

    def _vendor_compile_options(self, include_dirs: Sequence[Path]) -> list[str]:
        """A cubin for this device's architecture (PTX where NVRTC predates it)."""
        arch = self.major * 10 + self.minor
        kind = "sm" if arch in self._supported() else "compute"
        return [
            f"--gpu-architecture={kind}_{min(arch, max(self._supported()))}",
            "--std=c++17",
            *(f"--include-path={d}" for d in include_dirs),
        ]

    def _vendor_program(self, source: bytes, name: str) -> Any:
        return _check(
            _nvrtc.nvrtcCreateProgram(source, name.encode(), 0, [], []), "nvrtcCreateProgram"
        )

    def _vendor_compile(self, program: Any, options: list[str]) -> Any:
        (status,) = _nvrtc.nvrtcCompileProgram(program, len(options), [o.encode() for o in options])
        return status

    def _vendor_log(self, program: Any) -> bytes:
        size = _check(_nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
        log_buf = b" " * size
        _check(_nvrtc.nvrtcGetProgramLog(program, log_buf), "nvrtcGetProgramLog")
        return log_buf

    def _vendor_binary(self, program: Any) -> tuple[bytes, str]:
        if self.major * 10 + self.minor in self._supported():
            size = _check(_nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
            out = b" " * size
            _check(_nvrtc.nvrtcGetCUBIN(program, out), "nvrtcGetCUBIN")
            return out, "cubin"
        size = _check(_nvrtc.nvrtcGetPTXSize(program), "nvrtcGetPTXSize")
        out = b" " * size
        _check(_nvrtc.nvrtcGetPTX(program, out), "nvrtcGetPTX")
        return out, "ptx"

    def _vendor_destroy(self, program: Any) -> None:
        _nvrtc.nvrtcDestroyProgram(program)

    def load(self, binary: bytes) -> Any:
        self._make_current()
        with relaxed_capture():
            return _check(_cu.cuModuleLoadData(binary), "cuModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        return _check(_cu.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: Any,
        params: int,
    ) -> None:
        # Dynamic shared memory above 48 KiB needs the per-function opt-in; it lasts for the
        # function's life (modules are never unloaded), so it is asked once per function and
        # size, not per call (a driver call of ~1 µs on every launch).
        if shared > 48 * 1024 and self._shared_opt_in.get(int(function), 0) < shared:
            _check(
                _cu.cuFuncSetAttribute(
                    function,
                    _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared,
                ),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
            )
            self._shared_opt_in[int(function)] = shared
        (err,) = _cu.cuLaunchKernel(
            function,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared,
            stream,
            params,
            0,
        )
        if int(err) != 0:
            _check((err,), f"cuLaunchKernel(grid={grid}, block={block})")

    # -- graphs: the launches of one call recorded once, replayed with one driver call -------

    def capture_stream(self) -> Any:
        """A new non-blocking stream to record a graph on."""
        self._make_current()
        return _check(_cu.cuStreamCreate(1), "cuStreamCreate")  # 1: non-blocking

    def capture_begin(self, stream: Any) -> None:
        """Start recording on ``stream`` (relaxed mode: libraries may set up during it)."""
        mode = _cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        _check(_cu.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")

    def capture_end(self, stream: Any) -> tuple[Any, int]:
        """Stop recording on ``stream``: the graph and its node count."""
        graph = _check(_cu.cuStreamEndCapture(stream), "cuStreamEndCapture")
        _, count = _check(_cu.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")
        return graph, int(count)

    def graph_instantiate(self, graph: Any) -> Any:
        return _check(_cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    def graph_launch(self, executable: Any, stream: Any) -> None:
        (err,) = _cu.cuGraphLaunch(executable, stream)
        if int(err) != 0:
            _check((err,), "cuGraphLaunch")

    def graph_destroy(self, graph: Any, executable: Any) -> None:
        if executable is not None:
            _cu.cuGraphExecDestroy(executable)
        _cu.cuGraphDestroy(graph)

    def is_capturing(self, stream: Any) -> bool:
        status = _check(_cu.cuStreamIsCapturing(stream), "cuStreamIsCapturing")
        return int(status) != 0

    def relaxed_capture(self) -> Any:
        """A context in which this thread's calls are held to CUDA's relaxed capture mode (a
        library call that a caller's global-mode capture would refuse is let through)."""
        return relaxed_capture()

    # -- BLAS ----------------------------------------------------------------------------------

    def open_blas(self) -> Any:
        """cuBLAS through NVIDIA's own binding (nvmath-python), else CuPy's; False where
        neither is installed."""
        try:
            from nvmath.bindings import cublas as nvmath_cublas
        except ImportError:
            pass
        else:
            with relaxed_capture():
                return CublasGemm(NvmathCublas(nvmath_cublas), self._blas_alloc, self.free)
        try:
            import cupy
            from cupy_backends.cuda.libs import cublas
        except ImportError as exc:
            self.blas_error = (
                f"cuBLAS needs nvmath-python or CuPy: install 'miocore[cuda-blas]' ({exc})"
            )
            return False
        with relaxed_capture():
            return CublasGemm(CupyCublas(cublas, cupy), self._blas_alloc, self.free)

    def _blas_alloc(self, nbytes: int) -> int:
        """Device memory for cuBLAS's workspace, also while a stream of the process is being
        captured (a first GEMM inside a caller's CUDA graph)."""
        with relaxed_capture():
            return self.alloc(nbytes)


def _ceilings(index: int) -> Ceilings:
    """Peak rates from the device's attributes (no measurement): FP32 FMA lanes x clock, tensor
    cores at 16x that for fp16/bf16 (sm_80 and later), and the memory bus x clock."""
    driver = CudaDriver(index)
    attr = _cu.CUdevice_attribute
    clock_khz = driver._attribute(attr.CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
    mem_khz = driver._attribute(attr.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
    bus_bits = driver._attribute(attr.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
    lanes = 128 if driver.major >= 8 else 64
    fp32 = driver.sm_count * lanes * 2 * clock_khz * 1e3 / 1e9
    half = fp32 * (16 if driver.major >= 8 else 2)
    gbps = 2 * mem_khz * 1e3 * bus_bits / 8 / 1e9
    return Ceilings(
        gflops={DataType.FLOAT32: fp32, DataType.FLOAT16: half, DataType.BFLOAT16: half},
        gbps=gbps or 1000.0,
    )


@contextlib.contextmanager
def relaxed_capture() -> Any:
    """Let this thread load a module or create a library handle while a stream of the process
    is being captured (a caller's CUDA graph, recording a first call that builds its invoker):
    CUDA refuses such calls in the default (global) capture mode."""
    relaxed = _cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    previous = _check(_cu.cuThreadExchangeStreamCaptureMode(relaxed), "cuThreadExchange")
    try:
        yield
    finally:
        _cu.cuThreadExchangeStreamCaptureMode(previous)


def open_cuda(index: int = 0, stream: Any = None) -> GpuBackend:
    """The CUDA backend for device ``index`` on ``stream``."""
    return GpuBackend(CudaDriver(index), stream)
