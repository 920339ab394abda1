"""The vendor-neutral half of the GPU drivers (``miocore.backends._gpu.vendor``), on the CPU.

The steps CUDA and HIP share (error unpacking, one-time init, the runtime-compile sequence, the
BLAS argument layout) run here against small pretend bindings; the CUDA driver's own compile
calls run against the real NVRTC where cuda-bindings is installed (no GPU needed).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from miocore import DataType
from miocore.backends._gpu.base import GpuBackend
from miocore.backends._gpu.compiler import CORE_NAMESPACE, core_kernel_dir
from miocore.backends._gpu.vendor import (
    DriverCompileFailure,
    GemmCall,
    StridedGemm,
    VendorDriver,
    VendorRuntime,
    check,
    check_device_index,
)
from miocore.backends.cpu import cpu_device_info
from miocore.errors import BackendUnavailableError, CompileError, InvalidArgumentError, MiocoreError


class _Status(enum.IntEnum):
    SUCCESS = 0
    ERROR_OUT_OF_MEMORY = 2


class _CallFailed(MiocoreError):
    pass


def test_check_unpacks_tuples_and_bare_codes() -> None:
    assert check((_Status.SUCCESS,), "noValues", _CallFailed) is None
    assert check(_Status.SUCCESS, "bare", _CallFailed) is None
    assert check((_Status.SUCCESS, 7), "one", _CallFailed) == 7
    assert check((_Status.SUCCESS, 7, "b"), "two", _CallFailed) == (7, "b")
    with pytest.raises(_CallFailed, match=r"cuMemAlloc failed: ERROR_OUT_OF_MEMORY"):
        check((_Status.ERROR_OUT_OF_MEMORY, 0), "cuMemAlloc", _CallFailed)
    with pytest.raises(_CallFailed, match=r"hipFree failed: out of memory \(2\)"):
        check(_Status.ERROR_OUT_OF_MEMORY, "hipFree", _CallFailed, lambda e: f"out of memory ({e})")


def test_runtime_initialises_once_and_says_what_is_missing() -> None:
    calls = []
    runtime = VendorRuntime("cuda", "cuda-python", None, lambda: calls.append(1), "driver", "x")
    runtime.ensure()
    runtime.ensure()
    assert calls == [1]

    missing = VendorRuntime(
        "hip", "hip-python", ImportError("No module named 'hip'"), lambda: None, "HIP", "ROCm"
    )
    with pytest.raises(BackendUnavailableError, match=r"hip-python is not installed") as info:
        missing.ensure()
    assert (info.value.field, info.value.value) == ("device", "hip")

    def no_device() -> None:
        raise _CallFailed("cuInit failed: CUDA_ERROR_NO_DEVICE")

    broken = VendorRuntime("cuda", "cuda-python", None, no_device, "CUDA driver", "an NVIDIA GPU")
    with pytest.raises(BackendUnavailableError, match=r"CUDA_ERROR_NO_DEVICE.*an NVIDIA GPU"):
        broken.ensure()
    with pytest.raises(BackendUnavailableError, match=r"there are 2 CUDA devices") as info:
        check_device_index("cuda", 2, 2)
    assert info.value.value == "cuda:2"
    check_device_index("cuda", 1, 2)


class _PretendCompiler(VendorDriver):
    """A driver whose compiler accepts sources that contain ``ok`` and logs every call."""

    name = "pretend"
    index = 0

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _vendor_compile_options(self, include_dirs: Any) -> list[str]:
        return ["--arch=pretend", *(f"-I{d}" for d in include_dirs)]

    def _vendor_program(self, source: bytes, name: str) -> Any:
        self.calls.append(f"create {name}")
        return {"source": source}

    def _vendor_compile(self, program: Any, options: list[str]) -> Any:
        self.calls.append("compile " + " ".join(options))
        return _Status.SUCCESS if b"ok" in program["source"] else _Status.ERROR_OUT_OF_MEMORY

    def _vendor_log(self, program: Any) -> bytes:
        return b"line 1: error here\0  "

    def _vendor_binary(self, program: Any) -> tuple[bytes, str]:
        return b"BIN" + program["source"], "cubin"

    def _vendor_destroy(self, program: Any) -> None:
        self.calls.append("destroy")


def test_compile_sequence_returns_the_binary_or_the_log_and_always_destroys() -> None:
    driver = _PretendCompiler()
    binary = driver.compile_source(b"ok kernel", "k.cu", ["-DX=1"], [Path("/inc")])
    assert binary == (b"BINok kernel", "cubin")
    assert driver.calls == ["create k.cu", "compile --arch=pretend -I/inc -DX=1", "destroy"]
    driver.calls.clear()
    with pytest.raises(DriverCompileFailure) as info:
        driver.compile_source(b"bad kernel", "k.cu", ["-DX=2"], [])
    assert info.value.log_text.endswith("(options: --arch=pretend -DX=2)\nline 1: error here")
    assert driver.calls[-1] == "destroy"


class _RecordingGemm(StridedGemm):
    def __init__(self) -> None:
        super().__init__()
        self.issued: list[GemmCall] = []

    def _vendor_gemm(self, call: GemmCall) -> None:
        self.issued.append(call)


def test_gemm_checks_beta_and_lays_out_both_vendor_argument_lists() -> None:
    blas = _RecordingGemm()
    with pytest.raises(InvalidArgumentError) as info:
        blas.gemm(
            DataType.FLOAT16, False, True, 4, 5, 6, 1000, 4, 24, 2000, 5, 30, 3000, 4, 20,
            beta=0.5,
        )  # fmt: skip
    assert (info.value.field, info.value.value) == ("beta", 0.5)
    assert blas.issued == []  # nothing reached the vendor

    blas.gemm(
        DataType.FLOAT16, False, True, 4, 5, 6, 1000, 4, 24, 2000, 5, 30, 3000, 4, 20,
        batch=3, beta=1.0, c_dtype=DataType.FLOAT32,
    )  # fmt: skip
    (call,) = blas.issued
    assert blas.calls == 1  # the refused call reached nothing
    codes = {DataType.FLOAT16: 2, DataType.FLOAT32: 0, DataType.BFLOAT16: 14}
    alpha, beta = call.alpha, call.beta
    # The scalars are host float32 values at fixed addresses: alpha 1, and the beta asked for.
    assert np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * 1).from_address(alpha))[0] == 1.0
    assert np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * 1).from_address(beta))[0] == 1.0
    assert call.strided_args(codes) == (
        4, 5, 6, alpha, 1000, 2, 4, 24, 2000, 2, 5, 30, beta, 3000, 0, 4, 20, 3,
    )  # fmt: skip
    # Entry 2 of the batch: A and B advance by 2 strides of fp16 elements, C of fp32 ones.
    assert call.single_args(codes, 2) == (
        4, 5, 6, alpha, 1000 + 2 * 24 * 2, 2, 4, 2000 + 2 * 30 * 2, 2, 5, beta,
        3000 + 2 * 20 * 4, 0, 4,
    )  # fmt: skip


class _NoCompiler:
    name = "cuda"
    index = 0

    def device_info(self) -> Any:
        return cpu_device_info()

    def make_stream(self, handle: int) -> Any:
        return handle


def test_an_unbound_backend_finds_core_kernels_only() -> None:
    backend = GpuBackend(_NoCompiler())  # type: ignore[arg-type]
    core = backend.resolve_source(f"{CORE_NAMESPACE}/miocore_utility.cu")
    assert core == core_kernel_dir() / "miocore_utility.cu"
    with pytest.raises(CompileError, match=r"no registry bound") as info:
        backend.resolve_source("igemm/igemm_mma.cu")
    assert info.value.field == "registry"

    class Registry:
        kernel_sources = ()

    backend.bind_registry(lambda: Registry())
    with pytest.raises(CompileError, match=r"not found in any declared folder"):
        backend.resolve_source("igemm/igemm_mma.cu")


def test_cuda_driver_compiles_with_the_real_nvrtc() -> None:
    cuda = pytest.importorskip("miocore.backends.cuda")
    if cuda._nvrtc is None:
        pytest.skip("cuda-bindings is not installed")
    try:
        cuda._nvrtc.nvrtcVersion()
    except Exception as exc:  # the wheel without its NVRTC library
        pytest.skip(f"NVRTC cannot load ({exc})")
    driver = object.__new__(cuda.CudaDriver)  # no device: only the compiler is used
    driver.major, driver.minor = 9, 0
    source = (core_kernel_dir() / "miocore_utility.cu").read_bytes()
    binary, kind = driver.compile_source(
        source, "miocore_utility.cu", ["-DMIO_DTYPE_FP16"], [core_kernel_dir()]
    )
    assert kind == "cubin" and binary[:4] == b"\x7fELF" and b"miocore_blend" in binary
    with pytest.raises(DriverCompileFailure) as info:
        driver.compile_source(b"__global__ void k() { undefined_name; }", "bad.cu", [], [])
    assert "undefined_name" in info.value.log_text
    assert "--gpu-architecture=sm_90" in info.value.log_text


def test_cupys_refusal_during_a_capture_says_what_to_install() -> None:
    """CuPy refuses cuBLAS calls on a capturing stream (NotImplementedError); miocore says
    why and what captures them (nvmath-python), and lets every other error through."""
    from miocore.backends import cuda_blas

    class Stream:
        def __init__(self, handle: int) -> None:
            self.handle = handle

        def __enter__(self) -> Stream:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    class Cupy:
        class cuda:  # CuPy's module name
            ExternalStream = Stream

    class Module:
        def create(self) -> int:
            return 1

        def setStream(self, handle: int, stream: int) -> None:
            pass

        def gemmEx(self, *args: Any) -> None:
            raise NotImplementedError("calling cuBLAS API during stream capture is unsupported")

        def gemmStridedBatchedEx(self, *args: Any) -> None:
            raise RuntimeError("CUBLAS_STATUS_INVALID_VALUE")

    binding = cuda_blas.CupyCublas(Module(), Cupy())
    binding.set_stream(1, 7)
    with pytest.raises(BackendUnavailableError, match="nvmath-python") as info:
        binding.gemm_ex(1, 2, 3)
    assert isinstance(info.value.__cause__, NotImplementedError)
    with pytest.raises(RuntimeError, match="INVALID_VALUE"):
        binding.gemm_strided_batched_ex(1, 2, 3)


def test_cublas_gets_a_workspace_of_its_own_on_every_stream() -> None:
    """Setting cuBLAS's stream puts it back on its default workspace, which a graph capture
    sets up anew: each stream the handle is pointed at gets an explicit workspace, made once
    and set again on every return to that stream, all freed with the handle; a binding
    without ``set_workspace`` (CuPy's, never captured) keeps cuBLAS's own."""
    import gc

    from miocore.backends import cuda_blas

    calls: list[tuple] = []

    class Binding:
        records_in_graphs = True

        def create(self) -> int:
            return 5

        def set_stream(self, handle: int, stream: int) -> None:
            calls.append(("stream", handle, stream))

        def set_workspace(self, handle: int, ptr: int, size: int) -> None:
            calls.append(("workspace", handle, ptr, size))

    allocated: list[int] = []
    freed: list[int] = []

    def alloc(nbytes: int) -> int:
        assert nbytes == cuda_blas.WORKSPACE_BYTES == 32 << 20
        allocated.append(0x1000 * (len(allocated) + 1))
        return allocated[-1]

    gemm = cuda_blas.CublasGemm(Binding(), alloc, freed.append)
    for stream in (7, 9, 7):
        gemm.set_stream(stream)
    size = cuda_blas.WORKSPACE_BYTES
    assert calls == [
        ("stream", 5, 7), ("workspace", 5, 0x1000, size),
        ("stream", 5, 9), ("workspace", 5, 0x2000, size),
        ("stream", 5, 7), ("workspace", 5, 0x1000, size),
    ]  # fmt: skip
    assert allocated == [0x1000, 0x2000] and not freed
    del gemm
    gc.collect()
    assert sorted(freed) == allocated

    class NoWorkspace(Binding):
        set_workspace = None

    calls.clear()
    plain = cuda_blas.CublasGemm(NoWorkspace(), alloc, freed.append)
    plain.set_stream(3)
    assert calls == [("stream", 5, 3)] and len(allocated) == 2


def test_cuda_launch_opts_in_to_large_shared_memory_once_per_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above 48 KiB of dynamic shared memory a function needs the driver's opt-in; it is asked
    once per function and larger size, not at every launch (a driver call on the hot path)."""
    from types import SimpleNamespace

    from miocore.backends import cuda

    calls: list[tuple[int, int]] = []

    def set_attribute(function: int, attribute: str, value: int) -> tuple[int]:
        calls.append((function, value))
        return (0,)

    fake = SimpleNamespace(
        cuFuncSetAttribute=set_attribute,
        cuLaunchKernel=lambda *args: (0,),
        CUfunction_attribute=SimpleNamespace(
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max dynamic shared"
        ),
    )
    monkeypatch.setattr(cuda, "_cu", fake)
    driver = object.__new__(cuda.CudaDriver)
    driver._shared_opt_in = {}
    for function, shared in ((7, 200_000), (7, 200_000), (7, 1024), (8, 100_000), (7, 220_000)):
        driver.launch(function, (1, 1, 1), (384, 1, 1), shared, None, 0)
    assert calls == [(7, 200_000), (8, 100_000), (7, 220_000)]
