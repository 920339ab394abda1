"""What the CUDA and HIP backends share: the handle's backend interface over a small driver.

A :class:`Driver` (``cuda.CudaDriver``, ``hip.HipDriver``) wraps one vendor binding with a
dozen primitives: allocate, copy, synchronise, events, compile a source to a binary, load a
binary, launch. :class:`GpuBackend` builds everything the handle and the solvers use on top of
them, identically for both vendors:

* arrays: ``check_array`` (PyTorch / CuPy / DLPack / own buffer, checked against the
  descriptor), ``empty``, ``random``, ``from_host``, ``to_host``, workspaces;
* compilation: ``compile(kernels)`` resolves each :class:`~miocore.solver.KernelInfo`'s source in
  the plugin folders declared through ``miocore_kernel_sources``, compiles it for the device's
  architecture through the binary cache (:mod:`miocore.db.kernel_cache`) and returns
  :class:`CompiledKernel` objects; ``precompile`` does many in parallel;
* timing with device events, and ``blend`` (alpha/beta) with the core's utility kernel;
* ``gemm``: the vendor BLAS (cuBLAS, hipBLAS) for solvers that lower to matrix products.

This module holds the driver protocol and the backend's streams, graph capture, timing, blend
and BLAS. The compilation methods come from :class:`~miocore.backends._gpu.compiler.KernelCompiler`
and the array methods from :class:`~miocore.backends._gpu.tensors.DeviceTensors`, mixed in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from miocore.backends._gpu.compiler import CORE_NAMESPACE, DTYPE_OPTIONS, KernelCompiler
from miocore.backends._gpu.launch import (
    CapturedGraph,
    CompiledKernel,
    KernelArgs,
    channels_last,
    grid_for,
    tensor5_bytes,
)
from miocore.backends._gpu.tensors import DeviceTensors
from miocore.db.kernel_cache import KernelCache
from miocore.errors import (
    CompileError,
    InvalidArgumentError,
    MiocoreError,
)
from miocore.problem.dtypes import DataType
from miocore.solver.interface import DeviceInfo, KernelInfo

log = logging.getLogger("miocore.gpu")

#: Clock cycles per millisecond of the spin kernel's lead (``clock64`` counts SM cycles, about
#: 2 GHz on the GPUs we run; a slower clock only lengthens the lead).
SPIN_CYCLES_PER_MS = 2_000_000
#: The longest lead, and the first (~0.25 ms): longer than the host needs to enqueue most
#: solutions' launches. Never more: an invoker that waits for the device inside its call
#: (an allocation that synchronizes) outlasts any lead, and a lead grown after it would
#: only be waited out.
MAX_LEAD_MS = 0.25
#: The shortest lead, and the lead per millisecond the last timed call's host side took.
MIN_LEAD_MS = 0.04
LEAD_PER_HOST_MS = 2.0


class Driver(Protocol):
    """The primitives one vendor binding provides (``cuda.py`` and ``hip.py``, on the shared
    steps of :class:`~miocore.backends._gpu.vendor.VendorDriver`)."""

    name: str
    index: int

    def device_info(self) -> DeviceInfo: ...
    def alloc(self, nbytes: int) -> int: ...
    def free(self, ptr: int) -> None: ...
    def copy_htod(self, dst: int, src: np.ndarray, stream: Any) -> None: ...
    def copy_dtoh(self, dst: np.ndarray, src: int, stream: Any) -> None: ...
    def memset(self, dst: int, nbytes: int, stream: Any) -> None: ...
    def synchronize(self, stream: Any) -> None: ...
    def make_stream(self, handle: int) -> Any: ...
    def event(self) -> Any: ...
    def record(self, event: Any, stream: Any) -> None: ...
    def elapsed_ms(self, start: Any, end: Any) -> float: ...
    def pointer_device(self, ptr: int) -> int | None: ...
    def target(self) -> str: ...
    def compiler_version(self) -> str: ...
    def compile_source(
        self, source: bytes, name: str, options: Sequence[str], include_dirs: Sequence[Path]
    ) -> tuple[bytes, str]: ...
    def load(self, binary: bytes) -> Any: ...
    def function(self, module: Any, name: str) -> Any: ...
    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: Any,
        params: int,
    ) -> None: ...


# -- the backend -------------------------------------------------------------------------------


class GpuBackend(KernelCompiler, DeviceTensors):
    """The handle's view of one GPU: arrays, compile, launch, timing, BLAS (see module doc)."""

    def __init__(self, driver: Driver, stream: Any = None) -> None:
        self.driver = driver
        self.name = driver.name
        self.index = driver.index
        self.device = driver.device_info()
        self.torch_device = f"cuda:{self.index}"
        self._registry_fn: Callable[[], Any] | None = None
        self._lock = threading.RLock()
        self._modules: dict[str, Any] = {}
        self._functions: dict[tuple[str, str], Any] = {}
        self._failures: dict[str, CompileError] = {}
        self._binaries: dict[str, bytes] = {}
        self._parts_memo: dict[tuple[Any, ...], Any] = {}
        self._on_disk: set[str] = set()
        self._cache: KernelCache | None = None
        self._blas: Any = None
        self._capture_stream: Any = None
        #: How long the next timed call's spin kernel holds the stream (see ``time_ms``).
        self._lead_ms = MAX_LEAD_MS
        #: Where binaries came from in this process: compiled, disk cache, memory.
        self.stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}
        self.stream_handle = 0
        self.stream_object: Any = None
        self.set_stream(stream)

    def __repr__(self) -> str:
        return f"<{self.name} backend {self.device.identity} stream=0x{self.stream_handle:x}>"

    # -- streams -----------------------------------------------------------------------------

    def set_stream(self, stream: Any) -> None:
        """Run on ``stream``: None (the default stream), a raw handle (int), a PyTorch stream,
        a CuPy stream, or any object with ``__cuda_stream__``."""
        self.stream_handle = stream_handle(stream)
        self.stream_object = self.driver.make_stream(self.stream_handle)
        if self._blas is not None:
            self._blas.set_stream(self.stream_handle)

    def synchronize(self) -> None:
        """Wait for everything queued on this backend's stream."""
        self.driver.synchronize(self.stream_object)

    def device_reference(
        self, problem: Any, arrays: dict[str, Any], images: int, channels: int
    ) -> Any:
        """find's accuracy check on the device: the float64 reference of the compared slice
        of ``problem``'s output, made from ``arrays`` (:mod:`miocore.backends._gpu.reference`)."""
        from miocore.backends._gpu.reference import DeviceReference

        return DeviceReference(self, problem, arrays, images, channels)

    # -- graphs ----------------------------------------------------------------------------

    def capture(self, run: Callable[[], None], min_nodes: int = 2) -> CapturedGraph | None:
        """Record the launches ``run`` makes as one graph, without running them.

        None, with nothing recorded kept, when the driver has no graphs, this backend's stream
        is being captured by someone else (a graph the caller records), ``run`` raised, called
        a BLAS binding that a capture does not record (CuPy's), or made fewer than
        ``min_nodes`` launches (by default one launch is not kept: a replay costs as much as
        launching our own kernel; a library call with a dear host side is worth replaying
        alone). The caller then runs ``run`` itself, which redoes whatever ran during the
        attempt.
        """
        driver = self.driver
        if not hasattr(driver, "capture_begin") or driver.is_capturing(self.stream_object):
            return None
        handle = self.stream_handle
        # One recording stream per backend: libraries keep per-stream state (cuBLAS its
        # workspace), so a new stream per recording would leave that state behind each time.
        if self._capture_stream is None:
            self._capture_stream = driver.capture_stream()
        stream = self._capture_stream
        graph, nodes, failed = None, 0, False
        blas_calls = getattr(self._blas, "calls", 0)
        try:
            self.set_stream(int(stream))  # BLAS moves too, before the stream records
            driver.capture_begin(stream)
            try:
                run()
            except Exception:
                failed = True
            finally:
                try:
                    graph, nodes = driver.capture_end(stream)
                except Exception:  # the library broke the capture: nothing recorded
                    failed = True
        except Exception:
            failed = True
        finally:
            self.set_stream(handle)
        blas = self._blas
        if getattr(blas, "calls", 0) != blas_calls and not getattr(blas, "records_in_graphs", 0):
            failed = True  # the BLAS ran outside the recording: the graph would miss it
        if graph is not None and (failed or nodes < min_nodes):
            driver.graph_destroy(graph, None)
        if graph is None or failed or nodes < min_nodes:
            return None
        return CapturedGraph(self, graph, driver.graph_instantiate(graph), nodes)

    # -- timing and alpha/beta -------------------------------------------------------------

    def time_ms(self, run: Callable[[], None]) -> float:
        """Device milliseconds of ``run`` between two events on this backend's stream.

        A spin kernel goes first, so ``run``'s launches are queued while the GPU is still
        busy: the events then time the device work alone, and a solution of several launches
        is not charged for the host's launch overhead (which ``immediate`` and
        ``run_solution`` add once per call, whatever solver runs). The spin lasts twice as
        long as the previous call's host side took (:data:`LEAD_PER_HOST_MS`, within
        :data:`MIN_LEAD_MS` and :data:`MAX_LEAD_MS`): a find times each candidate several
        times in a row, and a fixed quarter millisecond per run was most of a small layer's
        find."""
        driver = self.driver
        start, end = self._events()
        spin = self._spin()
        if spin is not None:
            spin.launch(self._spin_args(self._lead_ms), grid=(1,), block=(1,))
        began = time.perf_counter()
        driver.record(start, self.stream_object)
        run()
        driver.record(end, self.stream_object)
        host_ms = (time.perf_counter() - began) * 1e3
        self._lead_ms = min(MAX_LEAD_MS, max(MIN_LEAD_MS, LEAD_PER_HOST_MS * host_ms))
        return driver.elapsed_ms(start, end)

    def _spin(self) -> CompiledKernel | None:
        spin = getattr(self, "_spin_kernel", False)
        if spin is False:
            try:
                (spin,) = self.compile(
                    [
                        KernelInfo(
                            source=f"{CORE_NAMESPACE}/miocore_utility.cu",
                            kernel_name="miocore_spin",
                            options=(DTYPE_OPTIONS[DataType.FLOAT32],),
                        )
                    ]
                )
            except MiocoreError:  # timing still works, only with launch overhead included
                spin = None
            self._spin_kernel = spin
        return spin

    def _spin_args(self, lead_ms: float) -> KernelArgs:
        return KernelArgs([("i64", int(lead_ms * SPIN_CYCLES_PER_MS))])

    def _events(self) -> tuple[Any, Any]:
        events = getattr(self, "_event_pair", None)
        if events is None:
            events = self._event_pair = (self.driver.event(), self.driver.event())
        return events

    def blend(self, out: Any, result: Any, alpha: float, beta: float) -> None:
        """``out = alpha * result + beta * out`` in float32, with the core's utility kernel."""
        desc = out.desc
        (kernel,) = self.compile(
            [
                KernelInfo(
                    source=f"{CORE_NAMESPACE}/miocore_utility.cu",
                    kernel_name="miocore_blend",
                    options=(DTYPE_OPTIONS[desc.dtype],),
                    block=(256,),
                )
            ]
        )
        args = KernelArgs(
            [
                ("ptr", out.ptr),
                ("ptr", result.ptr),
                ("bytes", tensor5_bytes(desc)),
                ("f32", alpha),
                ("f32", beta),
                ("i32", int(channels_last(desc))),
            ]
        )
        kernel.launch(args, grid=(grid_for(desc.element_count, 256, self.device),))

    # -- BLAS ------------------------------------------------------------------------------

    @property
    def blas(self) -> Any:
        """The vendor BLAS of this backend, or None where its binding is not installed."""
        if self._blas is None:
            self._blas = self.driver.open_blas()  # type: ignore[attr-defined]
            if self._blas is not None:
                self._blas.set_stream(self.stream_handle)
        return self._blas or None


def stream_handle(stream: Any) -> int:
    """The raw stream handle of ``stream`` (see :meth:`GpuBackend.set_stream`)."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise InvalidArgumentError("expected a stream", field="stream", value=stream)
    if isinstance(stream, int):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        return int(value[1])
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise InvalidArgumentError(
        "expected a stream: an int handle, a torch.cuda.Stream, a cupy Stream or an object "
        "with __cuda_stream__",
        field="stream",
        value=type(stream).__name__,
    )
